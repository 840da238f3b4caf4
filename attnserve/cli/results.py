"""What `translate` and `caption` print, whichever engine decoded: the results as frozen
dataclasses, and `as_json`, the one function that writes them as JSON.

A gRPC response (`remote`) and the PyTorch engine's hypotheses (`local`) are both read into
these types, so `--engine grpc` and `--engine torch` print the same JSON and the same lines.
The JSON is the dataclasses' fields, in order: their names are the .proto field names where
the response has them. Tokens are SentencePiece pieces; `</s>` closes the source tokens and
the target tokens of a finished hypothesis.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, is_dataclass

DECIMALS = 4  # of every float in the JSON: scores, log-probabilities, attention weights


@dataclass(frozen=True)
class TokenCounts:
    input_tokens: int  # source tokens with `</s>`, or the image grid's cells
    output_tokens: int  # tokens of every hypothesis, `</s>` aside


@dataclass(frozen=True)
class Alignment:
    """A translation's cross-attention: `weights[t][s]` is what target token t gave source
    token s."""

    source_tokens: tuple[str, ...]
    target_tokens: tuple[str, ...]
    weights: tuple[tuple[float, ...], ...]  # (target, source)


@dataclass(frozen=True)
class TokenAttention:
    token: str
    weights: tuple[float, ...]  # (grid_height * grid_width,) row-major over the image


@dataclass(frozen=True)
class Attention:
    """A caption's attention: one grid over the image per target token."""

    grid_height: int
    grid_width: int
    image_height: int
    image_width: int
    tokens: tuple[TokenAttention, ...]


@dataclass(frozen=True)
class Hypothesis:
    text: str
    score: float  # log_prob / steps ** length_penalty: what ranks the hypotheses
    log_prob: float
    tokens: tuple[str, ...]  # without `</s>`
    token_log_probs: tuple[float, ...]  # one per step, the `</s>` step included
    finished: bool  # ended with `</s>`, not at the length limit


@dataclass(frozen=True)
class Translated(Hypothesis):
    alignment: Alignment | None  # None: not asked for, or a text of several sentences


@dataclass(frozen=True)
class Captioned(Hypothesis):
    attention: Attention | None  # None: not asked for


@dataclass(frozen=True)
class Sentence:
    """Where one sentence of a text and its translation (the best hypothesis) are, in
    characters; a text of several sentences has its alignments here."""

    source_start: int
    source_end: int
    target_start: int
    target_end: int
    alignment: Alignment | None


@dataclass(frozen=True)
class Translation:
    source: str
    hypotheses: tuple[Translated, ...]  # best first
    sentences: tuple[Sentence, ...]
    glossary_applied: tuple[int, ...]  # indices of the glossary's terms used
    token_counts: TokenCounts


@dataclass(frozen=True)
class Caption:
    image: str  # the file (`service.paths.file_name`)
    image_width: int
    image_height: int
    hypotheses: tuple[Captioned, ...]  # best first
    token_counts: TokenCounts


@dataclass(frozen=True)
class Translations:
    model: str  # the server's model name, or the checkpoint decoded here
    version: str  # the server's version ("" for a checkpoint)
    translations: tuple[Translation, ...]  # one per text, in order
    token_counts: TokenCounts

    @property
    def items(self) -> tuple[Translation, ...]:
        return self.translations


@dataclass(frozen=True)
class Captions:
    model: str
    version: str
    captions: tuple[Caption, ...]  # one per image, in order
    token_counts: TokenCounts

    @property
    def items(self) -> tuple[Caption, ...]:
        return self.captions


def counted(items) -> TokenCounts:
    """The token counts of several translations or captions together."""
    return TokenCounts(
        sum(i.token_counts.input_tokens for i in items),
        sum(i.token_counts.output_tokens for i in items),
    )


def as_json(value):
    """Results as JSON values: a dataclass as an object of its fields in order, a tuple as a
    list, a float rounded to DECIMALS."""
    if is_dataclass(value):
        return {f.name: as_json(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple):
        return [as_json(item) for item in value]
    if isinstance(value, float):
        return round(value, DECIMALS)
    return value


def dumps(value, ascii: bool = False) -> str:
    """`as_json` on one line, UTF-8 left as it is; with `ascii`, every character past ASCII
    escaped (\\uXXXX), for a stream that cannot encode them all."""
    return json.dumps(as_json(value), ensure_ascii=ascii)
