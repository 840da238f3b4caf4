"""Inputs outside the training distribution, translated with the server's defaults.

The set is built here, by rule: garbage (random letters and digits), runs of symbols and
punctuation, control characters among words, one-word inputs, and one word repeated, 40 of
each kind (200). Each is translated by the shipped translator in process as the server
translates a text (split into sentences, protected items taken out, greedy, the default
`max_length_ratio`, a loop cut where it starts), then without the length bound (and so
without the cut), then with `no_repeat_ngram_size` 3.
Counted per input: an output longer than 2 x its input's tokens + 10, a 3-gram of tokens
repeated three times in an output, and among those, the outputs whose input repeats a 3-gram
three times too (a translation of one word repeated is that word repeated).

    python -m bench.ood [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
from collections import Counter

WORDS = ["gato", "casa", "no", "sí", "hola", "agua", "rojo", "correr", "muy", "el"]
SYMBOLS = "!?¿¡.,;:-_=+*#@%&()[]{}<>/\\|~^"


def inputs(per_kind: int = 40, seed: int = 0) -> dict[str, list[str]]:
    """The set by kind, the same for a seed."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    control = [chr(c) for c in range(1, 32) if chr(c) not in "\n\r\t"]
    return {
        "garbage": [
            " ".join(
                "".join(rng.choices(alphabet, k=rng.randint(2, 9)))
                for _ in range(rng.randint(1, 8))
            )
            for _ in range(per_kind)
        ],
        "symbols": ["".join(rng.choices(SYMBOLS, k=rng.randint(3, 30))) for _ in range(per_kind)],
        "control characters": [
            " ".join(rng.choice(WORDS) + "".join(rng.choices(control, k=2)) for _ in range(3))
            for _ in range(per_kind)
        ],
        "one word": [rng.choice(WORDS + ["ZZ", "xq", "ñ", "Ü"]) for _ in range(per_kind)],
        "repeated word": [
            " ".join([rng.choice(WORDS)] * rng.randint(3, 30)) for _ in range(per_kind)
        ],
    }


def repeated_trigram(tokens: list[int], times: int = 3) -> bool:
    """Whether some 3-gram occurs `times` times or more."""
    counts = Counter(tuple(tokens[i : i + 3]) for i in range(len(tokens) - 2))
    return any(n >= times for n in counts.values())


def measure(translate, tokenizer) -> dict:
    """Per kind: inputs, outputs too long, outputs with a 3-gram three times."""
    report: dict = {}
    for kind, texts in inputs().items():
        outputs = translate(texts)
        long = loops = faithful = 0
        worst = []
        for text, (source, output) in zip(texts, outputs, strict=True):
            too_long = len(output) > 2 * len(source) + 10
            looping = repeated_trigram(output)
            long += too_long
            loops += looping
            faithful += looping and repeated_trigram(source)
            if too_long or looping:
                worst.append({"input": text, "output": tokenizer.decode(output)})
        report[kind] = {
            "inputs": len(texts),
            "too_long": long,
            "repeated_3gram": loops,
            "source_repeats_it": faithful,
        }
        report[kind]["examples"] = worst[:3]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from dataclasses import replace

    from models.checkpoint import load_checkpoint
    from models.reference import TorchEngine
    from models.shipped import SHIPPED_TRANSLATOR
    from service.runtime.decoding import DecodingOptions
    from service.runtime.documents import split_text
    from service.runtime.protect import mask
    from service.runtime.translation import loops_cut, translate_batches

    model, tokenizer = load_checkpoint(SHIPPED_TRANSLATOR)
    engine = TorchEngine(model)

    def translator(options: DecodingOptions):
        def translate(texts: list[str]) -> list[tuple[list[int], list[int]]]:
            """(source tokens, output tokens) of each text's sentences, joined."""
            sentences = [[mask(s).text for s in split_text(t).sentence_texts()] for t in texts]
            flat = tokenizer.encode_batch([s for each in sentences for s in each])
            decoded = translate_batches(engine, flat, options, 512, 64)
            nbest = iter(zip(flat, loops_cut(decoded, flat, options), strict=True))
            pairs = []
            for each in sentences:
                source, output = [], []
                for _ in each:
                    ids, hypotheses = next(nbest)
                    source += ids
                    output += hypotheses[0].tokens
                pairs.append((source, output))
            return pairs

        return translate

    defaults = DecodingOptions()
    report = {
        "defaults": measure(translator(defaults), tokenizer),
        "without the length bound": measure(
            translator(replace(defaults, max_length_ratio=0.0)), tokenizer
        ),
        "no_repeat_ngram_size 3": measure(
            translator(replace(defaults, no_repeat_ngram_size=3)), tokenizer
        ),
    }
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
        return 0
    for setting, kinds in report.items():
        print(setting)
        for kind, counts in kinds.items():
            print(
                f"  {kind}: {counts['inputs']} inputs, {counts['too_long']} too long, "
                f"{counts['repeated_3gram']} with a 3-gram three times "
                f"({counts['source_repeats_it']} of them where the input repeats one too)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
