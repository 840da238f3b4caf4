"""bench.version_load, one short round each way on the CPU: what it reports holds."""

from __future__ import annotations

import json

from bench import version_load


def test_version_load_bench_reports_both_ways(tmp_path, translator_data, exported_translator):
    version, _ = exported_translator
    out = tmp_path / "version-load.json"
    argv = ["--repository", str(version.directory), "--sources", str(translator_data / "test.es")]
    argv += ["--clients", "4", "--max-length", "8", "--rounds", "1", "--before", "1"]
    assert version_load.main([*argv, "--after", "0.3", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["rounds"]) == {"beside", "between steps"}
    for way, (figures,) in report["rounds"].items():
        assert figures["load_seconds"] > 0 and figures["jobs_per_second_before"] > 0, way
        assert figures["longest_gap_ms_during"] > 0 and figures["longest_job_ms_in_flight"] > 0
        assert report["median"][way] == figures
    # the worker answers jobs while the copy loads beside its loop
    assert report["rounds"]["beside"][0]["answered_during"] >= 1
