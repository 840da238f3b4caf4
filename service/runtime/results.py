"""What the runtime answers, as plain frozen values: a front turns them into its wire's
messages (service.front). Tokens are the tokenizer's pieces, text is decoded text; a field a
client did not ask for is empty (or None)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Alignment:
    """A translation's attention over its source: weights (target x source), row by row."""

    source_tokens: tuple[str, ...]  # the source's pieces and `</s>`
    target_tokens: tuple[str, ...]  # the output's pieces, and `</s>` when finished
    weights: tuple[float, ...]  # len(target_tokens) x len(source_tokens)


@dataclass(frozen=True)
class TokenAttention:
    token: str
    weights: tuple[float, ...]  # one per grid cell, row by row


@dataclass(frozen=True)
class AttentionMaps:
    """A caption's attention over the image grid, one map per output token."""

    grid_height: int
    grid_width: int
    image_width: int
    image_height: int
    tokens: tuple[TokenAttention, ...]


@dataclass(frozen=True)
class TextHypothesis:
    """One hypothesis as a client reads it."""

    text: str
    score: float  # ranking score: log_prob / steps ** length_penalty
    log_prob: float
    tokens: tuple[str, ...]
    finished: bool  # ended with `</s>` (not cut by max_length or a loop)
    token_log_probs: tuple[float, ...] = ()  # per step, `</s>` included; when asked for
    alignment: Alignment | None = None  # when asked for (translation)
    attention: AttentionMaps | None = None  # when asked for (captioning)


@dataclass(frozen=True)
class TokenCounts:
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: TokenCounts) -> TokenCounts:
        return TokenCounts(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


def total(counts: list[TokenCounts]) -> TokenCounts:
    return sum(counts, TokenCounts())


@dataclass(frozen=True)
class PartialText:
    """A stream's best hypothesis so far."""

    text: str
    tokens: tuple[str, ...]
    steps: int  # decoding steps taken


@dataclass(frozen=True)
class SentenceSpan:
    """Where one sentence of a text is, in the source and in its best translation (offsets in
    characters)."""

    source_start: int
    source_end: int
    target_start: int
    target_end: int
    alignment: Alignment | None = None  # for a text of several sentences, when asked for


@dataclass(frozen=True)
class Translation:
    """One text's n-best translations."""

    hypotheses: tuple[TextHypothesis, ...]
    sentences: tuple[SentenceSpan, ...]
    glossary_applied: tuple[int, ...]  # the glossary entries found in the text, by index
    token_counts: TokenCounts


@dataclass(frozen=True)
class TranslateResult:
    model: str
    version: str
    translations: tuple[Translation, ...]  # one per text, in request order
    token_counts: TokenCounts
    source_language: str = ""  # what the texts were translated from (detected, or as named)
    target_language: str = ""


@dataclass(frozen=True)
class TargetScore:
    """The model's log-probability of each token of one target (and its `</s>`)."""

    tokens: tuple[str, ...]
    token_log_probs: tuple[float, ...]
    log_prob: float
    mean_log_prob: float


@dataclass(frozen=True)
class ScoreResult:
    model: str
    version: str
    scores: tuple[TargetScore, ...]  # one per pair, in request order


@dataclass(frozen=True)
class Caption:
    """One image's n-best captions."""

    hypotheses: tuple[TextHypothesis, ...]
    token_counts: TokenCounts
    image_width: int
    image_height: int


@dataclass(frozen=True)
class CaptionResult:
    model: str
    version: str
    captions: tuple[Caption, ...]  # one per image, in request order
    token_counts: TokenCounts
