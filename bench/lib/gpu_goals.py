"""The GPU benchmark's goals table: each goal met, missed, or not measured, with the measured
figure (the engine level's fastest fp16 engine, its batch-1 step, the service level)."""

from __future__ import annotations

from bench.lib.engine_workers import FP16_ENGINES
from bench.lib.service_level import SENTENCE_TOKENS


def _case(report: dict, engine: str, batch: int, beam: int = 1) -> dict | None:
    for row in report.get("engine", {}).get("cases", []):
        if (row["engine"], row["batch"], row["beam"]) == (engine, batch, beam):
            return row
    return None


def _fastest_fp16(report: dict, batch: int) -> dict | None:
    """The greedy case at `batch` of the fp16 engine with the most tokens/s."""
    cases = [c for c in (_case(report, name, batch) for name in FP16_ENGINES) if c is not None]
    return max(cases, key=lambda c: c["tokens_per_s"]["median"], default=None)


def _goal(text: str, measured, compare: str, target: float, unit: str, note: str = "") -> dict:
    if measured is None:
        status = "not measured"
    else:
        met = measured >= target if compare == ">=" else measured <= target
        status = "met" if met else "missed"
    return {
        "goal": text,
        "measured": measured,
        "compare": compare,
        "target": target,
        "unit": unit,
        "status": status,
        "note": note,
    }


def _engine_goals(report: dict) -> list[dict]:
    rows = []
    for batch, target in ((256, 400_000), (1024, 1_000_000)):
        case = _fastest_fp16(report, batch)
        rate = case["tokens_per_s"]["median"] if case else None
        text = f"engine fp16 greedy tokens/s at batch {batch}"
        rows.append(_goal(text, rate, ">=", target, "tokens/s", case["engine"] if case else ""))
    case = _fastest_fp16(report, 256)
    ratio = case["vs_torch"] if case else None
    text = "engine fp16 greedy / PyTorch eager tokens/s at batch 256"
    rows.append(_goal(text, ratio, ">=", 5.0, "x", case["engine"] if case else ""))
    steps = {
        name: e["single_step_ms"]["median"]
        for name, e in report.get("engine", {}).get("engines", {}).items()
        if name.startswith("ort-") and "single_step_ms" in e
    }
    best = min(steps, key=steps.get) if steps else None
    text = "batch-1 decoder step (median, fastest onnxruntime engine)"
    rows.append(_goal(text, steps.get(best), "<=", 0.25, "ms", best or ""))
    return rows


def _service_goals(report: dict) -> list[dict]:
    load = report.get("load", {})
    sentence = load.get("sentence", {}) if load.get("status") == "run" else {}
    latency = (sentence.get("latency_ms") or {}).get("p50")
    text = f"{SENTENCE_TOKENS}-token sentence over gRPC at 1 client, p50"
    status = load.get("status", "not run")
    rows = [_goal(text, latency, "<=", 20.0, "ms", "" if status == "run" else status)]
    level = next((v for v in load.get("levels", []) if v["clients"] == 256), None)
    rate = level["tokens_per_s"] if level else None
    p99 = level["latency_ms"]["p99"] if level and level["latency_ms"] else None
    rows.append(_goal("server tokens/s at 256 clients", rate, ">=", 100_000, "tokens/s"))
    rows.append(_goal("server p99 latency at 256 clients", p99, "<=", 1000.0, "ms"))
    return rows


def goals(report: dict) -> list[dict]:
    """The goals table: each met, missed, or not measured."""
    return _engine_goals(report) + _service_goals(report)
