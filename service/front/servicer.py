"""A gRPC service's calls over any model kind: each call accounted (in flight, duration by
status code, a ServiceError made its status), its request prepared, its inputs answered from
the response cache or cut into jobs for the workers, and their results made the response.

What differs between services is declared per method as a `Method` by the service's module
(service.front.translate, service.front.caption): how its request message becomes a prepared
request and how the kind's results become its messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from google.protobuf.message_factory import GetMessageClass

from service.front.pool import Call
from service.front.status import status_code
from service.runtime.decoding import Hypothesis
from service.runtime.errors import InvalidArgument, ServiceError, Unavailable
from service.runtime.kinds import Prepared, ServedModel
from service.runtime.results import PartialText
from service.worker.messages import Failure, Partial, Result

log = logging.getLogger("attnserve")


@dataclass(frozen=True)
class Method:
    """How one gRPC method meets the runtime."""

    # (model, request message) -> the kind's Prepared (awaitable): parsed, checked, prepared
    prepare: Callable[[ServedModel, Any], Awaitable[Prepared]]
    # (model, prepared, each input's n-best) -> the response message (a stream's last)
    respond: Callable[[ServedModel, Prepared, list[list[Hypothesis]]], Any]
    # a stream's best hypothesis so far -> its message
    partial: Callable[[PartialText], Any] | None = None


class ModelServicer:
    """A service's methods over any kind, each a unary call (n inputs -> n results) or a
    stream (one input -> its growing best hypothesis, then the result)."""

    service: str  # the full gRPC service name
    file: Any  # the FileDescriptor of the .proto that declares it
    methods: dict[str, Method]  # by method name

    def __init__(self, front):
        self.front = front  # the state the services share (service.front.state.Front)

    async def _events(self, call: Call):
        """The call's events until its result; cancels the job if the client goes away.
        Partial events already waiting are merged into one list: when the client or the
        front falls behind, it gets the newest hypothesis, not a backlog."""
        held, ended = None, False
        try:
            while True:
                event, held = held or await call.events.get(), None
                if isinstance(event, Failure):
                    ended = True
                    raise event.error()
                if isinstance(event, Partial):
                    partials = [event]
                    while not call.events.empty():
                        following = call.events.get_nowait()
                        if not isinstance(following, Partial):
                            held = following
                            break
                        partials.append(following)
                    yield partials
                    continue
                ended = isinstance(event, Result)  # the last event: nothing left to free
                yield event
                if ended:
                    return
        finally:
            # cancelled while waiting for an event (CancelledError here), or closed while
            # its caller was suspended (a stream whose client left while a message was being
            # written gets GeneratorExit at its yield, not CancelledError): the rows go free
            if not ended:
                self.front.pool.cancel(call)

    @contextlib.asynccontextmanager
    async def _accounted(self, label: str, request, context, counted: bool = True):
        """Counts the call in flight and (where `counted`) its duration by status code under
        the method label `label`; turns a ServiceError into its gRPC status, anything else
        into INTERNAL. Yields the served model the request names and the labels: the model
        its languages chose where it names none (`Front.named`)."""
        front = self.front
        received, code = time.monotonic(), grpc.StatusCode.OK
        try:
            name, unnamed = front.named(self.service, request), None
        except ServiceError as error:  # no model covers its languages: raised below, in turn
            name, unnamed = request.model, error
        labels = (front.label(self.service, name), label)
        front.last_call = received
        front.in_flight += 1
        front.idle.clear()
        front.metrics.requests_in_flight.labels(*labels).inc()
        try:
            if isinstance(request, Malformed):
                reason = str(request.error).rpartition("': ")[2]
                raise InvalidArgument(f"request: not a valid {request.message} ({reason})")
            front.check_available()
            if unnamed is not None:
                raise unnamed
            with front.holding(front.resolve(self.service, name, request.version)) as model:
                yield model, labels, received
        except ServiceError as error:
            code = status_code(error)  # counted so, unless gRPC had ended the call (_abort)
            code = await _abort(context, code, str(error))
            raise asyncio.CancelledError from None
        except (asyncio.CancelledError, GeneratorExit):  # a stream closed mid-write: the same
            code = cancel_code(context)
            raise
        except Exception as error:  # a bug of ours: INTERNAL, its traceback in the log
            log.exception("%s %s failed", self.service, label)
            details = f"internal error ({type(error).__name__}); the server's log has its trace"
            code = status_code(error)
            code = await _abort(context, code, details)
            raise asyncio.CancelledError from None
        finally:
            front.metrics.requests_in_flight.labels(*labels).dec()
            front.in_flight -= 1
            if front.in_flight == 0:
                front.idle.set()
            if counted:
                self._counted(labels, code, received)

    def _counted(self, labels: tuple[str, str], code: grpc.StatusCode, received: float) -> None:
        self.front.metrics.request_duration.labels(*labels, code.name).observe(
            time.monotonic() - received
        )

    def counted_at_edge(
        self, label: str, code: grpc.StatusCode, received: float, model: str = ""
    ) -> None:
        """Counts a request answered at the edge as a call is counted: its duration by status
        code, under the method label `label` and the model `model` (by default the one a
        call naming none gets, as a gRPC message that does not parse is). For a request
        that makes no call (an HTTP body that does not parse, or past its bound; a language
        detection, or a text sent back as it is, `code` OK), or several uncounted ones (a
        file sent in parts)."""
        self._counted((self.front.label(self.service, model), label), code, received)

    async def _result(self, call: Call) -> Result:
        async for event in self._events(call):
            if isinstance(event, Result):
                return event
        raise Unavailable("the decode ended without a result; retry")

    @contextlib.asynccontextmanager
    async def _submitted(self, label: str, model, prepared: Prepared, context, received, most=0):
        """The request's jobs submitted -> their calls, in input order, their queue metrics
        under the method label `label`; on leaving early (an error, the client gone) every
        job is cancelled."""
        front, calls = self.front, []
        try:
            jobs = front.jobs(prepared, context, stream=False, most=most)
            if jobs:  # the call's rows, whole (none: every input came from the cache)
                front.pool.check_admission(sum(job.rows for job in jobs))
            for job in jobs:
                remaining = context.time_remaining()
                call = await front.pool.submit(model.worker_key, label, job, remaining, received)
                calls.append(call)
            yield calls
        except BaseException:
            for call in calls:
                front.pool.cancel(call)  # the request's other jobs stop at their next step
            raise

    async def _results(self, calls: list[Call]) -> list[Result]:
        """Each call's Result, in order. One call (most requests) is awaited here, without a
        task: its worker's report reaches the handler a loop iteration sooner. Several run as
        tasks, every one cancelled once one fails or the handler is cancelled."""
        if len(calls) == 1:
            return [await self._result(calls[0])]
        with self._tasks(map(self._result, calls)) as tasks:
            return await asyncio.gather(*tasks)

    @staticmethod
    @contextlib.contextmanager
    def _tasks(coroutines):
        """Each coroutine as a task; on leaving, those not done are cancelled (a failed call's
        siblings, a stream's inputs not reached when it ends)."""
        tasks = [asyncio.ensure_future(coroutine) for coroutine in coroutines]
        try:
            yield tasks
        finally:
            for task in tasks:
                task.cancel()  # those done are left as they are

    def _cached(self, model, prepared: Prepared, label: str) -> tuple[list, list, list]:
        """(each input's cache key, its n-best from the cache or None, the input whose
        decode answers it or None when cached): each key looked up once, and an input
        repeated in the request decoded once, by its first copy (one hit counted, or one miss
        once it is sent to decode)."""
        cache = self.front.cache
        keys = cache.keys(model, prepared)
        looked = {key: cache.get(key, label) for key in dict.fromkeys(keys) if key is not None}
        results = [None if key is None else looked[key] for key in keys]
        first: dict = {}
        twins = [
            None if found is not None else first.setdefault(i if key is None else key, i)
            for i, (key, found) in enumerate(zip(keys, results, strict=True))
        ]
        return keys, results, twins

    async def unary(self, method: str, request, context, label: str = "", counted: bool = True):
        """A unary call of `method` (declared in `methods`); `label` is its method label in
        the metrics when not the method's name (a call over HTTP). Without `counted` its
        duration is left to the caller (one part of a request counted whole at the edge)."""
        front, declared = self.front, self.methods[method]
        accounted = self._accounted(label or method, request, context, counted)
        async with accounted as (model, labels, received):
            front.pool.check_admission()
            prepared = await declared.prepare(model, request)
            keys, results, twins = self._cached(model, prepared, labels[0])
            missing = [i for i, twin in enumerate(twins) if twin == i]
            if missing:
                decode = prepared.subset(missing) if len(missing) < len(results) else prepared
                async with self._submitted(labels[1], model, decode, context, received) as calls:
                    front.cache.missed(labels[0], sum(keys[i] is not None for i in missing))
                    events = await self._results(calls)
                front.observe(labels, received, [event.timings for event in events])
                decoded = [nbest for event in events for nbest in event.results]
                for i, nbest in zip(missing, decoded, strict=True):
                    results[i] = nbest
                    front.cache.put(keys[i], nbest)
                for i, twin in enumerate(twins):
                    if twin is not None and twin != i:  # a repeat of an input decoded above
                        results[i] = results[twin]
            return declared.respond(model, prepared, results)

    async def _stream_inputs(self, method, model, prepared, context, labels, received):
        """A streamed request of several inputs (a text's sentences): a job each for those
        the cache does not hold (a repeated one decoded once), decoded in parallel; a partial
        event as each next input in order is done, then the result."""
        cache, declared = self.front.cache, self.methods[method]
        keys, results, twins = self._cached(model, prepared, labels[0])
        missing = [i for i, twin in enumerate(twins) if twin == i]
        timings, done = [], 0
        decode = prepared.subset(missing)
        submitted = self._submitted(labels[1], model, decode, context, received, most=1)
        async with submitted as calls:
            with self._tasks(map(self._result, calls)) as tasks:
                cache.missed(labels[0], sum(keys[i] is not None for i in missing))
                pending = dict(zip(missing, tasks, strict=True))
                while done < prepared.inputs:
                    if done in pending:
                        event = await pending[done]
                        (results[done],) = event.results
                        cache.put(keys[done], results[done])
                        timings.append(event.timings)
                    elif results[done] is None:  # a repeat of an input before it
                        results[done] = results[twins[done]]
                    done += 1
                    if done in pending:
                        yield declared.partial(model.partial_inputs(prepared, results[:done]))
        if timings:
            self.front.observe(labels, received, timings)
        yield declared.respond(model, prepared, results)

    async def stream(self, method: str, request, context, label: str = ""):
        """A stream of `method` (declared in `methods`), labelled as `unary` is."""
        front, declared = self.front, self.methods[method]
        async with self._accounted(label or method, request, context) as (model, labels, received):
            front.pool.check_admission()
            prepared = await declared.prepare(model, request)
            if prepared.inputs == 0:  # nothing to decode (markup with no text): the result
                yield declared.respond(model, prepared, [])
                return
            if prepared.inputs > 1:
                streamed = self._stream_inputs(method, model, prepared, context, labels, received)
                async with contextlib.aclosing(streamed) as messages:
                    async for message in messages:
                        yield message
                return
            (key,) = front.cache.keys(model, prepared)
            cached = front.cache.get(key, labels[0])
            if cached is not None:
                yield declared.respond(model, prepared, [cached])
                return
            (job,) = front.jobs(prepared, context, stream=True)
            front.pool.check_admission(job.rows)
            remaining = context.time_remaining()
            call = await front.pool.submit(model.worker_key, labels[1], job, remaining, received)
            front.cache.missed(labels[0], int(key is not None))
            tokens: list[int] = []
            # closed with this generator, so that a client leaving mid-write cancels the job
            async with contextlib.aclosing(self._events(call)) as events:
                async for event in events:
                    if isinstance(event, list):  # partials: tokens kept from the last, new
                        for partial in event:
                            tokens = tokens[: partial.kept] + partial.new
                        yield declared.partial(model.partial(prepared, tokens, event[-1].steps))
                    elif isinstance(event, Result):
                        front.observe(labels, received, [event.timings])
                        front.cache.put(key, event.results[0])
                        yield declared.respond(model, prepared, event.results)


class Malformed:
    """What a request that does not parse becomes: its handler answers INVALID_ARGUMENT
    (gRPC's own path would answer UNKNOWN and log a traceback per call)."""

    model = version = ""

    def __init__(self, message: str, error: Exception):
        self.message, self.error = message, error


def _parser(message_class):
    name = message_class.DESCRIPTOR.full_name

    def parse(data: bytes):
        try:
            return message_class.FromString(data)
        except DecodeError as error:
            return Malformed(name, error)

    return parse


def add_servicer(server, servicer: ModelServicer) -> None:
    """Registers `servicer`'s methods as its .proto declares them, each request parsed by
    `_parser`."""
    service = servicer.service
    descriptor = servicer.file.services_by_name[service.rpartition(".")[2]]
    handlers = {}
    for method in descriptor.methods:
        make = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=_parser(GetMessageClass(method.input_type)),
            response_serializer=GetMessageClass(method.output_type).SerializeToString,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)


# bytes of a status message as gRPC sends it (percent-encoded in a trailer): a client
# refuses trailers past 8 KiB, and reads a longer message as RESOURCE_EXHAUSTED
MOST_DETAILS = 4096
# A call's deadline runs on the server from the call's arrival, the client's from its
# sending: a client whose deadline passes cancels the call up to its transit time (longer on
# a loaded machine) before the server's deadline passes. A cancellation this close to the
# deadline is the deadline's.
DEADLINE_SLACK_S = 0.5


def shortened(details: str, most: int = MOST_DETAILS) -> str:
    """`details`, or its start and its length where percent-encoded it passes `most` bytes
    (a request's field echoed whole: a model name of 20,000 characters)."""

    def cost(character: str) -> int:
        return 1 if " " <= character <= "~" and character != "%" else 3 * len(character.encode())

    if sum(map(cost, details)) <= most:
        return details
    tail = f"... ({len(details)} characters)"
    kept, size = [], len(tail)
    for character in details:
        size += cost(character)
        if size > most:
            break
        kept.append(character)
    return "".join(kept) + tail


async def _abort(context, code: grpc.StatusCode, details: str) -> grpc.StatusCode:
    """Ends the call with `code` (raises, as `context.abort` does) and its details, short
    enough for a client to read (`shortened`). Where gRPC ended the call first (its deadline
    passed while the handler waited for the event loop, as under overload) the abort fails in
    gRPC's core, which would log a traceback: returns the code the client has instead, for
    the handler to end as a cancelled one."""
    try:
        await context.abort(code, shortened(details))
    except grpc.aio.InternalError:
        return cancel_code(context)
    return code


def cancel_code(context) -> grpc.StatusCode:
    """Why a call's handler was cancelled: its deadline passed (or was about to:
    DEADLINE_SLACK_S), or the client went away."""
    remaining = context.time_remaining()
    if remaining is not None and remaining <= DEADLINE_SLACK_S:
        return grpc.StatusCode.DEADLINE_EXCEEDED
    return grpc.StatusCode.CANCELLED
