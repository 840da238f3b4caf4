"""The load benchmark in quick mode against real servers: the shape of its report.

Timings are not asserted (the machine is shared), only that every level ran every request,
that every answer is right, that the numbers are ordered and positive, and that every goal
is judged. Two servers start and stop on 127.0.0.1 during the run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_bench

pytest.importorskip("onnxruntime")
pytest.importorskip("grpc")

ROOT = Path(__file__).resolve().parents[1]
GOALS = (
    "throughput at 16 clients / at 1 client",
    "e2e p50 over gRPC (Translate) at 1 client / in-process decode p50",
    "continuous / request-level batching throughput",
    "continuous / request-level batching e2e p99",
)


@pytest.fixture(scope="module")
def run(model_repository, translator_data, tmp_path_factory) -> tuple[dict, str]:
    """(report, markdown) of `python -m bench.load --quick --json`."""
    tmp = tmp_path_factory.mktemp("bench_load")
    arguments = [
        "--repository",
        str(model_repository),
        "--sources",
        str(translator_data / "test.es"),
    ]
    return run_bench("bench.load", arguments, tmp / "load.md", 600)


def _expected_levels(settings: dict) -> list[tuple]:
    levels = [("continuous", "closed", c["clients"]) for c in settings["closed"]]
    levels += [("continuous", "open", f) for f in settings["open_fractions"]]
    levels += [("request", "closed", c["clients"]) for c in settings["request_level"]]
    return levels


def _key(level: dict) -> tuple:
    value = level["clients"] if level["load"] == "closed" else level["fraction"]
    return level["server"], level["load"], value


def test_report_describes_the_machine_workload_and_servers(run):
    report, _ = run
    assert {"machine", "settings", "workload", "in_process", "levels", "ratios", "goals"} <= set(
        report
    )
    assert report["machine"]["usable_cpus"] >= 1 and report["machine"]["copy_bandwidth_gb_s"] > 0
    settings, workload = report["settings"], report["workload"]
    assert settings["quick"] and settings["workers"] >= 1 and settings["max_batch_rows"] == 64
    assert settings["slo_ms"] > 0
    for name in ("continuous", "request"):
        assert settings["servers"][name]["exit_code"] == 0  # drained and stopped by SIGTERM
        assert settings["servers"][name]["workers"] == settings["workers"]
    low, high = workload["targets"]
    assert 8 == low < high and low <= workload["target_mean"] <= high
    assert 0 < workload["near_target_in_process"] <= 1
    local = report["in_process"]["decode_ms"]
    assert 0 < local["p50"] <= local["p99"] and local["n"] == workload["pool"]
    turn = report["in_process"]["interleaved"]
    assert turn["errors"] == 0 and turn["correct"] == turn["requests"] > 0
    for key in ("grpc_e2e_ms", "in_process_ms"):
        assert 0 < turn[key]["p50"] <= turn[key]["p99"] and turn[key]["n"] == turn["requests"]


def test_every_level_ran_every_request_and_every_answer_is_right(run):
    report, markdown = run
    settings = report["settings"]
    levels = {_key(level): level for level in report["levels"]}
    assert list(levels) == _expected_levels(settings)
    counts = {("continuous", c["clients"]): c["requests_per_round"] for c in settings["closed"]}
    counts |= {
        ("request", c["clients"]): c["requests_per_round"] for c in settings["request_level"]
    }
    for (server, load, value), level in levels.items():
        if load == "closed":
            assert level["requests"] == settings["rounds"] * counts[server, value]
            assert len(level["round_throughput_rps"]) == level["rounds"] == settings["rounds"]
        else:
            assert level["requests"] == settings["open_requests"]
            assert 0 < level["rate_rps"] <= level["saturation_rps"]
        assert level["errors"] == {}, level["errors"]
        assert level["ok"] == level["correct"] == level["requests"] > 0
        assert level["identical_to_in_process"] == level["requests"]
        assert level["output_tokens"]["total"] > 0
        assert f"| {server} | {load}, " in markdown


def test_latencies_are_ordered_and_throughput_positive(run):
    report, _ = run
    for level in report["levels"]:
        for key in ("ttft_ms", "itl_ms", "e2e_ms"):
            spread = level[key]
            assert 0 < spread["p50"] <= spread["p99"], (key, spread)
        assert level["ttft_ms"]["p50"] <= level["e2e_ms"]["p99"]
        assert level["throughput_rps"] > 0 and level["output_tokens_per_s"] > 0
        assert 0 <= level["goodput_rps"] <= level["throughput_rps"]
        assert level["cpu_s"]["client"] > 0 and level["cpu_s"]["workers"] >= 0


def test_server_side_metrics_cross_check_the_client(run):
    report, _ = run
    for level in report["levels"]:
        metrics = level["server_metrics"]
        assert metrics["worker_restarts"] == 0
        assert metrics["steps"] > 0 and metrics["step_rows_mean"] >= 1
        # one token per row and step, the `</s>` step included: at least what came back
        assert metrics["generated_tokens"] >= level["output_tokens"]["total"]
        assert 0 < metrics["ttft_ms_mean"] <= level["e2e_ms"]["mean"]


def test_goals_are_judged_and_written(run):
    report, markdown = run
    goals = report["goals"]
    for text in GOALS:
        assert any(goal["goal"].startswith(text) for goal in goals), text
    for goal in goals:
        assert isinstance(goal["met"], bool) and goal["ratio"] > 0 and goal["target"] > 0
        assert goal["compare"] in ("<", "<=", ">=")
        assert goal["goal"] in report["ratios"] and goal["goal"] in markdown
