"""decoding.proto's messages and the runtime's values, both ways: DecodingOptions in, a
Hypothesis (with its alignment or attention maps) and TokenCounts out. Every service's module
(service.front.translate, service.front.caption) converts through these."""

from __future__ import annotations

from service.runtime.decoding import DecodingOptions
from service.runtime.requests import DecodingRequest, Tokenize
from service.runtime.results import Alignment, AttentionMaps, TextHypothesis, TokenCounts
from service.wire.v1 import decoding_pb2

# DecodingOptions' fields with presence: unset is the server's default, not zero
OPTIONAL = (
    "beam_size",
    "max_length",
    "length_penalty",
    "num_hypotheses",
    "min_length",
    "no_repeat_ngram_size",
    "repetition_penalty",
    "max_length_ratio",
)


def _given(message, name: str):
    return getattr(message, name) if message.HasField(name) else None


def decoding_request(message: decoding_pb2.DecodingOptions) -> DecodingRequest:
    """The options as the client set them (None where unset)."""
    sampling = message.sampling
    return DecodingRequest(
        **{name: _given(message, name) for name in OPTIONAL},
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        top_p=_given(sampling, "top_p"),
        seed=_given(sampling, "seed"),
        suppress=tuple(message.suppress),
        target_prefix=message.target_prefix,
        return_log_probs=message.return_log_probs,
        return_alignment=message.return_alignment,
    )


def decoding_options(
    message: decoding_pb2.DecodingOptions,
    max_length_limit: int,
    default_max_length: int,
    tokenize: Tokenize | None = None,
) -> DecodingOptions:
    """The message's checked DecodingOptions (DecodingRequest.options)."""
    return decoding_request(message).options(max_length_limit, default_max_length, tokenize)


def alignment_message(alignment: Alignment) -> decoding_pb2.Alignment:
    return decoding_pb2.Alignment(
        source_tokens=alignment.source_tokens,
        target_tokens=alignment.target_tokens,
        weights=alignment.weights,
    )


def attention_message(maps: AttentionMaps) -> decoding_pb2.AttentionMaps:
    return decoding_pb2.AttentionMaps(
        grid_height=maps.grid_height,
        grid_width=maps.grid_width,
        image_height=maps.image_height,
        image_width=maps.image_width,
        tokens=[decoding_pb2.TokenAttention(token=t.token, weights=t.weights) for t in maps.tokens],
    )


def hypothesis_message(h: TextHypothesis) -> decoding_pb2.Hypothesis:
    """A Hypothesis message; its alignment and attention only when the hypothesis has them."""
    message = decoding_pb2.Hypothesis(
        text=h.text,
        score=h.score,
        log_prob=h.log_prob,
        tokens=h.tokens,
        token_log_probs=h.token_log_probs,
        finished=h.finished,
    )
    if h.alignment is not None:
        message.alignment.CopyFrom(alignment_message(h.alignment))
    if h.attention is not None:
        message.attention.CopyFrom(attention_message(h.attention))
    return message


def token_counts_message(counts: TokenCounts) -> decoding_pb2.TokenCounts:
    return decoding_pb2.TokenCounts(
        input_tokens=counts.input_tokens, output_tokens=counts.output_tokens
    )
