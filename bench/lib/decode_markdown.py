"""The decode benchmark's report as Markdown: the machine, then a table a model part with
its goals' verdicts."""

from __future__ import annotations


def _machine_text(m: dict) -> str:
    return (
        f"{m['cpu']}, {m['usable_cpus']} CPUs; copy {m['copy_bandwidth_gb_s']:.1f} GB/s; float32 "
        f"matmul {m['matmul_gflop_s']:.1f} GFLOP/s on one thread; OPENBLAS_CORETYPE="
        f"{m['environment']['OPENBLAS_CORETYPE']}."
    )


def _median_range(spread: dict, digits: int) -> str:
    return f"{spread['median']:.{digits}f} [{spread['min']:.{digits}f}, {spread['max']:.{digits}f}]"


def _verdicts(part: dict, output: str, unit: str) -> list[str]:
    """The goals table, the other ratios and the parity of one model's part."""
    lines = ["", "| goal | ratio | target | |", "|---|--:|--:|---|"]
    for g in part["goals"]:
        verdict = "met" if g["met"] else "missed"
        target = f"{g['compare']} {g['target']:g}"
        lines.append(f"| {g['goal']} | {g['ratio']:.2f} | {target} | {verdict} |")
    goals = {g["goal"] for g in part["goals"]}
    lines += [""] + [f"- {k}: {v:.2f}" for k, v in part["ratios"].items() if k not in goals and v]
    for name, p in sorted(part["parity"].items()):
        same = f"{p['identical']}/{p[unit]}"
        lines.append(f"- {name} greedy {output} identical to PyTorch: {same} {unit}")
    return lines


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = []
    if "engines" in report:
        lines += _translator_markdown(report)
    if "captioner" in report:
        lines += [""] if lines else [_machine_text(m), ""]
        lines += _captioner_markdown(report["captioner"])
    return "\n".join(lines) + "\n"


def _translator_markdown(report: dict) -> list[str]:
    m, s = report["machine"], report["settings"]
    lines = [
        f"{_machine_text(m)} One compute thread per engine; "
        f"{s['rounds']} rounds after {s['warmup']} warm-up, median [min, max]. tokens/s: "
        "batch × tokens over the whole call; ms/step: decode after the encoder over tokens; "
        "of bound: the least time a step can take on this machine over ms/step.",
        "",
        "| engine | batch | beam | tokens | tokens/s | ms/step | encoder ms | of bound | RSS MB |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, engine in report["engines"].items():
        for c in engine["cases"]:
            tps, step = c["tokens_per_s"], c["ms_per_step"]
            cells = [name, c["batch"], c["beam"], c["length"]]
            cells += [_median_range(tps, 0), _median_range(step, 2)]
            cells += [f"{c['encoder_ms']['median']:.2f}", f"{c['bound_fraction']:.0%}"]
            cells.append(f"{engine['peak_rss_mb']:.0f}")
            lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines + _verdicts(report, "output", "sentences")


def _captioner_markdown(part: dict) -> list[str]:
    s = part["settings"]
    lines = [
        f"Captioner: the first {max(s['batches'])} of the test images, every caption to its "
        f"natural end (at most {s['max_length']} tokens, `</s>` included). One compute thread "
        f"per engine; {s['rounds']} rounds after {s['warmup']} warm-up, median [min, max]. "
        "tokens: output tokens of the best captions; steps: decoding steps of the call; "
        "captions/s: batch over the whole call (pixels and encoder included); ms/caption: its "
        "inverse; ms/step: decode after the encoder over steps.",
        "",
        "| engine | batch | beam | tokens | steps | captions/s | ms/caption | ms/step "
        "| encoder ms | RSS MB |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, engine in part["engines"].items():
        for c in engine["cases"]:
            rate, each, step = c["captions_per_s"], c["ms_per_caption"], c["ms_per_step"]
            cells = [name, c["batch"], c["beam"], c["tokens"], c["steps"]]
            cells += [_median_range(rate, 1), _median_range(each, 2), _median_range(step, 3)]
            cells += [f"{c['encoder_ms']['median']:.2f}", f"{engine['peak_rss_mb']:.0f}"]
            lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines + _verdicts(part, "captions", "images")
