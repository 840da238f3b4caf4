"""The runtime's typed requests, and the checks every way in shares.

A front's parser (service.front: one module per gRPC service) turns its wire's message into
these frozen values; the kinds (service.runtime.translation, service.runtime.captioning) prepare
them for decoding. Nothing here knows a wire: each text and image carries the name of the
request field it came from, so every message names the client's own fields. Problems are
collected and raised as one InvalidArgument, so a client learns everything wrong at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from service.runtime.decoding import DecodingOptions
from service.runtime.errors import InvalidArgument
from service.runtime.glossary import Term
from service.runtime.tokenizer import visible

MAX_TEXTS = 1000  # source texts in one request (decoded as independent sequences)
MAX_TEXT_CHARS = 100_000  # a text before it is split into sentences (the token limit is a
# sentence's, the model's, checked later)
MAX_SUPPRESS_TOKENS = 16  # tokens of one suppressed word or phrase at most

Tokenize = Callable[[str], list[int]]  # text -> token ids, the model's tokenizer


def writable(encode: Tokenize, unknown: int) -> Tokenize:
    """`encode` of what a model must write (a target prefix, a suppressed word): a text with
    characters its vocabulary lacks (each `unknown` in `encode`'s ids) is refused naming
    them, as it could never be written as given (a prefix would lose them, a ban would ban
    `<unk>`)."""

    def checked(text: str) -> list[int]:
        ids = encode(text)
        if unknown in ids:
            lacking = [c for c in dict.fromkeys(text) if not c.isspace() and unknown in encode(c)]
            shown = " ".join(repr(c) for c in lacking[:8]) or "(some)"
            raise InvalidArgument(f"characters the model's vocabulary lacks: {shown}")
        return ids

    return checked


def check_text(field: str, text: str, problems: list[str], max_chars: int) -> None:
    """Appends the problem of one text, if any: empty (white space and what a tokenizer
    does not read: tokenizer.INVISIBLE), or longer than `max_chars`."""
    if not visible(text).strip():
        problems.append(f"{field}: empty or only white space")
    elif len(text) > max_chars:
        problems.append(f"{field}: {len(text)} characters, at most {max_chars}")


def check_texts(
    fields: Sequence[str], texts: Sequence[str], problems: list[str], max_chars: int
) -> None:
    """Appends the problems of a request's texts: none or too many, then each text's, except
    for a field `problems` names already (a text the wire could not read)."""
    if not texts:
        problems.append("texts: at least one text is needed (texts or utf8_texts)")
    if len(texts) > MAX_TEXTS:
        problems.append(f"texts: {len(texts)} texts, at most {MAX_TEXTS} in one request")
    for field, text in zip(fields, texts, strict=True):
        if not any(p.startswith(field + ":") for p in problems):
            check_text(field, text, problems, max_chars)


def checked(*checks: Callable) -> list:
    """Runs every check; one InvalidArgument naming every problem of all of them."""
    results, problems = [], []
    for check in checks:
        try:
            results.append(check())
        except InvalidArgument as error:
            problems.append(str(error))
    if problems:
        raise InvalidArgument("; ".join(problems))
    return results


def raise_problems(problems: Sequence[str]) -> None:
    if problems:
        raise InvalidArgument("; ".join(problems))


@dataclass(frozen=True)
class DecodingRequest:
    """A request's decoding options as the client sent them, before the model's defaults and
    checks (`options`); None is unset: DecodingOptions' default (the model's max_length)."""

    beam_size: int | None = None
    max_length: int | None = None
    length_penalty: float | None = None
    num_hypotheses: int | None = None
    temperature: float = 0.0
    top_k: int = 0
    top_p: float | None = None
    seed: int | None = None
    min_length: int | None = None
    no_repeat_ngram_size: int | None = None
    repetition_penalty: float | None = None
    max_length_ratio: float | None = None
    suppress: tuple[str, ...] = ()  # words or phrases never produced
    target_prefix: str = ""  # the text every output starts with; empty: none
    return_log_probs: bool = False
    return_alignment: bool = False

    def options(
        self, max_length_limit: int, default_max_length: int, tokenize: Tokenize | None = None
    ) -> DecodingOptions:
        """The checked DecodingOptions, defaults for unset fields; `tokenize` reads `suppress`
        (a model without one refuses it). One InvalidArgument names every bad field."""
        problems: list[str] = []
        suppress: tuple[tuple[int, ...], ...] = ()
        if self.suppress and tokenize is None:
            problems.append("suppress: this model has no output tokenizer")
        elif self.suppress:
            suppress = _suppressed(self.suppress, tokenize, problems)
        given = {n: getattr(self, n) for n in _PASSED if getattr(self, n) is not None}
        max_length = default_max_length if self.max_length is None else self.max_length
        options = DecodingOptions(**given, max_length=max_length, suppress=suppress)
        try:
            options.validate(max_length_limit)
        except InvalidArgument as error:
            problems.insert(0, str(error))
        raise_problems(problems)
        return options

    def prefix(self, tokenize: Tokenize, max_length: int) -> tuple[int, ...]:
        """The token ids of `target_prefix` (empty: none), checked against `max_length`."""
        text = self.target_prefix
        if not text:
            return ()
        if not text.strip():
            raise InvalidArgument("target_prefix: only white space")
        try:
            ids = tuple(tokenize(text))
        except InvalidArgument as error:
            raise InvalidArgument(f"target_prefix: {error}") from None
        if len(ids) >= max_length:
            raise InvalidArgument(
                f"target_prefix: {len(ids)} tokens, at most max_length - 1 ({max_length - 1})"
            )
        return ids


# the fields a DecodingRequest passes to DecodingOptions as they are, where set (read once:
# `fields` walks a class's fields at each call)
_PASSED = tuple(
    sorted(
        ({f.name for f in fields(DecodingOptions)} & {f.name for f in fields(DecodingRequest)})
        - {"suppress", "max_length"}
    )
)


def _suppressed(
    phrases: Sequence[str], tokenize: Tokenize, problems: list[str]
) -> tuple[tuple[int, ...], ...]:
    """The token sequences of the suppressed phrases, each checked."""
    sequences = []
    for i, phrase in enumerate(phrases):
        try:
            ids = tuple(tokenize(phrase)) if phrase.strip() else ()
        except InvalidArgument as error:
            problems.append(f"suppress[{i}]: {error}")
            continue
        if not ids:
            problems.append(f"suppress[{i}]: empty or only white space")
        elif len(ids) > MAX_SUPPRESS_TOKENS:
            problems.append(f"suppress[{i}]: {len(ids)} tokens, at most {MAX_SUPPRESS_TOKENS}")
        else:
            sequences.append(ids)
    return tuple(dict.fromkeys(sequences))


@dataclass(frozen=True)
class TranslateRequest:
    """Texts to translate, their fields checked: what a translator prepares. The sentences'
    tokens are checked against the model's limit when they are prepared."""

    texts: tuple[str, ...]
    fields: tuple[str, ...]  # the request field of each text ("texts[0]", "utf8_texts[1]")
    options: DecodingOptions
    prefix: tuple[int, ...] = ()  # token ids the first sentence of each text starts with
    splitting: str = "sentences"  # where texts are cut (documents.SPLITTING)
    text_format: str = "plain"  # what the texts are written in (markup.FORMATS)
    glossary: tuple[Term, ...] = ()  # checked terms; a response names them by index
    return_log_probs: bool = False
    return_alignment: bool = False
    source_language: str = ""  # empty: the model's only one, or detected (see the model)
    target_language: str = ""  # empty: the model's only one


@dataclass(frozen=True)
class ScoreRequest:
    """(source, target) pairs to score, as sent: the translator checks them by their tokens."""

    pairs: tuple[tuple[str, str], ...]
    source_language: str = ""
    target_language: str = ""


@dataclass(frozen=True)
class CaptionRequest:
    """Encoded images to caption, their count and options checked: the captioner decodes and
    checks each image on the front's thread pool."""

    images: tuple[bytes, ...]  # PNG, JPEG, WebP, ... as sent
    fields: tuple[str, ...]  # the request field of each image ("images[0]", "image")
    options: DecodingOptions
    prefix: tuple[int, ...] = ()  # token ids every caption starts with
    return_log_probs: bool = False
    return_attention: bool = False  # each hypothesis' attention maps over the image grid
