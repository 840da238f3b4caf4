"""LibreTranslate against attnserve, side by side, one server at a time on this machine.

LibreTranslate 1.9.6 (`bench/peers/.venv`, `bash bench/peers/setup.sh`) serves the shipped
translator's weights as an Argos package (`bench.peers.package`: CTranslate2 int8, the
checkpoint's SentencePiece model, a blank spaCy pipeline as its sentence splitter) on
127.0.0.1 with only es/en loaded; it decodes with beam 4 (argos's default). Then attnserve
(`attnserve serve`, int8, the response cache off) serves data/repository over gRPC and HTTP,
asked for beam 4 (`options.beamSize` / `beam_size`); LibreTranslate's /translate on
attnserve takes no decoding options, so it decodes with the server's defaults (greedy).
The two servers never run at once; the client runs on the same cores.

For each server and API: closed loops of 1, 8 and 64 clients, one sentence of the test parts
a call (`--seconds` a level); every sentence of every part once (8 clients) for BLEU against
the references (sacreBLEU, as models.evaluate scores); a 60,000-character document in one
call (bench.documents' document); bench.preservation's protected-item cases (330) and HTML
cases (99), HTML sent as HTML. Prints the tables and the goals, writes the JSON.

    bash bench/peers/setup.sh          # once: LibreTranslate in bench/peers/.venv
    python -m bench.peers [--quick] [--seconds 20] [--json-out data/peers/report.json]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from bench.lib.paths import REPOSITORY, TRANSLATOR_DATA
from bench.lib.processes import machine_busy
from bench.peers import libre, loads
from bench.peers.report import (
    GRPC,
    HTTP,
    LIBRE,
    LIBRE_API,
    goals,
    kept_by_case,
    kept_where_kept,
    markdown,
    share,
)

CLIENTS = (1, 8, 64)
PASS_CLIENTS = 8  # the BLEU, document-free passes
SERVER_FLAGS = ["--variant", "int8", "--http-listen", "127.0.0.1:0"]


def parts(limit: int | None) -> dict[str, tuple[list[str], list[str]]]:
    """The test parts (sources, references): the test split (bible), the everyday set, and
    the modern catalogs where `attnserve data translator --catalogs` has built them."""
    from models.catalogs import read_everyday

    def lines(path: Path) -> list[str]:
        return path.read_text(encoding="utf-8").splitlines()

    found = {
        "bible": (lines(TRANSLATOR_DATA / "test.es"), lines(TRANSLATOR_DATA / "test.en")),
        "everyday": read_everyday(),
    }
    modern = TRANSLATOR_DATA / "test-modern"
    if modern.with_suffix(".es").exists() and modern.with_suffix(".en").exists():
        found["modern"] = (lines(modern.with_suffix(".es")), lines(modern.with_suffix(".en")))
    if limit:
        found = {k: (s[:limit], r[:limit]) for k, (s, r) in found.items()}
    return found


def background(seconds: float = 3.0) -> float:
    """Cores busy on this machine while this run does nothing (other work beside it)."""
    before, start = machine_busy(), time.monotonic()
    time.sleep(seconds)
    return round((machine_busy() - before) / (time.monotonic() - start), 2)


class Plan:
    def __init__(self, args):
        self.quick = args.quick
        self.seconds = args.seconds or (3.0 if args.quick else 20.0)
        self.parts = parts(40 if args.quick else None)
        sources = [s for texts, _ in self.parts.values() for s in texts]
        self.pool = sorted(sources, key=lambda _: random.Random(0).random())
        random.Random(0).shuffle(self.pool)
        from bench.documents import document
        from bench.preservation import ITEMS, html_segments, segments

        self.document = document(6_000 if args.quick else args.characters)
        step = 10 if args.quick else 1
        self.cases = segments()[::step]
        self.html_cases = html_segments()[::step]
        self.kind_of = {item: kind for kind, items in ITEMS.items() for item in items}


async def measure_server(plan: Plan, arms: dict, text_arm: str, html_send) -> dict:
    """Every measurement of one server: `arms` {name: send} in turn at each level; the BLEU
    passes, the document and the cases through `text_arm`'s send (the BLEU passes through
    every arm but gRPC, which decodes as /v1 does)."""
    figures: dict = {"levels": {}, "document": {}, "bleu_outputs": {}, "cases": {}}
    for send in arms.values():  # warm-up
        await loads.every_text(send, plan.pool[:8], PASS_CLIENTS)
    for clients in CLIENTS:
        for name, send in arms.items():
            row = await loads.closed_loop(send, plan.pool, clients, plan.seconds)
            figures["levels"].setdefault(name, {})[str(clients)] = row
            print(f"  {name}, {clients} clients: {row}", file=sys.stderr, flush=True)
    for name, send in arms.items():
        if name == GRPC:
            continue
        outputs = {}
        for part, (sources, _) in plan.parts.items():
            outputs[part], row = await loads.every_text(send, sources, PASS_CLIENTS)
            print(f"  {name}, {part} pass: {row}", file=sys.stderr, flush=True)
            figures.setdefault("passes", {}).setdefault(name, {})[part] = row
        figures["bleu_outputs"][name] = outputs
    from service.runtime.documents import split_text

    sentences = len(split_text(plan.document).sentence_texts())
    for name, send in arms.items():
        if name == LIBRE_API:
            continue
        _, seconds = await loads.one_call(send, plan.document)
        figures["document"][name] = {
            "characters": len(plan.document),
            "sentences": sentences,
            "seconds": round(seconds, 2),
        }
        print(f"  {name}, document: {seconds:.2f} s", file=sys.stderr, flush=True)
    texts = [text for text, _ in plan.cases]
    plain, row = await loads.every_text(arms[text_arm], texts, PASS_CLIENTS)
    html_texts = [text for text, _ in plan.html_cases]
    marked, html_row = await loads.every_text(html_send, html_texts, PASS_CLIENTS)
    figures["cases"][text_arm] = {"plain": plain, "html": marked, "passes": [row, html_row]}
    return figures


async def measure_libretranslate(plan: Plan) -> tuple[dict, dict]:
    server = libre.LibreTranslate()
    try:
        languages = await asyncio.to_thread(server.wait)
        async with loads.http_client(max(CLIENTS)) as http:
            arms = {LIBRE: loads.libretranslate_sender(http, server.url)}
            html = loads.libretranslate_sender(http, server.url, "html")
            figures = await measure_server(plan, arms, LIBRE, html)
    finally:
        code = server.stop()
    log = server.log_path.read_text(errors="replace")
    about = {
        "languages": languages,
        "flags": server.flags,
        "exit_code": code,
        # its start-up's fetch of the package index and MiniSBD's models, skipped or not
        "tried_to_fetch_models": "Updating language models" in log,
    }
    return figures, about


async def measure_attnserve(plan: Plan) -> tuple[dict, dict]:
    import grpc

    from bench.lib.server import Server
    from service.wire.v1 import translation_pb2_grpc

    directory = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    server = Server(REPOSITORY, directory, SERVER_FLAGS)
    try:
        state = await server.wait()
        url = f"http://127.0.0.1:{state['http_port']}"
        async with (
            loads.http_client(max(CLIENTS)) as http,
            grpc.aio.insecure_channel(server.address) as channel,
        ):
            stub = translation_pb2_grpc.TranslationServiceStub(channel)
            arms = {
                HTTP: loads.contract_sender(http, url, 4),
                GRPC: loads.grpc_sender(stub, 4),
                LIBRE_API: loads.libretranslate_sender(http, url),
            }
            html = loads.contract_sender(http, url, 4, html=True)
            figures = await measure_server(plan, arms, HTTP, html)
    finally:
        code = server.stop()
    return figures, {"flags": server.flags, "exit_code": code}


def score(plan: Plan, figures: dict) -> dict:
    """BLEU of each arm on each part, and what each keeps of the cases."""
    from bench.preservation import ITEMS
    from models.evaluate import corpus_scores
    from service.runtime.markup import well_formed

    bleu: dict = {}
    signature = ""
    for arm, outputs in figures["bleu_outputs"].items():
        for part, hypotheses in outputs.items():
            scores = corpus_scores(hypotheses, plan.parts[part][1])
            bleu.setdefault(part, {})[arm] = scores["bleu"]
            signature = scores["bleu_signature"]
    kept_cases = {}
    preservation: dict = {}
    for arm, cases in figures["cases"].items():
        plain = kept_by_case(plan.cases, cases["plain"])
        html = kept_by_case(plan.html_cases, cases["html"])
        kept_cases[arm] = (plain, html)
        rows: dict = {}
        for kind in ITEMS:
            flags = [
                [k for k, item in zip(kept, items, strict=True) if plan.kind_of[item] == kind]
                for kept, (_, items) in zip(plain, plan.cases, strict=True)
            ]
            rows[kind] = {"items": sum(map(len, flags)), "kept": share(flags)}
        rows["all protected items"] = {"items": sum(map(len, plain)), "kept": share(plain)}
        rows["HTML tags and entities"] = {"items": sum(map(len, html)), "kept": share(html)}
        formed = [well_formed(output) for output in cases["html"]]
        rows["HTML well formed"] = {"items": len(formed), "kept": share([formed])}
        preservation[arm] = rows
    kept = {}
    if LIBRE in kept_cases and HTTP in kept_cases:
        kept["protected items"] = kept_where_kept(kept_cases[HTTP][0], kept_cases[LIBRE][0])
        kept["HTML tags and entities"] = kept_where_kept(kept_cases[HTTP][1], kept_cases[LIBRE][1])
    examples = {
        arm: [
            {"source": source, "output": output}
            for (source, _), output in list(zip(plan.html_cases, cases["html"], strict=True))[::12]
        ]
        for arm, cases in figures["cases"].items()
    }
    return {
        "bleu": bleu,
        "bleu_signature": signature,
        "preservation": preservation,
        "kept": kept,
        "html_examples": examples,
    }


async def run(plan: Plan) -> dict:
    report: dict = {
        "date": datetime.date.today().isoformat(),
        "quick": plan.quick,
        "seconds_a_level": plan.seconds,
        "cores": os.cpu_count(),
        "part_sizes": {part: len(s) for part, (s, _) in plan.parts.items()},
        "busy_cores_before": background(),
        "loadavg_before": os.getloadavg(),
    }
    print("LibreTranslate ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    libre_figures, report["libretranslate"] = await measure_libretranslate(plan)
    report["libretranslate"]["minutes"] = round((time.monotonic() - started) / 60, 1)
    report["busy_cores_between"] = background()
    print("attnserve ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    ours, report["attnserve"] = await measure_attnserve(plan)
    report["attnserve"]["minutes"] = round((time.monotonic() - started) / 60, 1)
    report["busy_cores_after"] = background()
    report["loadavg_after"] = os.getloadavg()
    figures = {
        key: {**libre_figures.get(key, {}), **ours.get(key, {})}
        for key in ("levels", "document", "bleu_outputs", "cases", "passes")
    }
    report["levels"], report["document"] = figures["levels"], figures["document"]
    report["passes"] = figures["passes"]
    report |= score(plan, figures)
    report["goals"] = goals(report)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds a level: a smoke run")
    parser.add_argument("--seconds", type=float, default=0.0, help="a level (default 20; 3 quick)")
    parser.add_argument("--characters", type=int, default=60_000)
    parser.add_argument("--json-out", type=Path, default=libre.BUILD / "report.json")
    parser.add_argument("--json", action="store_true", help="print the JSON, not the tables")
    args = parser.parse_args(argv)
    if not libre.installed():
        print("LibreTranslate is not installed: bash bench/peers/setup.sh", file=sys.stderr)
        return 2
    from models.shipped import SHIPPED_TRANSLATOR

    libre.prepare(SHIPPED_TRANSLATOR)
    report = asyncio.run(run(Plan(args)))
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print(markdown(report))
        print(f"\nJSON: {args.json_out}")
    return 0
