"""bench.static_step and bench.scheduler_step, run small on the CPU: what they report holds."""

from __future__ import annotations

import json

from bench import scheduler_step, static_step


def test_static_step_bench_reports_every_way_with_identical_tokens(tmp_path, translator_data):
    code = static_step.main(
        [
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
            "--batches",
            "3",
            "--length",
            "4",
            "--rounds",
            "1",
            "--variants",
            "fp32",
            "--capacity",
            "16",
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "static-step.json").read_text())
    rows = {r["way"]: r for r in report["rows"]}
    assert set(rows) == {"growing", "fixed", "in place"}  # no CUDA graphs on the CPU
    assert rows["in place"]["bucket"] == 4 and rows["in place"]["step_only_ms"] > 0
    assert rows["fixed"]["bucket"] == 4 and rows["fixed"]["memory"] % 16 == 0
    assert all(r["identical_rows"] == 3 and r["tokens_per_s"] > 0 for r in rows.values())
    assert rows["fixed"]["step_only_ms"] > 0 and rows["growing"]["step_only_ms"] is None
    memcpy = report["memcpy_nodes"]["fp32"]
    assert memcpy["fixed"] == memcpy["in place"] == 0
    assert "| fp32 | 3 | fixed | 4 |" in (tmp_path / "static-step.md").read_text()


def test_scheduler_step_bench_steps_every_job(capsys):
    assert scheduler_step.per_step_seconds(jobs=8, steps=5) > 0
    assert scheduler_step.per_step_seconds(jobs=8, steps=5, beam=4) > 0
    assert scheduler_step.main(["--jobs", "8", "--steps", "5", "--rounds", "1"]) == 0
    assert capsys.readouterr().out.startswith("8 jobs, beam 1: ")
    assert scheduler_step.main(["--jobs", "3", "--beam", "2", "--steps", "5", "--rounds", "1"]) == 0
    assert capsys.readouterr().out.startswith("3 jobs, beam 2: ")
    assert (
        scheduler_step.main(["--jobs", "4", "--beam-jobs", "2", "--steps", "5", "--rounds", "1"])
        == 0
    )
    assert capsys.readouterr().out.startswith("4 jobs, beam 1 and 2 of beam 4: ")


def test_memcpy_count_covers_every_graph_a_version_ships(tmp_path, exported_translator):
    version = exported_translator[0]
    assert (
        static_step.main(
            ["--out", str(tmp_path), "--device", "cpu", "--memcpy-of", str(version.directory)]
        )
        == 0
    )
    counts = json.loads((tmp_path / "memcpy.json").read_text())
    assert set(counts) == {"fp32", "int8", "ops"}
    assert set(counts["fp32"]) == set(version.manifest["graphs"]["fp32"])  # every step
    assert {"join_float32", "join_int64", "gather_float32", "search_float32"} <= set(counts["ops"])
    assert all(n == 0 for graphs in counts.values() for n in graphs.values())  # none on a CPU
