"""An HTTP request as the servicer's calls see a gRPC one: a deadline, an abort that carries a
gRPC status, a token checked as the gRPC interceptor checks it; and a gRPC status as an HTTP
one (the mapping of google.rpc.Code to HTTP that Google's HTTP APIs use)."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import time
from urllib.parse import parse_qsl

import grpc
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from service.front.security import Token, bearer, refusal

HTTP_STATUS = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}
TIMEOUT_HEADER = "x-request-timeout"  # seconds the client waits: the call's deadline
HTTP_TOKEN = "the header 'Authorization: Bearer TOKEN'"
URL_ENCODED = "application/x-www-form-urlencoded"
MAX_FORM_FIELDS = 1000  # of a URL-encoded form, as Starlette bounds a multipart one


class Aborted(Exception):
    """A call ended with a gRPC status and its details; `status` is its HTTP status where
    not the gRPC status's (a body past its bound: 413, not INVALID_ARGUMENT's 400)."""

    def __init__(self, code: grpc.StatusCode, details: str, status: int | None = None):
        super().__init__(details)
        self.code, self.details, self.status = code, details, status


# a body past its bound, the caller's INVALID_ARGUMENT: sent again, it is refused again
TOO_LARGE = 413


class TooLarge(Exception):
    """A request's body passed its bound as it came."""


def bounded(request: Request, most: int) -> Request:
    """`request` whose body, counted as it comes, raises TooLarge past `most` bytes: a body
    sent in chunks says no length first, and a form's file parts are not bounded by the
    form's parser."""
    received = 0

    async def receive():
        nonlocal received
        message = await request.receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > most:
                raise TooLarge(f"request: more than {most} bytes")
        return message

    return Request(request.scope, receive)


def charset(content_type: str) -> str:
    """The charset a Content-Type names, UTF-8 where it names none or one unknown."""
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            try:
                return codecs.lookup(value.strip().strip('"')).name
            except LookupError:
                break
    return "utf-8"


def url_encoded(body: bytes, content_type: str) -> FormData:
    """A URL-encoded form's fields, its raw bytes and its escapes alike read in its charset
    (UTF-8 unless named): Starlette's parser reads raw bytes as Latin-1, and `curl -d`
    sends a text's UTF-8 unescaped."""
    encoding = charset(content_type)
    try:
        pairs = parse_qsl(
            body.decode(encoding, errors="replace"),
            keep_blank_values=True,
            encoding=encoding,
            errors="replace",
            max_num_fields=MAX_FORM_FIELDS,
        )
    except ValueError:
        raise HTTPException(
            400, f"Too many fields. Maximum number of fields is {MAX_FORM_FIELDS}."
        ) from None
    return FormData(pairs)


class HttpContext:
    """What the servicer asks of a call's context: the time left, and abort. The deadline
    runs `timeout` seconds from `received` (monotonic; by default now)."""

    def __init__(self, timeout: float | None, received: float | None = None):
        start = time.monotonic() if received is None else received
        self.deadline = None if timeout is None else start + timeout

    def time_remaining(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    async def abort(self, code: grpc.StatusCode, details: str):
        raise Aborted(code, details)


def timeout_of(request: Request) -> float | None:
    """The call's timeout in seconds (the X-Request-Timeout header), or None."""
    value = request.headers.get(TIMEOUT_HEADER)
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise Aborted(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{TIMEOUT_HEADER}: a number of seconds above 0 expected, got {value!r}",
        )
    return seconds


def authorize(tokens: list[Token], presented: str | None, service: str, refused) -> None:
    """Raises Aborted when tokens are on and `presented` may not call `service`;
    `refused(code)` counts a refusal (the metric gRPC's refusals go to)."""
    if not tokens:
        return
    why = refusal(tokens, presented, service, HTTP_TOKEN)
    if why is not None:
        refused(why[0])
        raise Aborted(*why)


def header_token(request: Request) -> str | None:
    return bearer(request.headers.get("authorization"))


def error_response(
    code: grpc.StatusCode, details: str, status: int | None = None, headers=None
) -> JSONResponse:
    """An error as Google's HTTP APIs write one: the HTTP status (by default the gRPC
    status's), the gRPC status by name and its details (which name the request's field)."""
    status = HTTP_STATUS.get(code, 500) if status is None else status
    body = {"error": {"code": status, "status": code.name, "message": details}}
    return JSONResponse(body, status_code=status, headers=headers)


async def until_disconnected(request: Request, call):
    """Runs the coroutine `call`, cancelled when the client goes away (its request's body
    read first) or its deadline passes, as gRPC cancels a handler; a client gone ends it
    with CANCELLED, not with a CancelledError that would leave the app as a fault."""
    task = asyncio.ensure_future(call)
    gone = False

    async def watch():
        nonlocal gone
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                gone = True
                task.cancel()
                return

    watcher = asyncio.ensure_future(watch())
    try:
        return await task
    except asyncio.CancelledError:
        if gone and not asyncio.current_task().cancelling():
            raise Aborted(grpc.StatusCode.CANCELLED, "the client went away") from None
        raise
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def within(context: HttpContext, call):
    """Awaits `call` within the context's deadline: past it, the call is cancelled (its jobs
    with it) and DEADLINE_EXCEEDED is raised."""
    remaining = context.time_remaining()
    if remaining is None:
        return await call
    try:
        return await asyncio.wait_for(call, remaining)
    except TimeoutError:
        raise Aborted(grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline passed") from None
