"""The JSON form of the gRPC contract: `POST /v1/<method>` for every method of every service
served (`/v1/translate`, `/v1/translate:stream`, `/v1/score`, `/v1/caption`, ...), each body
protobuf's own JSON mapping of the method's request message (google.protobuf.json_format),
each answer its response message's; a stream as server-sent events, one message an event.
A body may also be a multipart or URL-encoded form (an image uploaded as a file): each field
named as in the message, a file's bytes as a `bytes` field (a text's as its UTF-8), a
message-typed field as JSON (a field's text or a file's).
Health (`GET /v1/health`, open as gRPC health is) and the models served (`GET /v1/models`,
to any known token where tokens are on, as gRPC reflection lists the services) go beside
them."""

from __future__ import annotations

import base64
import codecs
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from grpc_reflection.v1alpha import reflection
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from service.front.http.calls import (
    TOO_LARGE,
    URL_ENCODED,
    Aborted,
    HttpContext,
    TooLarge,
    authorize,
    bounded,
    error_response,
    header_token,
    timeout_of,
    until_disconnected,
    url_encoded,
    within,
)
from service.front.servicer import ModelServicer
from service.front.state import LIVENESS
from service.front.versions import version_order

FORMS = ("multipart/form-data", URL_ENCODED)
TRUE = ("1", "true", "on", "yes")
FALSE = ("", "0", "false", "off", "no")


def method_path(method: str) -> str:
    """/v1/ path of a gRPC method: Translate -> translate, TranslateStream -> translate:stream,
    a name of several words in snake case."""
    stream = method.endswith("Stream") and method != "Stream"
    base = method[: -len("Stream")] if stream else method
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()
    return f"/v1/{snake}" + (":stream" if stream else "")


def to_json(message: Message) -> dict:
    return json_format.MessageToDict(message)


@dataclass(frozen=True)
class Endpoint:
    """One gRPC method over HTTP."""

    servicer: ModelServicer
    method: MethodDescriptor

    @property
    def path(self) -> str:
        return method_path(self.method.name)

    @property
    def request_class(self):
        return GetMessageClass(self.method.input_type)

    @property
    def label(self) -> str:
        return f"http/{self.method.name}"


class ContractApi:
    """The /v1 routes of the services the front serves."""

    def __init__(self, front, servicers: list[ModelServicer], tokens, refused, max_bytes: int):
        self.front, self.tokens, self.refused = front, tokens, refused
        self.max_bytes = max_bytes
        self.endpoints = [
            Endpoint(servicer, method)
            for servicer in servicers
            for method in servicer.file.services_by_name[
                servicer.service.rpartition(".")[2]
            ].methods
        ]

    def routes(self) -> list[Route]:
        routes = [
            Route(e.path, self._handler(e), methods=["POST"], name=e.method.full_name)
            for e in self.endpoints
        ]
        routes.append(Route("/v1/health", self.health, methods=["GET"]))
        routes.append(Route("/v1/models", self.models, methods=["GET"]))
        return routes

    def _handler(self, endpoint: Endpoint):
        async def handle(request: Request) -> Response:
            try:
                authorize(
                    self.tokens, header_token(request), endpoint.servicer.service, self.refused
                )
                context, message = await self._request(request, endpoint)
                if endpoint.method.server_streaming:
                    return await self._stream(request, endpoint, message, context)
                call = endpoint.servicer.unary(
                    endpoint.method.name, message, context, endpoint.label
                )
                response = await until_disconnected(request, within(context, call))
            except Aborted as aborted:
                return error_response(aborted.code, aborted.details, aborted.status)
            return JSONResponse(to_json(response))

        return handle

    async def _request(self, request: Request, endpoint: Endpoint) -> tuple[HttpContext, Message]:
        """The call's context and request message; a refusal of either (a bad timeout, a body
        that does not parse or is too large) is counted as a call the servicer ends is."""
        received = time.monotonic()
        try:
            context = HttpContext(timeout_of(request))
            return context, await read_message(request, endpoint.request_class, self.max_bytes)
        except Aborted as refused:
            endpoint.servicer.counted_at_edge(endpoint.label, refused.code, received)
            raise

    async def _stream(self, request, endpoint: Endpoint, message, context) -> Response:
        """Server-sent events: `data: <message as JSON>` each; an error after the first
        message is an `event: error` (before it, the HTTP status says it)."""
        messages = _bounded(
            endpoint.servicer.stream(endpoint.method.name, message, context, endpoint.label),
            context,
        )
        try:
            first = await until_disconnected(request, anext(messages))
        except StopAsyncIteration:
            first = None
        except BaseException:
            await messages.aclose()
            raise

        async def events():
            try:
                if first is not None:
                    yield f"data: {json.dumps(to_json(first), ensure_ascii=False)}\n\n"
                async for each in messages:
                    yield f"data: {json.dumps(to_json(each), ensure_ascii=False)}\n\n"
            except Aborted as aborted:
                body = error_response(aborted.code, aborted.details).body.decode()
                yield f"event: error\ndata: {body}\n\n"
            finally:
                await messages.aclose()

        headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    async def health(self, request: Request) -> Response:
        """SERVING (200) as gRPC health says it (`Front.health`), NOT_SERVING (503)
        otherwise; `?service=NAME` asks about one service (or LIVENESS)."""
        front, service = self.front, request.query_params.get("service", "")
        if service and service not in front.services and service != LIVENESS:
            return error_response(grpc.StatusCode.NOT_FOUND, f"service: unknown {service!r}")
        serving = front.health(service)
        status = "SERVING" if serving else "NOT_SERVING"
        return JSONResponse({"status": status}, status_code=200 if serving else 503)

    async def models(self, request: Request) -> Response:
        """Every model version served: its service, kind, languages and whether it is its
        service's default. Where tokens are on, to a known token of any services, as
        reflection, gRPC's list of what is served, answers."""
        try:
            authorize(self.tokens, header_token(request), reflection.SERVICE_NAME, self.refused)
        except Aborted as aborted:
            return error_response(aborted.code, aborted.details)
        front, served = self.front, []
        for service, names in sorted(front.models.items()):
            for name, versions in sorted(names.items()):
                latest = max(versions, key=version_order)  # what a call naming none gets
                for version, model in sorted(versions.items()):
                    served.append(
                        {
                            "name": name,
                            "version": version,
                            "service": service,
                            "kind": model.kind,
                            "default": front.defaults.get(service) == name and version == latest,
                            "languages": {
                                "source": list(model.languages.source),
                                "target": list(model.languages.target),
                            },
                        }
                    )
        return JSONResponse({"models": served})


async def _bounded(messages: AsyncIterator, context: HttpContext) -> AsyncIterator:
    """The stream's messages within its deadline, each awaited with the time left: one
    timeout held across the yields would cancel the handler's task, which reads only the
    first message (the response's task reads the others)."""
    try:
        while True:
            try:
                yield await within(context, anext(messages))
            except StopAsyncIteration:
                return
    finally:
        await messages.aclose()


async def read_message(request: Request, message_class, max_bytes: int) -> Message:
    """The request message of a JSON body or a form; INVALID_ARGUMENT naming what is wrong."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_bytes:
        raise _too_large(f"request: {length} bytes, at most {max_bytes}")
    name = message_class.DESCRIPTOR.full_name
    request = bounded(request, max_bytes)
    try:
        if content_type == URL_ENCODED:
            body = (await request.body()).removeprefix(codecs.BOM_UTF8)
            if not body.lstrip().startswith(b"{"):  # else JSON sent with curl -d's default type
                form = url_encoded(body, request.headers["content-type"])
                fields = await form_fields(form, message_class.DESCRIPTOR)
                return json_format.ParseDict(fields, message_class())
        elif content_type in FORMS:
            async with request.form(max_part_size=max_bytes) as form:
                fields = await form_fields(form, message_class.DESCRIPTOR)
            return json_format.ParseDict(fields, message_class())
        # a byte order mark ignored, as RFC 8259 lets a JSON parser do
        body = (await request.body()).removeprefix(codecs.BOM_UTF8)
        if len(body) > max_bytes:
            raise _too_large(f"request: {len(body)} bytes, at most {max_bytes}")
        return json_format.Parse(body or b"{}", message_class())
    except json_format.ParseError as error:
        raise Aborted(
            grpc.StatusCode.INVALID_ARGUMENT, f"request: not a valid {name} ({error})"
        ) from None
    except UnicodeDecodeError as error:
        raise Aborted(
            grpc.StatusCode.INVALID_ARGUMENT, f"request: invalid UTF-8 at byte {error.start}"
        ) from None
    except TooLarge as error:
        raise _too_large(str(error)) from None
    except HTTPException as error:  # a form Starlette cannot read
        raise Aborted(grpc.StatusCode.INVALID_ARGUMENT, f"request: {error.detail}") from None


def _too_large(details: str) -> Aborted:
    """A body past the bound: HTTP's 413, the caller's INVALID_ARGUMENT (RESOURCE_EXHAUSTED is
    the server's overload, which the error ratio counts)."""
    return Aborted(grpc.StatusCode.INVALID_ARGUMENT, details, TOO_LARGE)


async def form_fields(form, descriptor: Descriptor) -> dict[str, Any]:
    """A form's entries as the JSON mapping of `descriptor`'s message: a file's bytes in
    base64, a message or a list given as JSON text, a repeated field from every entry of
    its name."""
    fields: dict[str, Any] = {}
    for key in dict.fromkeys(form.keys()):
        field = descriptor.fields_by_name.get(key) or _by_json_name(descriptor, key)
        if field is None:
            raise Aborted(grpc.StatusCode.INVALID_ARGUMENT, f"{key}: no such field")
        values = [await _form_value(field, value) for value in form.getlist(key)]
        if field.is_repeated:
            flat = []
            for value in values:
                flat.extend(value if isinstance(value, list) else [value])
            fields[field.name] = flat
        else:
            fields[field.name] = values[-1]
    return fields


def _by_json_name(descriptor: Descriptor, key: str) -> FieldDescriptor | None:
    return next((f for f in descriptor.fields if f.json_name == key), None)


async def _form_value(field: FieldDescriptor, value) -> Any:
    if hasattr(value, "read"):  # an uploaded file
        data = await value.read()
        if field.type == FieldDescriptor.TYPE_BYTES:
            return base64.b64encode(data).decode()
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            return data.decode("utf-8")  # one text, whatever it starts with
        value = data.decode("utf-8")  # a message's JSON, read as a field's text is
    if field.type == FieldDescriptor.TYPE_MESSAGE or (
        field.is_repeated and value.lstrip().startswith("[")
    ):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError) as error:  # nested past the limit
            if field.type == FieldDescriptor.TYPE_STRING:  # a text that starts with "["
                return value
            raise Aborted(
                grpc.StatusCode.INVALID_ARGUMENT, f"{field.name}: not JSON ({error})"
            ) from None
    if field.type == FieldDescriptor.TYPE_BOOL:
        word = value.strip().lower()
        if word not in TRUE + FALSE:
            raise Aborted(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{field.name}: true or false expected, got {value!r}",
            )
        return word in TRUE
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value.encode()).decode()
    return value
