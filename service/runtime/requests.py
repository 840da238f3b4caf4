"""From a gRPC request message to what the runtime decodes, checked at the edge.

Every problem of a request is collected and raised as one InvalidArgument naming the fields,
so a client learns everything wrong with its request at once.
"""

from __future__ import annotations

from service.runtime.decoding import DEFAULT_MAX_LENGTH_RATIO, DecodingOptions
from service.runtime.errors import InvalidArgument

MAX_TEXTS = 1000  # source texts in one request (decoded as independent sequences)
MAX_TEXT_CHARS = 100_000  # a text before it is split into sentences (the token limit is a
# sentence's, the model's, checked later)


def _check_text(field: str, text: str, problems: list[str], max_chars: int) -> None:
    if not text.strip():
        problems.append(f"{field}: empty or only white space")
    elif len(text) > max_chars:
        problems.append(f"{field}: {len(text)} characters, at most {max_chars}")


def _decode_utf8(field: str, raw: bytes, problems: list[str]) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        problems.append(f"{field}: invalid UTF-8 at byte {error.start}")
        return ""


def source_texts(request, max_chars: int = MAX_TEXT_CHARS) -> list[str]:
    """The texts of a TranslateRequest: `texts`, then `utf8_texts`, in order."""
    problems: list[str] = []
    texts = list(request.texts)
    texts += [
        _decode_utf8(f"utf8_texts[{i}]", raw, problems) for i, raw in enumerate(request.utf8_texts)
    ]
    if not texts:
        problems.append("texts: at least one text is needed (texts or utf8_texts)")
    if len(texts) > MAX_TEXTS:
        problems.append(f"texts: {len(texts)} texts, at most {MAX_TEXTS} in one request")
    fields = [f"texts[{i}]" for i in range(len(request.texts))]
    fields += [f"utf8_texts[{i}]" for i in range(len(request.utf8_texts))]
    for field, text in zip(fields, texts, strict=True):
        if not any(p.startswith(field + ":") for p in problems):
            _check_text(field, text, problems, max_chars)
    if problems:
        raise InvalidArgument("; ".join(problems))
    return texts


def stream_source_text(request, max_chars: int = MAX_TEXT_CHARS) -> str:
    """The one text of a TranslateStreamRequest (`text` or `utf8_text`)."""
    problems: list[str] = []
    source = request.WhichOneof("source")
    if source is None:
        raise InvalidArgument("source: text or utf8_text is needed")
    field = source
    text = request.text if source == "text" else _decode_utf8(field, request.utf8_text, problems)
    if not problems:
        _check_text(field, text, problems, max_chars)
    if problems:
        raise InvalidArgument("; ".join(problems))
    return text


def splitting_values() -> dict[str, int]:
    """SentenceSplitting's value of each way to cut a text (documents.SPLITTING)."""
    from attnserve.v1 import translation_pb2

    return {
        "sentences": translation_pb2.SENTENCE_SPLITTING_SENTENCES,
        "lines": translation_pb2.SENTENCE_SPLITTING_LINES,
        "none": translation_pb2.SENTENCE_SPLITTING_NONE,
    }


def sentence_splitting(request) -> str:
    """Where the request's texts are cut (documents.SPLITTING); unset is "sentences"."""
    names = {value: name for name, value in splitting_values().items()}
    value = request.sentence_splitting
    if value == 0:
        return "sentences"
    if value not in names:
        raise InvalidArgument(f"sentence_splitting: unknown value {value}")
    return names[value]


MAX_SUPPRESS_TOKENS = 16  # tokens of one suppressed word or phrase at most


def _given(message, name: str, default):
    return getattr(message, name) if message.HasField(name) else default


def _suppressed(message, tokenize, problems: list[str]) -> tuple[tuple[int, ...], ...]:
    """The token sequences of `suppress`, each checked."""
    sequences = []
    for i, phrase in enumerate(message.suppress):
        ids = tuple(tokenize(phrase)) if phrase.strip() else ()
        if not ids:
            problems.append(f"suppress[{i}]: empty or only white space")
        elif len(ids) > MAX_SUPPRESS_TOKENS:
            problems.append(f"suppress[{i}]: {len(ids)} tokens, at most {MAX_SUPPRESS_TOKENS}")
        else:
            sequences.append(ids)
    return tuple(dict.fromkeys(sequences))


def text_format(request) -> str:
    """What the request's texts are written in (markup.FORMATS); unset is "plain"."""
    from attnserve.v1 import translation_pb2

    names = {
        translation_pb2.TEXT_FORMAT_UNSPECIFIED: "plain",
        translation_pb2.TEXT_FORMAT_PLAIN: "plain",
        translation_pb2.TEXT_FORMAT_HTML: "html",
        translation_pb2.TEXT_FORMAT_XML: "xml",
    }
    if request.text_format not in names:
        raise InvalidArgument(f"text_format: unknown value {request.text_format}")
    return names[request.text_format]


def decoding_options(
    message, max_length_limit: int, default_max_length: int, tokenize=None
) -> DecodingOptions:
    """DecodingOptions from the message, defaults for unset fields, validated; `tokenize`
    (text -> token ids) reads `suppress` (a model without one refuses it)."""
    sampling, problems = message.sampling, []
    suppress: tuple[tuple[int, ...], ...] = ()
    if message.suppress and tokenize is None:
        problems.append("suppress: this model has no output tokenizer")
    elif message.suppress:
        suppress = _suppressed(message, tokenize, problems)
    options = DecodingOptions(
        beam_size=_given(message, "beam_size", 1),
        max_length=_given(message, "max_length", default_max_length),
        length_penalty=_given(message, "length_penalty", 1.0),
        num_hypotheses=_given(message, "num_hypotheses", 1),
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        top_p=_given(sampling, "top_p", 1.0),
        seed=_given(sampling, "seed", None),
        min_length=_given(message, "min_length", 0),
        no_repeat_ngram_size=_given(message, "no_repeat_ngram_size", 0),
        repetition_penalty=_given(message, "repetition_penalty", 1.0),
        suppress=suppress,
        max_length_ratio=_given(message, "max_length_ratio", DEFAULT_MAX_LENGTH_RATIO),
    )
    try:
        options.validate(max_length_limit)
    except InvalidArgument as error:
        problems.insert(0, str(error))
    if problems:
        raise InvalidArgument("; ".join(problems))
    return options


def target_prefix(message, tokenize, max_length: int) -> tuple[int, ...]:
    """The token ids of `target_prefix` (empty: none), checked against `max_length`."""
    text = message.target_prefix
    if not text:
        return ()
    if not text.strip():
        raise InvalidArgument("target_prefix: only white space")
    ids = tuple(tokenize(text))
    if len(ids) >= max_length:
        raise InvalidArgument(
            f"target_prefix: {len(ids)} tokens, at most max_length - 1 ({max_length - 1})"
        )
    return ids


def _checked(*checks) -> list:
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


def translate_request(
    request,
    max_length_limit: int,
    default_max_length: int,
    max_text_chars: int = MAX_TEXT_CHARS,
    tokenize=None,
):
    """(texts, DecodingOptions) of a TranslateRequest, every bad field named at once."""
    return _checked(
        lambda: source_texts(request, max_text_chars),
        lambda: decoding_options(request.options, max_length_limit, default_max_length, tokenize),
    )


def translate_stream_request(
    request,
    max_length_limit: int,
    default_max_length: int,
    max_text_chars: int = MAX_TEXT_CHARS,
    tokenize=None,
):
    """(text, DecodingOptions) of a TranslateStreamRequest, every bad field named at once."""
    return _checked(
        lambda: stream_source_text(request, max_text_chars),
        lambda: decoding_options(request.options, max_length_limit, default_max_length, tokenize),
    )
