"""CaptionService at the edge: its request messages parsed and checked into the runtime's
CaptionRequest (service.runtime.requests), the captioner's results (service.runtime.results)
made its response messages. The images stay encoded: the captioner decodes and checks each on
the front's thread pool."""

from __future__ import annotations

from service.front.decoding import decoding_request, hypothesis_message, token_counts_message
from service.front.servicer import Method, ModelServicer
from service.runtime.captioning import CaptionModel, check_images
from service.runtime.errors import InvalidArgument
from service.runtime.requests import CaptionRequest, raise_problems, writable
from service.runtime.results import CaptionResult, PartialText
from service.wire.v1 import caption_pb2, caption_pb2_grpc


def parse_caption(message, model: CaptionModel) -> CaptionRequest:
    """A CaptionRequest message as the captioner's typed request."""
    images = tuple(message.images)
    return _typed(message, model, images, tuple(f"images[{i}]" for i in range(len(images))))


def parse_caption_stream(message, model: CaptionModel) -> CaptionRequest:
    """A CaptionStreamRequest message as the captioner's typed request (one image)."""
    return _typed(message, model, (message.image,), ("image",))


def _typed(message, model: CaptionModel, images, fields) -> CaptionRequest:
    """The count of images, the options and the prefix checked: one error naming them all."""
    problems: list[str] = []
    check_images(images, problems)
    given = decoding_request(message.options)
    encode = writable(model.tokenizer.encode, model.tokenizer.unknown_id)
    options, prefix = None, ()
    try:
        options = given.options(model.max_output_length, model.default_max_length, encode)
        prefix = given.prefix(encode, options.max_length)
    except InvalidArgument as error:
        problems.append(str(error))
    raise_problems(problems)
    return CaptionRequest(
        images=images,
        fields=fields,
        options=options,
        prefix=prefix,
        return_log_probs=given.return_log_probs,
        return_attention=message.return_attention,
    )


def caption_response(result: CaptionResult) -> caption_pb2.CaptionResponse:
    response = caption_pb2.CaptionResponse(
        model=result.model,
        version=result.version,
        token_counts=token_counts_message(result.token_counts),
    )
    for caption in result.captions:
        response.captions.add(
            hypotheses=[hypothesis_message(h) for h in caption.hypotheses],
            token_counts=token_counts_message(caption.token_counts),
            image_width=caption.image_width,
            image_height=caption.image_height,
        )
    return response


def partial_message(partial: PartialText) -> caption_pb2.CaptionStreamResponse:
    caption = caption_pb2.PartialCaption(
        text=partial.text, tokens=partial.tokens, steps=partial.steps
    )
    return caption_pb2.CaptionStreamResponse(partial=caption)


def result_message(result: CaptionResult) -> caption_pb2.CaptionStreamResponse:
    return caption_pb2.CaptionStreamResponse(result=caption_response(result))


METHODS = {
    "Caption": Method(
        lambda model, message: model.prepare(parse_caption(message, model)),
        lambda model, *decoded: caption_response(model.response(*decoded)),
    ),
    "CaptionStream": Method(
        lambda model, message: model.prepare(parse_caption_stream(message, model)),
        lambda model, *decoded: result_message(model.response(*decoded)),
        partial_message,
    ),
}


# the service a front serves the kind under: a name of the wire, which the runtime does not know
CaptionModel.service = "attnserve.v1.CaptionService"


class CaptionServicer(ModelServicer, caption_pb2_grpc.CaptionServiceServicer):
    service = CaptionModel.service
    file = caption_pb2.DESCRIPTOR
    methods = METHODS

    async def Caption(self, request, context):
        return await self.unary("Caption", request, context)

    async def CaptionStream(self, request, context):
        async for message in self.stream("CaptionStream", request, context):
            yield message
