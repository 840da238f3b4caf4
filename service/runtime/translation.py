"""The translation kind: texts in, translations out (TranslationService), and the same
pipeline in process over any `Engine`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.runtime import requests
from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions, Hypothesis, decode
from service.runtime.errors import InvalidArgument
from service.runtime.inference import CachedInference, Engine, Inference
from service.runtime.kinds import Prepared, ServedModel
from service.runtime.tokenizer import Tokenizer

# -- in process -------------------------------------------------------------------------------


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
    tokens = engine.special_tokens
    return decode(inference, len(token_ids), options, tokens.bos, tokens.eos)


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


# -- served -----------------------------------------------------------------------------------


class TranslationModel(ServedModel):
    """A translator behind TranslationService: SentencePiece text in, `</s>` appended."""

    kind = "transformer"
    service = "attnserve.v1.TranslationService"

    def __init__(self, version, config):
        super().__init__(version, config)
        self.tokenizer = Tokenizer(version.tokenizer_file)
        limit = version.manifest["limits"]["max_source_tokens"] - 1  # `</s>` is added
        self.max_input_tokens = min(config.max_input_tokens or limit, limit)

    async def prepare(self, request, stream: bool) -> Prepared:
        if stream:
            text, options = requests.translate_stream_request(
                request, self.max_output_length, self.default_max_length
            )
            texts, fields = [text], [request.WhichOneof("source")]
        else:
            texts, options = requests.translate_request(
                request, self.max_output_length, self.default_max_length
            )
            fields = [f"texts[{i}]" for i in range(len(request.texts))]
            fields += [f"utf8_texts[{i}]" for i in range(len(request.utf8_texts))]
        token_ids = self.tokenizer.encode_batch(list(texts))
        problems = [
            f"{field}: {len(ids)} tokens, at most {self.max_input_tokens}"
            for field, ids in zip(fields, token_ids, strict=True)
            if len(ids) > self.max_input_tokens
        ]
        if problems:
            raise InvalidArgument("; ".join(problems))
        src_ids, src_mask = source_batch(token_ids, self.max_input_tokens + 1)
        return Prepared(
            {"src_ids": src_ids, "src_mask": src_mask},
            options,
            fields,
            keep_alignment=request.options.return_alignment,
            keep_log_probs=request.options.return_log_probs,
            sources=token_ids,
        )

    def aligned(self, h: Hypothesis, source_ids: list[int], options_message):
        """The hypothesis message, with its alignment when asked for."""
        message = self.hypothesis(h, options_message.return_log_probs)
        if options_message.return_alignment and h.alignment is not None:
            tokenizer, eos = self.tokenizer, self.special_tokens.eos
            source = [*source_ids, eos]
            target = h.tokens + ([eos] if h.finished else [])
            weights = np.asarray(h.alignment)[: len(target), : len(source)]
            message.alignment.source_tokens.extend(tokenizer.pieces(source))
            message.alignment.target_tokens.extend(tokenizer.pieces(target))
            message.alignment.weights.extend(weights.astype(float).ravel().tolist())
        return message

    def response(self, prepared: Prepared, results, request):
        from attnserve.v1 import translation_pb2

        response = translation_pb2.TranslateResponse(
            model=self.version.name, version=self.version.version
        )
        for source_ids, hypotheses in zip(prepared.sources, results, strict=True):
            translation = response.translations.add()
            for h in hypotheses:
                translation.hypotheses.append(self.aligned(h, source_ids, request.options))
            translation.token_counts.input_tokens = len(source_ids) + 1
            translation.token_counts.output_tokens = sum(len(h.tokens) for h in hypotheses)
            response.token_counts.input_tokens += translation.token_counts.input_tokens
            response.token_counts.output_tokens += translation.token_counts.output_tokens
        return response

    def partial(self, tokens: list[int], steps: int):
        from attnserve.v1 import translation_pb2

        partial = translation_pb2.PartialHypothesis(
            text=self.tokenizer.decode(tokens), tokens=self.tokenizer.pieces(tokens), steps=steps
        )
        return translation_pb2.TranslateStreamResponse(partial=partial)

    def final(self, response):
        from attnserve.v1 import translation_pb2

        return translation_pb2.TranslateStreamResponse(result=response)

    @staticmethod
    def golden_inputs(version, entry: dict) -> dict[str, np.ndarray]:
        limit = version.manifest["limits"]["max_source_tokens"]
        src_ids, src_mask = source_batch([entry["source_ids"]], limit)
        return {"src_ids": src_ids, "src_mask": src_mask}


MODEL = TranslationModel
