"""Whole-decode parity: sentences decoded by onnxruntime against PyTorch, token for token.

A divergence is accepted only when it is a near-tie: at the first step where the two outputs
differ, PyTorch's log-probabilities of the two competing tokens are closer than NEAR_TIE.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models.evaluate import corpus_scores
from models.kinds import kind_named
from service.runtime.decoding import DecodingOptions, Hypothesis
from service.runtime.inference import CachedInference, Engine, parting_margin
from service.runtime.tensors import EncoderOutput
from service.runtime.tokenizer import Tokenizer

NEAR_TIE = 1e-4
BATCH = 16
# the translator's settings; the golden set decodes GREEDY within the model's length
GREEDY = DecodingOptions(beam_size=1, max_length=160)
BEAM = DecodingOptions(beam_size=4, max_length=160)


@dataclass
class ParityInputs:
    """A certificate's test inputs: `sources` (token ids, or uint8 images) with their
    `references`, how many come from each test part in order (`parts`; None: one part), and
    `int8`, the inputs and references of the int8 claim where they are others (None: these)."""

    sources: list
    references: list[str]
    parts: dict[str, int] | None = None
    int8: tuple[list, list[str]] | None = None

    def int8_claim(self, fp32: Engine, fp32_greedy, options: DecodingOptions, max_source: int):
        """(inputs, references, fp32 greedy hypotheses) of the int8 claim: `int8`'s, decoded
        by `fp32` with `options`, where given; else these, with their `fp32_greedy`."""
        if self.int8 is None:
            return self.sources, self.references, fp32_greedy
        sources, references = self.int8
        return sources, references, decode_all(fp32, sources, options, max_source)


@dataclass
class DecodeReport:
    setting: str
    sentences: int
    identical: int = 0
    near_ties: list[dict] = field(default_factory=list)
    divergences: list[dict] = field(default_factory=list)  # not explained by a near-tie

    @property
    def passed(self) -> bool:
        return not self.divergences

    def to_dict(self) -> dict:
        return {
            "setting": self.setting,
            "sentences": self.sentences,
            "identical": self.identical,
            "near_ties": self.near_ties,
            "divergences": self.divergences[:10],
            "divergence_count": len(self.divergences),
            "passed": self.passed,
        }


def decode_all(
    engine: Engine,
    sources: list[list[int]],
    options: DecodingOptions,
    max_source: int,
    inference_type=CachedInference,
    batch: int = BATCH,
    attention: bool = True,
) -> list[Hypothesis]:
    """Best hypothesis of every source (token ids, or uint8 images for a captioner), in
    batches of `batch` taken in input order, so rows of different lengths share a padded
    batch (models.kinds: how each kind decodes its sources); without `attention`, by the
    step a server runs for requests that keep no alignment (the lean step, int8's one-row
    step for one row)."""
    kind = kind_named(engine.kind)
    nbest = kind.decode(engine, sources, options, max_source, batch, inference_type, attention)
    return [n[0] for n in nbest]


def encode_one(engine: Engine, source, max_source: int) -> EncoderOutput:
    """The encoder output of one source (token ids, or a uint8 image)."""
    return kind_named(engine.kind).encode_one(engine, source, max_source)


def compare_decodes(
    reference: Engine,
    candidate: Engine,
    sources: list[list[int]],
    options: DecodingOptions,
    max_source: int,
    setting: str,
    expected: list[Hypothesis] | None = None,
    actual: list[Hypothesis] | None = None,
    **candidate_args,
) -> DecodeReport:
    """Decodes with both engines (or takes decodes already made: the reference's `expected`,
    the candidate's `actual`) and explains every difference."""
    expected = expected or decode_all(reference, sources, options, max_source)
    actual = actual or decode_all(candidate, sources, options, max_source, **candidate_args)
    report = DecodeReport(setting, len(sources))
    for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
        if e.tokens == a.tokens:
            report.identical += 1
            continue
        encoder = encode_one(reference, sources[i], max_source)
        step, margin = parting_margin(reference, encoder, e.tokens, a.tokens)
        entry = {
            "sentence": i,
            "step": step,
            "margin": margin,
            "score_difference": abs(e.score - a.score),
        }
        near = margin < NEAR_TIE or entry["score_difference"] < NEAR_TIE
        (report.near_ties if near else report.divergences).append(entry)
    return report


def quality_loss(
    tokenizer: Tokenizer,
    references: list[str],
    baseline: list[Hypothesis],
    variant: list[Hypothesis],
) -> dict:
    """BLEU and chrF of a variant against the baseline's, on the same sentences."""
    base = corpus_scores([tokenizer.decode(h.tokens) for h in baseline], references)
    other = corpus_scores([tokenizer.decode(h.tokens) for h in variant], references)
    identical = sum(x.tokens == y.tokens for x, y in zip(baseline, variant, strict=True))
    return {
        "baseline": {"bleu": base["bleu"], "chrf": base["chrf"]},
        "variant": {"bleu": other["bleu"], "chrf": other["chrf"]},
        "bleu_loss": round(base["bleu"] - other["bleu"], 2),
        "chrf_loss": round(base["chrf"] - other["chrf"], 2),
        "identical_share": round(identical / max(len(references), 1), 4),
        "bleu_signature": base["bleu_signature"],
    }


def attention_difference(expected: list[Hypothesis], actual: list[Hypothesis]) -> dict:
    """The largest |attention difference| over the decodes whose tokens are identical."""
    same = [(e, a) for e, a in zip(expected, actual, strict=True) if e.tokens == a.tokens]
    largest = max((float(np.abs(e.alignment - a.alignment).max()) for e, a in same), default=0.0)
    return {"compared": len(same), "max_abs": largest}


def caption_quality_loss(tokenizer: Tokenizer, references: list[str], baseline, variant) -> dict:
    """Exact match (points) and CIDEr of a variant against the baseline's."""
    from models.caption_eval import text_scores  # pycocoevalcap: only for captioners

    base = text_scores([tokenizer.decode(h.tokens) for h in baseline], references)
    other = text_scores([tokenizer.decode(h.tokens) for h in variant], references)
    identical = sum(x.tokens == y.tokens for x, y in zip(baseline, variant, strict=True))
    return {
        "baseline": base,
        "variant": other,
        "exact_match_loss": round(100 * (base["exact_match"] - other["exact_match"]), 2),
        "cider_loss": round(base["cider"] - other["cider"], 2),
        "identical_share": round(identical / max(len(references), 1), 4),
    }
