"""The load benchmark in quick mode against real servers serving both models: the shape of its
report.

Timings are not asserted (the machine is shared), only that every level ran every request,
that every answer is right, that the numbers are ordered and positive, and that every goal
is judged, for translations and for captions. Two servers start and stop on 127.0.0.1 during
the run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_bench

pytest.importorskip("onnxruntime")
pytest.importorskip("grpc")

ROOT = Path(__file__).resolve().parents[2]
GOALS = (
    "throughput at 16 clients / at 1 client",
    "e2e p50 over gRPC (Translate) at 1 client / in-process decode p50",
    "continuous / request-level batching throughput",
    "continuous / request-level batching e2e p99",
    "throughput over gRPC at 16 clients / the same requests through the same scheduler",
)
CAPTION_GOALS = (
    "caption e2e p50 over gRPC (Caption) at 1 client / in-process p50",
    "translation e2e p99 beside captions / alone",
)


@pytest.fixture(scope="module")
def run(model_repository, translator_data, captioner_data, tmp_path_factory) -> tuple[dict, str]:
    """(report, markdown) of `python -m bench.load --quick --json`."""
    tmp = tmp_path_factory.mktemp("bench_load")
    arguments = [
        "--repository",
        str(model_repository),
        "--sources",
        str(translator_data / "test.es"),
        "--captioner-data",
        str(captioner_data),
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


@pytest.mark.slow
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


def test_the_same_requests_ran_through_the_same_scheduler_in_process(run):
    report, _ = run
    loop, settings = report["in_process"]["scheduler_loop"], report["settings"]
    assert loop["clients"] == 16 and loop["processes"] == settings["workers"]
    assert len(loop["rounds"]) == settings["rounds"] and loop["failed"] == 0
    count = next(c["requests_per_round"] for c in settings["closed"] if c["clients"] == 16)
    for run_ in loop["rounds"]:
        assert len(run_["parts"]) == loop["processes"]
        assert 0 < sum(p["requests"] for p in run_["parts"]) <= count
        assert all(p["seconds"] > 0 and p["tokens"] > 0 for p in run_["parts"])
    assert loop["throughput_rps"] > 0 and loop["tokens_per_s"] > loop["throughput_rps"]


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


def _answered(level: dict, requests: int) -> None:
    """Every request of a level answered, right, identical to the in-process answer."""
    assert level["requests"] == requests > 0
    assert level["errors"] == {}, level["errors"]
    assert level["ok"] == level["correct"] == level["identical_to_in_process"] == requests
    for key in ("ttft_ms", "itl_ms", "e2e_ms"):
        if key != "itl_ms" or level[key] is not None:  # a one-token caption has no gap
            assert 0 < level[key]["p50"] <= level[key]["p99"], key
    assert level["throughput_rps"] > 0 and 0 <= level["goodput_rps"] <= level["throughput_rps"]
    assert level["server_metrics"]["worker_restarts"] == 0
    assert level["server_metrics"]["steps"] > 0
    assert level["server_metrics"]["generated_tokens"] >= level["output_tokens"]["total"]


def test_captions_are_served_beside_translations_and_all_right(run):
    report, markdown = run
    part = report["captioner"]
    assert {"settings", "workload", "in_process", "levels", "mixed", "ratios", "goals"} <= set(part)
    workload, settings = part["workload"], part["settings"]
    assert workload["pool"] >= max(c["requests_per_round"] for c in settings["closed"])
    assert 0 < workload["output_tokens_in_process_mean"] <= workload["max_length"]
    assert 0 <= workload["finished_in_process"] <= 1 and workload["png_bytes_mean"] > 0
    local = part["in_process"]["decode_ms"]
    assert 0 < local["p50"] <= local["p99"] and local["n"] == workload["pool"]
    turn = part["in_process"]["interleaved"]
    assert turn["errors"] == 0 and turn["correct"] == turn["requests"] > 0
    for key in ("grpc_e2e_ms", "grpc_unary_e2e_ms", "in_process_ms"):
        assert 0 < turn[key]["p50"] <= turn[key]["p99"] and turn[key]["n"] == turn["requests"]
    levels = part["levels"]
    assert [(lv["server"], lv["load"], lv["clients"]) for lv in levels] == [
        ("continuous", "closed", c["clients"]) for c in settings["closed"]
    ]
    rounds = report["settings"]["rounds"]
    for level, spec in zip(levels, settings["closed"], strict=True):
        assert level["model"] == "captioner" and level["rounds"] == rounds
        _answered(level, rounds * spec["requests_per_round"])
        assert f"| captions, continuous | closed, {level['clients']} client" in markdown


def test_mixed_traffic_runs_the_same_translations_alone_and_beside_captions(run):
    report, markdown = run
    part, settings = report["captioner"], report["captioner"]["settings"]
    mixed, rounds = part["mixed"], settings["mixed_rounds"]
    assert mixed["rounds"] == rounds >= 1 and mixed["fraction"] == settings["mixed_fraction"]
    assert 0 < mixed["rate_rps"] <= mixed["saturation_rps"]
    share = settings["caption_rate_share"]
    assert mixed["caption_rate_rps"] == pytest.approx(share * mixed["rate_rps"])
    translations = settings["mixed_requests"]["translations"]
    _answered(mixed["alone"], rounds * translations)
    _answered(mixed["mixed"], rounds * translations)
    _answered(mixed["captions"], rounds * settings["mixed_requests"]["captions"])
    for key in ("alone", "mixed"):
        assert len(mixed[key]["round_e2e_p99_ms"]) == rounds
        assert all(p99 > 0 for p99 in mixed[key]["round_e2e_p99_ms"])
    assert mixed["captions"]["model"] == "captioner" and "model" not in mixed["alone"]
    for what in ("translations alone", "translations beside captions", "captions beside"):
        assert f"| {what}" in markdown


def test_caption_goals_are_judged_and_written(run):
    report, markdown = run
    part = report["captioner"]
    for text in CAPTION_GOALS:
        assert any(goal["goal"].startswith(text) for goal in part["goals"]), text
    for goal in part["goals"]:
        assert isinstance(goal["met"], bool) and goal["ratio"] > 0 and goal["target"] > 0
        assert goal["compare"] == "<=" and goal["met"] == (goal["ratio"] <= goal["target"])
        assert part["ratios"][goal["goal"]] == goal["ratio"] and goal["goal"] in markdown
    assert any(k.startswith("caption throughput at 16 clients") for k in part["ratios"])
    assert all(v is None or v > 0 for v in part["ratios"].values())
