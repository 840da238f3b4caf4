"""A front over a stand-in worker, in process: the servicer, its Front and a WorkerPool whose
one worker answers each job at the next turn of the event loop, for tests of what the front
does between the wire and the workers. (A module of its own name, imported by the test
modules of this folder.)"""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

from service.front.config import ServerConfig
from service.front.pool import WorkerPool
from service.front.servicer import Method
from service.front.state import Front
from service.front.translate import TranslationServicer
from service.runtime.decoding import Hypothesis
from service.runtime.kinds import Prepared
from service.worker.messages import Job, Result, Submit, Timings


class StandInWorker:
    """The connection of the pool's first worker, made ready with translator/1 loaded: each
    message is kept in `sent`, each job answered (while `answer`) with one n-best per input,
    a hypothesis whose one token is the job's id, and kept in `jobs`."""

    def __init__(self, pool: WorkerPool):
        self.pool, self.jobs, self.sent, self.answer = pool, [], [], True
        self._file = os.open(os.devnull, os.O_RDONLY)  # what the pool's loop reader names
        worker = pool.workers[0]
        worker.conn, worker.ready = self, asyncio.get_running_loop().create_future()
        worker.info = {"models": {_Model.worker_key: {}}}
        worker.ready.set_result(worker.info)

    def send(self, message) -> None:
        self.sent.append(message)
        if isinstance(message, Submit):
            job: Job = message.job
            self.jobs.append(job)
            if not self.answer:
                return
            nbest = [[Hypothesis(tokens=[job.id], log_prob=0.0, score=0.0)]] * job.inputs
            result = Result(job.id, nbest, Timings(0.0, 0.0, 0.0, 0.0))
            loop = asyncio.get_running_loop()
            loop.call_soon(self.pool._event, self.pool.workers[0], "translator", result)

    def fileno(self) -> int:
        return self._file

    def close(self) -> None:
        os.close(self._file)


class Link:
    """A worker's connection: what the pool sends it, kept in `sent`."""

    def __init__(self):
        self.sent = []
        self._file = os.open(os.devnull, os.O_RDONLY)

    def send(self, message) -> None:
        self.sent.append(message)

    def fileno(self) -> int:
        return self._file

    def close(self) -> None:
        os.close(self._file)


def servicer(pool: WorkerPool, prepared: Prepared, config: ServerConfig) -> TranslationServicer:
    """A TranslationServicer whose every method prepares `prepared` and answers the id of the
    job that decoded each input (a stream's partial: ("partial", those of the inputs done))."""
    front = Front(config, {}, pool, pool.metrics)
    front.serving = True

    async def prepare(model, request):
        return prepared

    def respond(model, prepared, results):
        return _ids(results)

    method = Method(prepare, respond, lambda partial: partial)
    servicer = TranslationServicer(front)
    servicer.methods = {name: method for name in ("Translate", "TranslateStream")}
    model = _Model()
    front.resolve = lambda service, name, version: model
    return servicer


class _Model:
    """What the servicer reads of a served model (the cache keeps a weak reference to it)."""

    key = "translator/1"
    worker_key = "translator/1"  # what the stand-in workers are sent

    def partial_inputs(self, prepared, done):
        return "partial", _ids(done)


def _ids(results: list[list[Hypothesis]]) -> list[int]:
    """The id of the job that answered each input."""
    return [nbest[0].tokens[0] for nbest in results]


async def _abort(code, details):
    raise AssertionError(f"{code.name}: {details}")


CONTEXT = SimpleNamespace(time_remaining=lambda: None, abort=_abort)  # no deadline
REQUEST = SimpleNamespace(model="", version="")  # the default model
