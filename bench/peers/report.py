"""The side-by-side run's figures as the goals' ratios (attnserve over LibreTranslate, HTTP
over gRPC), and the tables `python -m bench.peers` prints and docs/benchmarks.md holds."""

from __future__ import annotations

from bench.lib.reports import table_row

LIBRE = "libretranslate"  # LibreTranslate's /translate, on LibreTranslate
HTTP = "attnserve-v1"  # attnserve's /v1/translate, beam 4: "attnserve-HTTP" in the goals
GRPC = "attnserve-grpc"  # attnserve's gRPC Translate, beam 4
LIBRE_API = "attnserve-libre-api"  # LibreTranslate's /translate on attnserve (its defaults)
ARMS = (LIBRE, HTTP, GRPC, LIBRE_API)
LABELS = {
    LIBRE: "LibreTranslate 1.9.6, /translate",
    HTTP: "attnserve, /v1/translate",
    GRPC: "attnserve, gRPC",
    LIBRE_API: "attnserve, /translate (greedy)",
}


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator in (None, 0):
        return None
    return round(numerator / denominator, 3)


def _goal(name: str, figure: float | None, target: str, met) -> dict:
    return {
        "goal": name,
        "figure": figure,
        "target": target,
        "status": "not measured" if figure is None else ("met" if met(figure) else "missed"),
    }


def level(figures: dict, arm: str, clients: int) -> dict:
    """The closed loop of `arm` at `clients` clients ({} where it did not run)."""
    return figures.get("levels", {}).get(arm, {}).get(str(clients), {})


def goals(figures: dict) -> list[dict]:
    """Every goal with its ratio from the run's figures: levels[arm][clients] (sentences_per_s,
    p50_ms, p99_ms), document[arm] (seconds), bleu[part][arm], kept[kind] (share of what
    LibreTranslate kept that attnserve kept too)."""
    at64 = {arm: level(figures, arm, 64) for arm in (LIBRE, HTTP, GRPC)}
    at1 = {arm: level(figures, arm, 1) for arm in (LIBRE, HTTP)}
    document = figures.get("document", {})
    found = [
        _goal(
            "64 clients: attnserve-HTTP / LibreTranslate sentences/s",
            _ratio(at64[HTTP].get("sentences_per_s"), at64[LIBRE].get("sentences_per_s")),
            ">= 10",
            lambda x: x >= 10,
        ),
        _goal(
            "64 clients: attnserve-HTTP / LibreTranslate p99",
            _ratio(at64[HTTP].get("p99_ms"), at64[LIBRE].get("p99_ms")),
            "<= 0.2",
            lambda x: x <= 0.2,
        ),
        _goal(
            "1 client: attnserve-HTTP / LibreTranslate p50",
            _ratio(at1[HTTP].get("p50_ms"), at1[LIBRE].get("p50_ms")),
            "<= 0.4",
            lambda x: x <= 0.4,
        ),
        _goal(
            "60,000-character document: LibreTranslate / attnserve-HTTP seconds",
            _ratio(document.get(LIBRE, {}).get("seconds"), document.get(HTTP, {}).get("seconds")),
            ">= 6",
            lambda x: x >= 6,
        ),
    ]
    for part, arms in figures.get("bleu", {}).items():
        ours, theirs = arms.get(HTTP), arms.get(LIBRE)
        difference = None if ours is None or theirs is None else round(ours - theirs, 2)
        found.append(
            _goal(
                f"BLEU {part}: attnserve-HTTP - LibreTranslate",
                difference,
                ">= 0",
                lambda x: x >= 0,
            )
        )
    for kind, share in figures.get("kept", {}).items():
        found.append(
            _goal(
                f"{kind} LibreTranslate keeps, kept by attnserve-HTTP",
                share,
                ">= 0.99",
                lambda x: x >= 0.99,
            )
        )
    found.append(
        _goal(
            "64 clients: HTTP / gRPC sentences/s",
            _ratio(at64[HTTP].get("sentences_per_s"), at64[GRPC].get("sentences_per_s")),
            ">= 0.9",
            lambda x: x >= 0.9,
        )
    )
    return found


def kept_by_case(cases: list[tuple[str, list[str]]], outputs: list[str]) -> list[list[bool]]:
    """For each case, whether each of its items (or tags and entities) is found in its
    translation as often as in its source: bench.preservation's rule."""
    return [
        [output.count(item) >= items.count(item) for item in items]
        for (_, items), output in zip(cases, outputs, strict=True)
    ]


def kept_where_kept(ours: list[list[bool]], theirs: list[list[bool]]) -> float | None:
    """Of the items LibreTranslate kept, the share attnserve kept too."""
    pairs = [(o, t) for a, b in zip(ours, theirs, strict=True) for o, t in zip(a, b, strict=True)]
    theirs_kept = [o for o, t in pairs if t]
    if not theirs_kept:
        return None
    return round(sum(theirs_kept) / len(theirs_kept), 4)


def share(kept: list[list[bool]]) -> float:
    flat = [k for case in kept for k in case]
    return round(sum(flat) / len(flat), 4) if flat else 0.0


def _cell(value, digits: int = 1) -> str:
    if value is None:
        return ""
    return f"{value:,.{digits}f}" if isinstance(value, float) else str(value)


def markdown(figures: dict) -> str:
    """The tables: loads, the document, BLEU, what is kept, and the goals."""
    lines = [
        "| server, API | clients | sentences/s | p50 ms | p99 ms | failed |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for arm in ARMS:
        for clients, row in sorted(
            figures.get("levels", {}).get(arm, {}).items(), key=lambda kv: int(kv[0])
        ):
            lines.append(
                table_row(
                    [
                        LABELS[arm],
                        clients,
                        _cell(row["sentences_per_s"]),
                        _cell(row["p50_ms"]),
                        _cell(row["p99_ms"]),
                        row["failed"],
                    ]
                )
            )
    document = figures.get("document", {})
    if document:
        lines += ["", "| server, API | document characters | sentences | seconds |"]
        lines.append("|---|--:|--:|--:|")
        for arm in ARMS:
            if arm in document:
                row = document[arm]
                lines.append(
                    table_row(
                        [LABELS[arm], f"{row['characters']:,}", row.get("sentences", ""),
                         _cell(row["seconds"], 2)]
                    )
                )  # fmt: skip
    bleu = figures.get("bleu", {})
    if bleu:
        arms = [arm for arm in ARMS if any(arm in row for row in bleu.values())]
        lines += [
            "",
            "| part | sentences | " + " | ".join(f"BLEU {LABELS[a]}" for a in arms) + " |",
            "|---|--:|" + "--:|" * len(arms),
        ]
        for part, row in bleu.items():
            cells = [part, figures.get("part_sizes", {}).get(part, "")]
            lines.append(table_row(cells + [_cell(row.get(a), 2) for a in arms]))
    preserved = figures.get("preservation", {})
    if preserved:
        lines += [
            "",
            "| cases | items | " + " | ".join(f"kept, {LABELS[a]}" for a in preserved) + " |",
            "|---|--:|" + "--:|" * len(preserved),
        ]
        kinds = next(iter(preserved.values()))
        for kind in kinds:
            cells = [kind, kinds[kind]["items"]]
            cells += [f"{preserved[a][kind]['kept']:.1%}" for a in preserved]
            lines.append(table_row(cells))
    lines += ["", "| goal | figure | target | status |", "|---|--:|--:|---|"]
    for goal in goals(figures):
        lines.append(
            table_row([goal["goal"], _cell(goal["figure"], 3), goal["target"], goal["status"]])
        )
    return "\n".join(lines)
