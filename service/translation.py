"""Text in, hypotheses out, over any `Engine`: the translation pipeline without transport."""

from __future__ import annotations

from collections.abc import Sequence

from service.batching import source_batch
from service.decoding import DecodingOptions, Hypothesis, decode
from service.inference import CachedInference, Engine, Inference
from service.tokenizer import BOS_ID, EOS_ID, Tokenizer


def translate_ids(
    engine: Engine,
    token_ids: Sequence[list[int]],
    options: DecodingOptions,
    max_source_length: int,
    inference_type: type[Inference] = CachedInference,
) -> list[list[Hypothesis]]:
    """Decodes one batch of tokenized sources (without `</s>`), n-best per source."""
    src_ids, src_mask = source_batch(list(token_ids), max_source_length)
    inference = inference_type(engine, engine.encode(src_ids, src_mask), len(token_ids))
    return decode(inference, len(token_ids), options, BOS_ID, EOS_ID)


def translate_batches(
    engine: Engine,
    token_ids: Sequence[list[int]],
    options: DecodingOptions,
    max_source_length: int,
    batch_size: int = 32,
    inference_type: type[Inference] = CachedInference,
    group_by_length: bool = True,
) -> list[list[Hypothesis]]:
    """n-best hypotheses for every source, in input order, decoded `batch_size` at a time;
    batches group similar lengths unless `group_by_length` is off (then input order)."""
    order = list(range(len(token_ids)))
    if group_by_length:
        order.sort(key=lambda i: len(token_ids[i]))
    results: list[list[Hypothesis]] = [[] for _ in token_ids]
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        sources = [token_ids[i] for i in chunk]
        nbest = translate_ids(engine, sources, options, max_source_length, inference_type)
        for i, hypotheses in zip(chunk, nbest, strict=True):
            results[i] = hypotheses
    return results


def translate_texts(
    engine: Engine,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    options: DecodingOptions,
    max_source_length: int,
    batch_size: int = 32,
) -> list[list[Hypothesis]]:
    """n-best hypotheses for every text, in input order."""
    token_ids = tokenizer.encode_batch(list(texts))
    return translate_batches(engine, token_ids, options, max_source_length, batch_size)
