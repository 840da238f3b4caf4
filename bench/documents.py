"""A long document in one call against the same sentences sent as separate texts.

One server (the response cache off, so that every round decodes), a document of about
60,000 characters made of the translation test split's sentences in paragraphs of five,
apart by blank lines. Each round sends it once as one text (the server cuts it into
sentences and decodes them as independent jobs over its workers) and once as a request of
its sentences, one text each, in turn; sentences a second of both, and their ratio.

    python -m bench.documents [--characters 60000] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.lib.paths import REPOSITORY, TEST_SOURCES
from bench.lib.server import Server
from service import client
from service.runtime.documents import split_text


def document(characters: int) -> str:
    """Paragraphs of five test sentences (each one sentence as the server cuts it)."""
    lines = [x for x in TEST_SOURCES.read_text(encoding="utf-8").splitlines() if x.strip()]
    sentences = [x for x in lines if len(split_text(x).sentences) == 1]
    paragraphs, length, i = [], 0, 0
    while length < characters:
        paragraph = " ".join(sentences[(i + k) % len(sentences)] for k in range(5))
        paragraphs.append(paragraph)
        length += len(paragraph) + 2
        i += 5
    return "\n\n".join(paragraphs) + "\n"


def measure(address: str, text: str, rounds: int) -> dict:
    sentences = split_text(text).sentence_texts()
    whole, apart = [], []
    with client.connect(address) as channel:
        client.translate(channel, sentences[:8], timeout=600)  # warm-up
        for _ in range(rounds):
            start = time.perf_counter()
            (one,) = client.translate(channel, text, timeout=600).translations
            whole.append(time.perf_counter() - start)
            start = time.perf_counter()
            many = client.translate(channel, sentences, timeout=600).translations
            apart.append(time.perf_counter() - start)
    same = one.hypotheses[0].text == split_text(text).join([t.hypotheses[0].text for t in many])[0]
    best_whole, best_apart = min(whole), min(apart)
    return {
        "characters": len(text),
        "sentences": len(sentences),
        "paragraphs": text.count("\n\n") + 1,
        "document_seconds": [round(s, 2) for s in whole],
        "separate_seconds": [round(s, 2) for s in apart],
        "document_sentences_per_s": round(len(sentences) / best_whole, 1),
        "separate_sentences_per_s": round(len(sentences) / best_apart, 1),
        "ratio": round(best_apart / best_whole, 3),
        "same_translations": same,
    }


async def _serve(repository: Path, flags: list[str]):
    directory = Path(tempfile.mkdtemp(prefix="bench-documents-"))
    server = Server(repository, directory, flags)  # no response cache: every round decodes
    await server.wait()
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=REPOSITORY)
    parser.add_argument("--characters", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server-flags", default="", help="more `attnserve serve` flags")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    server = asyncio.run(_serve(args.repository, args.server_flags.split()))
    try:
        report = measure(server.address, document(args.characters), args.rounds)
    finally:
        server.stop()
    report["server_flags"] = server.flags
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{report['characters']:,} characters, {report['sentences']} sentences: "
            f"one text {report['document_sentences_per_s']} sentences/s, separate texts "
            f"{report['separate_sentences_per_s']} sentences/s, ratio {report['ratio']}; "
            f"same translations: {report['same_translations']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
