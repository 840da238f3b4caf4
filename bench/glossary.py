"""Terminology: a glossary test set from the held-out modern catalogs, translated with and
without its glossary, and the three test parts with the server's defaults.

The set is built by rule. From the modern test part (the gettext catalogs of 10 programs held
out of training whole, models.catalogs), a pair qualifies when a noun of Apertium's bilingual
dictionary (models.lexicon) is found in its Spanish source as the glossary finds a term (any
case, also in its Spanish plurals) and the dictionary's English for it is found in its
reference as the glossary counts a target in a translation (any case, also in its English
plural). The longest such Spanish noun (most characters, then alphabetical) is the
pair's glossary entry, with the English the reference uses. Up to `--sentences` pairs are
taken in the order of their hash, so the set is the same on every machine.

Measured, with the shipped translator in process as the server translates a text (sentences
split, protected items and terms taken out and put back), greedy and beam 4: the share of
translations in which the entry's target term is found, and BLEU and chrF of the set with and
without its glossary. Then, without a glossary, beam 4, each test part (bible, modern,
everyday) as the server translates it with the defaults (sentences split, items taken out,
`max_length_ratio` 2) and as given (one sentence a text, nothing taken out, no length bound).

    python -m bench.glossary [--json] [--sentences 300]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path

from service.runtime.plurals import PluralRules

SPANISH_ENGLISH = PluralRules.of("es", "en")  # the shipped translator's languages
BIBLE = Path("data/translator")  # test.es / test.en of `attnserve data translator`
MODERN = Path("data/translator/test-modern")  # .es / .en of `attnserve data translator --catalogs`


def modern_pairs() -> list[tuple[str, str]]:
    """The modern test part: the build's files where they are, else built from the cached
    Debian packages as `attnserve data translator --catalogs` builds it."""
    spanish, english = MODERN.with_suffix(".es"), MODERN.with_suffix(".en")
    if spanish.exists() and english.exists():
        return list(
            zip(
                spanish.read_text(encoding="utf-8").splitlines(),
                english.read_text(encoding="utf-8").splitlines(),
                strict=True,
            )
        )
    from models.catalogs import catalog_parts

    return catalog_parts()[1]


def glossary_set(pairs, entries, limit: int) -> list[tuple[str, str, str, str]]:
    """(source, reference, source term, target term) of the pairs that qualify, at most
    `limit`, in hash order."""
    from service.runtime.glossary import Term, used

    nouns: dict[str, set[str]] = {}
    for entry in entries:
        if entry.kind == "n" and len(entry.spanish) >= 4:
            nouns.setdefault(entry.spanish.lower(), set()).add(entry.english)
    chosen = []
    for source, reference in pairs:
        words = {w.lower().strip(".,;:¿?¡!()\"'") for w in source.split()}
        found = []
        for spanish, englishes in nouns.items():
            first = spanish.split()[0]
            if not {first, first + "s", first + "es"} & words:
                continue  # a quick filter before the pattern
            if not Term(spanish, "x").pattern(SPANISH_ENGLISH).search(source):
                continue
            for english in sorted(englishes):
                if used(english, reference, SPANISH_ENGLISH):
                    found.append((-len(spanish), spanish, english))
                    break
        if found:
            _, spanish, english = min(found)
            chosen.append((source, reference, spanish, english))
    chosen.sort(key=lambda c: hashlib.sha256("\t".join(c[:2]).encode()).digest())
    return chosen[:limit]


def term_used(output: str, target: str) -> bool:
    """Whether the target term is in a translation, as the server checks it (any case, also
    in its plural)."""
    from service.runtime.glossary import used

    return bool(used(target, output, SPANISH_ENGLISH))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sentences", type=int, default=300)
    args = parser.parse_args(argv)
    from models.catalogs import read_everyday
    from models.checkpoint import load_checkpoint
    from models.evaluate import corpus_scores
    from models.lexicon import dictionary_entries
    from models.reference import TorchEngine
    from models.shipped import SHIPPED_TRANSLATOR
    from service.runtime.decoding import DecodingOptions
    from service.runtime.glossary import Term
    from service.runtime.translation import translate_documents, translate_texts

    model, tokenizer = load_checkpoint(SHIPPED_TRANSLATOR)
    engine = TorchEngine(model)
    modern = modern_pairs()
    chosen = glossary_set(modern, dictionary_entries(), args.sentences)
    sources = [c[0] for c in chosen]
    references = [c[1] for c in chosen]
    glossaries = [(Term(c[2], c[3]),) for c in chosen]
    report: dict = {
        "modern_pairs": len(modern),
        "sentences": len(chosen),
        "distinct_terms": len({(c[2], c[3]) for c in chosen}),
        "examples": [
            {"source": c[0], "reference": c[1], "term": f"{c[2]} -> {c[3]}"} for c in chosen[:5]
        ],
    }
    for name, beam in (("greedy", 1), ("beam 4", 4)):
        options = DecodingOptions(max_length=256, beam_size=beam)
        row: dict = {}
        for setting, each in (("without", None), ("with", glossaries)):
            outputs = translate_documents(
                engine, tokenizer, sources, options, 512, batch_size=64, glossaries=each
            )
            used = sum(term_used(o, c[3]) for o, c in zip(outputs, chosen, strict=True))
            scores = corpus_scores(outputs, references)
            row[setting] = {
                "term_used": round(used / len(chosen), 4),
                "bleu": scores["bleu"],
                "chrf": scores["chrf"],
            }
            if setting == "with":
                row["examples"] = [
                    {"source": s, "with": o} for s, o in zip(sources[:5], outputs[:5], strict=True)
                ]
        report[name] = row
    bible = list(
        zip(
            (BIBLE / "test.es").read_text(encoding="utf-8").splitlines(),
            (BIBLE / "test.en").read_text(encoding="utf-8").splitlines(),
            strict=True,
        )
    )
    parts = {"bible": bible, "modern": modern, "everyday": list(zip(*read_everyday(), strict=True))}
    report["parts"] = {}
    for part, pairs in parts.items():
        report["parts"][part] = {}
        beam4 = DecodingOptions(max_length=256, beam_size=4)
        for setting in ("as given", "defaults"):
            texts = [s for s, _ in pairs]
            if setting == "defaults":
                outputs = translate_documents(engine, tokenizer, texts, beam4, 512, batch_size=64)
            else:  # one sentence a text, nothing taken out, no length bound
                as_given = replace(beam4, max_length_ratio=0.0)
                nbest = translate_texts(engine, tokenizer, texts, as_given, 512, 64)
                outputs = [tokenizer.decode(n[0].tokens) for n in nbest]
            scores = corpus_scores(outputs, [t for _, t in pairs])
            report["parts"][part][setting] = {
                "sentences": len(pairs),
                "bleu": scores["bleu"],
                "chrf": scores["chrf"],
            }
    report["bleu_signature"] = scores["bleu_signature"]
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
        return 0
    print(
        f"{report['sentences']} sentences of {report['modern_pairs']} modern pairs, "
        f"{report['distinct_terms']} distinct terms"
    )
    for name in ("greedy", "beam 4"):
        for setting in ("without", "with"):
            r = report[name][setting]
            print(
                f"{name} {setting} glossary: term used {r['term_used']:.1%}, "
                f"BLEU {r['bleu']}, chrF {r['chrf']}"
            )
    for part, settings in report["parts"].items():
        for setting, r in settings.items():
            print(f"{part} ({r['sentences']}) {setting}: BLEU {r['bleu']}, chrF {r['chrf']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
