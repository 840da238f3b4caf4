"""The GPU benchmark in quick mode on the CPU: the shape of its report.

`python -m bench.gpu --device cpu --quick --load` (the server with the static cache, 1 and 3
clients) on a small random translator (the shipped
tokenizer; its embedding scaled up so that greedy decodes are far from ties, fp16 included),
which the benchmark exports and certifies itself: the shipped model's export and parity suite
alone take minutes on two cores. Timings are not asserted, only that every section is there,
that every engine passed parity and ran every case with positive figures, and that every goal
is judged. The scaled logits are too large for the certificate's absolute graph tolerance, so
whether the certificate passed is not asserted (the benchmark's own parity check is).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT, SHIPPED_TRANSLATOR, tiny_transformer

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.slow

ENGINES = ("ort-fp32", "ort-fp16", "torch-fp32")
QUICK_CASES = {(1, 1), (16, 1), (1, 4), (16, 4)}  # (batch, beam)
EMBEDDING_SCALE = 60.0  # decisive logits: no near tie for fp16 to flip on the test sentences


@pytest.fixture(scope="module")
def run(tmp_path_factory, translator_data) -> tuple[dict, str]:
    """(report, markdown) of a quick CPU run, the service level included."""
    from models.checkpoint import save_checkpoint
    from service.runtime.tokenizer import Tokenizer

    tmp = tmp_path_factory.mktemp("bench_gpu")
    tokenizer = SHIPPED_TRANSLATOR / "tokenizer.model"
    model = tiny_transformer(vocab_size=Tokenizer(tokenizer).vocab_size)
    with torch.no_grad():
        model.source_embedding.weight.mul_(EMBEDDING_SCALE)  # shared with the output layer
    save_checkpoint(model, tokenizer, tmp / "checkpoint")
    command = [
        sys.executable,
        "-m",
        "bench.gpu",
        "--device",
        "cpu",
        "--quick",
        "--load",
        "--checkpoint",
        str(tmp / "checkpoint"),
        "--out",
        str(tmp / "out"),
        "--server-cache",
        "static",
        "--clients",
        "1,3",
        "--level-seconds",
        "3",
    ]
    done = subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads((tmp / "out" / "benchmarks-gpu.json").read_text())
    return report, (tmp / "out" / "benchmarks-gpu.md").read_text(encoding="utf-8")


def test_machine_and_repository(run):
    report, text = run
    machine = report["machine"]
    assert machine["device"] == "cpu"
    assert machine["bandwidth_gb_s"] > 0
    assert all(rate > 0 for rate in machine["matmul_tflop_s"].values())
    repository = report["repository"]
    certificate = repository["certificate"]
    parts = certificate["parts"]  # --quick: 8 of every test part, below the export's 200
    assert set(parts.values()) == {8} and {"bible", "everyday"} <= set(parts)
    assert certificate["sentences"] == sum(parts.values())
    assert repository["exported"] and repository["export_status"] == (
        0 if certificate["passed"] else 1
    )
    assert {"fp32", "fp16"} <= set(repository["variants"])
    assert text.startswith("# GPU benchmark") and f"onnxruntime {machine['onnxruntime']}" in text


def test_every_engine_passes_parity_and_runs_every_case(run):
    report, text = run
    assert "| ms/step | in runs ms/step | encoder ms |" in text
    engine = report["engine"]
    assert set(engine["engines"]) == set(ENGINES)
    for name, entry in engine["engines"].items():
        parity = entry["parity"]
        assert entry["trusted"], (name, entry)
        assert parity["identical"] == parity["sentences"] == engine["settings"]["parity_sentences"]
        assert entry["single_step_ms"]["median"] > 0
    ran = {(c["engine"], c["batch"], c["beam"]) for c in engine["cases"]}
    assert ran == {(name, b, k) for name in ENGINES for b, k in QUICK_CASES}
    assert not engine["skipped"]
    for case in engine["cases"]:
        assert case["tokens"] == case["batch"] * case["length"] == case["batch"] * 16
        assert case["rounds"] >= 1
        assert case["tokens_per_s"]["min"] > 0 and case["ms_per_step"]["median"] > 0
        assert case["limit"]["ms"] > 0 and case["of_limit"] > 0
        assert case["limit"]["weight_bytes"] > 0 and case["limit"]["flops"] > 0
        assert case["vs_torch"] > 0
        runs = case["runtime_ms_per_step"]  # onnxruntime's part of a step, PyTorch has none
        if case["engine"] == "torch-fp32":
            assert runs is None
        else:
            assert 0 < runs["median"] <= case["ms_per_step"]["median"]
    fp16 = [c for c in engine["cases"] if c["engine"] == "ort-fp16"]
    fp32 = {(c["batch"], c["beam"]): c for c in engine["cases"] if c["engine"] == "ort-fp32"}
    for case in fp16:  # half the weight and cache bytes
        twin = fp32[case["batch"], case["beam"]]
        assert case["limit"]["weight_bytes"] * 2 == twin["limit"]["weight_bytes"]


def test_service_level(run):
    report, text = run
    load = report["load"]
    from bench.lib.service_level import _missing_for_server

    if _missing_for_server() is not None:  # the server's own packages are not installed
        pytest.skip(load["status"])
    assert load["status"] == "run", load["status"][:2000]
    assert [level["clients"] for level in load["levels"]] == [1, 3]  # as asked
    assert load["flags"]["cache"] == "static"  # the served step of CUDA graphs, over gRPC
    from service.front.config import ServerConfig

    fronts = ServerConfig().front_choice()[0]  # no --fronts: the default for these cores
    assert "fronts" not in load["flags"] and load["fronts"] == fronts
    assert f"{fronts} front process(es)" in text
    for level in load["levels"]:
        assert level["requests"] > 0 and not level["errors"]
        assert level["requests_per_s"] > 0 and level["tokens_per_s"] > 0
        assert 0 < level["latency_ms"]["p50"] <= level["latency_ms"]["p99"]
        assert level["cpu_s"]["front"] > 0 and level["cpu_s"]["workers"] > 0
        assert level["cpu_s"]["client"] > 0
    sentence = load["sentence"]
    assert sentence["calls"] > 0 and not sentence["errors"]
    assert 0 < sentence["output_tokens"] <= sentence["max_length"] == 30
    assert sentence["latency_ms"]["p50"] > 0
    assert "## Service level (gRPC)" in text
    # the workers' loops over each level, by phase: steps ran, waited for and read back
    from service.worker.loop_clock import PHASES

    for server in [level["server"] for level in load["levels"]] + [sentence["server"]]:
        assert server["steps"] > 0 and set(server["loop_seconds"]) == set(PHASES)
        # the admission rounds: how often the encoder ran, for how long, and the wait
        assert server["encoder_runs"] > 0 and server["encoder_ms_mean"] > 0
        assert server["queue_wait_ms_mean"] >= 0 and server["ttft_ms_p50"] > 0
        assert all(server["loop_seconds"][p] > 0 for p in ("prepare", "run", "outputs"))
    assert "| clients | steps | " + " | ".join(PHASES) + " | busy | outbox |" in text
    assert all(level["server"]["outbox_seconds"] > 0 for level in load["levels"])
    assert "\n| 1 (sentence) | " in text


def test_a_line_a_level_reads_the_report(run, tmp_path, capsys):
    """bench.gpu_levels, as gpu.sh prints several servers side by side: a line a level with
    its clients and tokens/s, the fronts' CPU a call from the level's own figures, then the
    sentence's latency and the loop's time a step by phase; a report that is not there is
    named, not a crash."""
    from bench import gpu_levels
    from service.worker.loop_clock import PHASES

    report, _ = run
    load = report["load"]
    if load.get("status") != "run":
        pytest.skip(load["status"])
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    assert gpu_levels.main([str(path), "cpu", str(tmp_path / "none.json"), "gone"]) == 0
    lines = capsys.readouterr().out.splitlines()
    levels = load["levels"]
    for line, level in zip(lines, levels, strict=False):
        fields = dict(f.split("=", 1) for f in line.split()[1:])
        assert line.startswith("cpu ") and int(fields["clients"]) == level["clients"]
        assert float(fields["tokens/s"].replace(",", "")) == pytest.approx(
            level["tokens_per_s"], abs=0.5
        )
        calls = level["requests_per_s"] * level["seconds"]
        per_call = 1000 * level["cpu_s"]["front"] / calls
        assert float(fields["front_ms_a_call"]) == pytest.approx(per_call, abs=0.005)
        assert int(fields["restarts"]) == level["server"]["worker_restarts"]
    sentence = lines[len(levels)]
    p50 = load["sentence"]["latency_ms"]["p50"]
    assert sentence.startswith("cpu sentence p50=") and f"p50={p50:,.2f}" in sentence
    phases = lines[len(levels) + 1]
    assert phases.startswith("cpu sentence loop ms a step: ")
    assert [f.split("=")[0] for f in phases.split(": ")[1].split()] == sorted(PHASES)
    assert lines[-1].startswith("gone: no report")
    with pytest.raises(SystemExit) as refused:  # a report without its label
        gpu_levels.main(["only-a-path"])
    assert refused.value.code == 2


def test_goals_are_judged(run):
    report, text = run
    goals = {g["goal"]: g for g in report["goals"]}
    assert len(goals) == 7
    for goal in goals.values():
        assert goal["status"] in ("met", "missed", "not measured")
        if goal["measured"] is not None:
            assert goal["measured"] > 0
    step = goals["batch-1 decoder step (median, fastest onnxruntime engine)"]
    assert step["status"] in ("met", "missed")  # measured at any batch list
    assert "## Goals" in text
