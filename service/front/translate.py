"""TranslationService at the edge: its request messages parsed and checked into the runtime's
typed requests (service.runtime.requests), the translator's results (service.runtime.results)
made its response messages.

Checks run in the order clients have always seen: the texts and the decoding options (one
error naming both), then the sentence splitting, the text format, the glossary and the target
prefix; a sentence's tokens are checked when the translator prepares it.
"""

from __future__ import annotations

from functools import partial

from service.front.decoding import (
    alignment_message,
    decoding_request,
    hypothesis_message,
    token_counts_message,
)
from service.front.servicer import Method, ModelServicer
from service.runtime import glossary
from service.runtime.documents import SPLITTING
from service.runtime.errors import InvalidArgument
from service.runtime.markup import FORMATS
from service.runtime.requests import (
    MAX_TEXT_CHARS,
    DecodingRequest,
    ScoreRequest,
    Tokenize,
    TranslateRequest,
    check_text,
    check_texts,
    checked,
    raise_problems,
    writable,
)
from service.runtime.results import PartialText, ScoreResult, TranslateResult
from service.runtime.translation import TranslationModel
from service.wire.v1 import translation_pb2, translation_pb2_grpc

# each SentenceSplitting and TextFormat value's name in the runtime; unset is the first name
SPLITTING_NAMES = {
    translation_pb2.SentenceSplitting.Value(f"SENTENCE_SPLITTING_{name.upper()}"): name
    for name in SPLITTING
} | {translation_pb2.SENTENCE_SPLITTING_UNSPECIFIED: SPLITTING[0]}
FORMAT_NAMES = {
    translation_pb2.TextFormat.Value(f"TEXT_FORMAT_{name.upper()}"): name for name in FORMATS
} | {translation_pb2.TEXT_FORMAT_UNSPECIFIED: FORMATS[0]}


def _decode_utf8(field: str, raw: bytes, problems: list[str]) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        problems.append(f"{field}: invalid UTF-8 at byte {error.start}")
        return ""


def text_fields(message: translation_pb2.TranslateRequest) -> list[str]:
    """The field of each text: `texts`, then `utf8_texts`, in order."""
    fields = [f"texts[{i}]" for i in range(len(message.texts))]
    return fields + [f"utf8_texts[{i}]" for i in range(len(message.utf8_texts))]


def source_texts(message, max_chars: int = MAX_TEXT_CHARS) -> list[str]:
    """The texts of a TranslateRequest: `texts`, then `utf8_texts`, in order."""
    problems: list[str] = []
    texts = list(message.texts)
    texts += [
        _decode_utf8(f"utf8_texts[{i}]", raw, problems) for i, raw in enumerate(message.utf8_texts)
    ]
    check_texts(text_fields(message), texts, problems, max_chars)
    raise_problems(problems)
    return texts


def stream_source_text(message, max_chars: int = MAX_TEXT_CHARS) -> str:
    """The one text of a TranslateStreamRequest (`text` or `utf8_text`)."""
    problems: list[str] = []
    field = message.WhichOneof("source")
    if field is None:
        raise InvalidArgument("source: text or utf8_text is needed")
    text = message.text if field == "text" else _decode_utf8(field, message.utf8_text, problems)
    if not problems:
        check_text(field, text, problems, max_chars)
    raise_problems(problems)
    return text


def translate_request(
    message,
    max_length_limit: int,
    default_max_length: int,
    max_text_chars: int = MAX_TEXT_CHARS,
    tokenize: Tokenize | None = None,
    given: DecodingRequest | None = None,
) -> list:
    """(texts, DecodingOptions) of a TranslateRequest, every bad field named at once
    (`given`: its options as read, where the caller has read them)."""
    texts = partial(source_texts, message, max_text_chars)
    given = given or decoding_request(message.options)
    return _with_options(texts, given, max_length_limit, default_max_length, tokenize)


def translate_stream_request(
    message,
    max_length_limit: int,
    default_max_length: int,
    max_text_chars: int = MAX_TEXT_CHARS,
    tokenize: Tokenize | None = None,
    given: DecodingRequest | None = None,
) -> list:
    """(text, DecodingOptions) of a TranslateStreamRequest, every bad field named at once."""
    text = partial(stream_source_text, message, max_text_chars)
    given = given or decoding_request(message.options)
    return _with_options(text, given, max_length_limit, default_max_length, tokenize)


def _with_options(sources, given, max_length_limit, default_max_length, tokenize) -> list:
    return checked(sources, lambda: given.options(max_length_limit, default_max_length, tokenize))


def sentence_splitting(message) -> str:
    """Where the request's texts are cut (documents.SPLITTING); unset is "sentences"."""
    value = message.sentence_splitting
    if value not in SPLITTING_NAMES:
        raise InvalidArgument(f"sentence_splitting: unknown value {value}")
    return SPLITTING_NAMES[value]


def text_format(message) -> str:
    """What the request's texts are written in (markup.FORMATS); unset is "plain"."""
    if message.text_format not in FORMAT_NAMES:
        raise InvalidArgument(f"text_format: unknown value {message.text_format}")
    return FORMAT_NAMES[message.text_format]


def parse_translate(message, model: TranslationModel) -> TranslateRequest:
    """A TranslateRequest message as the translator's typed request."""
    given = decoding_request(message.options)
    texts, options = translate_request(message, *_limits(model), given)
    return _typed(message, model, texts, text_fields(message), options, given)


def parse_translate_stream(message, model: TranslationModel) -> TranslateRequest:
    """A TranslateStreamRequest message as the translator's typed request (one text)."""
    given = decoding_request(message.options)
    text, options = translate_stream_request(message, *_limits(model), given)
    return _typed(message, model, [text], [message.WhichOneof("source")], options, given)


def _limits(model: TranslationModel) -> tuple:
    encode = _written(model)
    return model.max_output_length, model.default_max_length, model.max_text_chars, encode


def _written(model: TranslationModel):
    """What `suppress` and `target_prefix` name is written, not read: the model's target
    tokenizer, refusing characters its vocabulary lacks."""
    return writable(model.tokenizer.encode_target, model.tokenizer.unknown_id)


def _typed(message, model: TranslationModel, texts, fields, options, given) -> TranslateRequest:
    """The request's other fields checked, in order, each raising on its own (`given`: the
    options as read)."""
    splitting, written = sentence_splitting(message), text_format(message)
    sent = [glossary.Term(entry.source, entry.target) for entry in message.glossary]
    terms, problems = glossary.checked(sent)
    raise_problems(problems)
    return TranslateRequest(
        texts=tuple(texts),
        fields=tuple(fields),
        options=options,
        prefix=given.prefix(_written(model), options.max_length),
        splitting=splitting,
        text_format=written,
        glossary=terms,
        return_log_probs=given.return_log_probs,
        return_alignment=given.return_alignment,
        source_language=message.source_language,
        target_language=message.target_language,
    )


def parse_score(message) -> ScoreRequest:
    return ScoreRequest(
        tuple((pair.source, pair.target) for pair in message.pairs),
        message.source_language,
        message.target_language,
    )


def translate_response(result: TranslateResult) -> translation_pb2.TranslateResponse:
    response = translation_pb2.TranslateResponse(
        model=result.model,
        version=result.version,
        token_counts=token_counts_message(result.token_counts),
        source_language=result.source_language,
        target_language=result.target_language,
    )
    for translation in result.translations:
        message = response.translations.add(
            hypotheses=[hypothesis_message(h) for h in translation.hypotheses],
            glossary_applied=translation.glossary_applied,
            token_counts=token_counts_message(translation.token_counts),
        )
        for span in translation.sentences:
            added = message.sentences.add(
                source_start=span.source_start,
                source_end=span.source_end,
                target_start=span.target_start,
                target_end=span.target_end,
            )
            if span.alignment is not None:
                added.alignment.CopyFrom(alignment_message(span.alignment))
    return response


def score_response(result: ScoreResult) -> translation_pb2.ScoreResponse:
    response = translation_pb2.ScoreResponse(model=result.model, version=result.version)
    for score in result.scores:
        response.scores.add(
            tokens=score.tokens,
            token_log_probs=score.token_log_probs,
            log_prob=score.log_prob,
            mean_log_prob=score.mean_log_prob,
        )
    return response


def partial_message(partial: PartialText) -> translation_pb2.TranslateStreamResponse:
    hypothesis = translation_pb2.PartialHypothesis(
        text=partial.text, tokens=partial.tokens, steps=partial.steps
    )
    return translation_pb2.TranslateStreamResponse(partial=hypothesis)


def result_message(result: TranslateResult) -> translation_pb2.TranslateStreamResponse:
    return translation_pb2.TranslateStreamResponse(result=translate_response(result))


METHODS = {
    "Translate": Method(
        lambda model, message: model.prepare(parse_translate(message, model)),
        lambda model, *decoded: translate_response(model.response(*decoded)),
    ),
    "TranslateStream": Method(
        lambda model, message: model.prepare(parse_translate_stream(message, model)),
        lambda model, *decoded: result_message(model.response(*decoded)),
        partial_message,
    ),
    "Score": Method(
        lambda model, message: model.prepare_score(parse_score(message)),
        lambda model, *decoded: score_response(model.score_response(*decoded)),
    ),
}


# the service a front serves the kind under: a name of the wire, which the runtime does not know
TranslationModel.service = "attnserve.v1.TranslationService"


class TranslationServicer(ModelServicer, translation_pb2_grpc.TranslationServiceServicer):
    service = TranslationModel.service
    file = translation_pb2.DESCRIPTOR
    methods = METHODS

    async def Translate(self, request, context):
        return await self.unary("Translate", request, context)

    async def TranslateStream(self, request, context):
        async for message in self.stream("TranslateStream", request, context):
            yield message

    async def Score(self, request, context):
        return await self.unary("Score", request, context)
