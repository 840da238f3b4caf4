"""A worker's settings: what the front hands each worker process it starts."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from service.runtime.choices import AUTO, Auto, Batching, Cache, Device, Threading
from service.runtime.repository import ModelVersion
from service.worker.scheduler import AHEAD_WAIT, MAX_ROWS, WINDOW_SECONDS, Scheduler


@dataclass(frozen=True)
class WorkerSettings:
    index: int
    models: tuple[tuple[str, ModelVersion], ...]  # (key, version verified by the front)
    variants: tuple[tuple[str, str], ...] = ()  # (key, variant) of every model version
    # the server's settings of the same names (service.front.config.ServerConfig)
    device: Device = "cpu"
    gpu: int = 0  # the GPU of this worker, on cuda; -1: the GPUs its process was given
    io_binding: bool | None = None
    cache: Cache | Auto = AUTO
    max_rows: int = MAX_ROWS
    batching: Batching = "continuous"
    window: float = WINDOW_SECONDS
    encoder: Threading | Auto = AUTO
    step: Threading = "inline"
    steps_ahead: int = 1
    ahead_wait: float = AHEAD_WAIT  # seconds a run of steps ahead lasts at most
    # where the other fronts connect: a Unix socket's path, or "HOST:PORT" (TCP; port 0: any)
    # for a replica on a cluster; "" with one front on one machine
    socket: str = ""
    authkey: bytes = b""  # what a front connecting to `socket` must know
    # a replica on a Ray cluster (service.worker.replica): its parent is the replica, which
    # sends no jobs; its measurements go to the first front connected, and a front's Unload
    # unloads a version the replica started with
    replica: bool = False

    def variant_of(self, key: str) -> str:
        return dict(self.variants)[key]

    def scheduler(self, engine) -> Scheduler:
        """A scheduler over `engine` as configured (the encoder on a thread of its own on
        cuda unless configured otherwise: `encoder_choice`)."""
        return Scheduler(
            engine,
            self.max_rows,
            self.batching,
            self.window,
            encoder_thread=encoder_choice(self.encoder, self.device)[0],
            step_thread=step_choice(self.step)[0],
            steps_ahead=self.steps_ahead,
            ahead_wait=self.ahead_wait,
        )


def encoder_choice(encoder: Threading | Auto, device: str) -> tuple[bool, str]:
    """(whether admissions' encoder runs on a thread of its own, why)."""
    if encoder != AUTO:
        return encoder == "thread", "set by the configuration"
    if device == "cuda":
        return True, "auto on cuda: beside the steps, where an encoder inline would idle the GPU"
    return False, f"auto on {device}: each worker has a core, which a thread would share"


def step_choice(step: Threading) -> tuple[bool, str]:
    """(whether a step of greedy rows runs on a thread of its own, why)."""
    if step == "thread":
        return True, "set by the configuration (beside the scheduler's work, 2 handoffs a step)"
    return False, (
        "a thread of its own saved no time in one worker kept full, on the CPU or a GPU: its "
        "two handoffs a step cost what it hid (docs/benchmarks.md, docs/benchmarks-gpu.md)"
    )


def steps_ahead_choice(steps: int, wait_ms: float = AHEAD_WAIT * 1e3) -> str:
    """Why `steps` greedy steps run back to back between two looks of the host, in runs of
    at most `wait_ms`."""
    if steps == 1:
        return (
            "every step's ids go through the host; more run back to back on the device where "
            "the static step serves (set by the configuration, once measured on the device)"
        )
    return (
        "set by the configuration: where the static step serves and every row is a greedy "
        "lane, the host looks at the rows once every this many steps, or every "
        f"{wait_ms:g} ms of them at the last run's pace"
    )


def socket_address(where: str) -> tuple[str, str | tuple[str, int]]:
    """(family, address) of a worker's socket for multiprocessing.connection: "HOST:PORT"
    is TCP, anything else a Unix socket's path."""
    host, colon, port = where.rpartition(":")
    if colon and host and port.isdigit() and "/" not in where:
        return "AF_INET", (host.strip("[]"), int(port))
    return "AF_UNIX", where


def no_delay(link) -> None:
    """TCP_NODELAY on a connection of multiprocessing.connection over TCP: a message is
    written as a header and a body, and Nagle's algorithm would hold the second write for
    the peer's delayed acknowledgement (some 40 ms a call)."""
    sock = socket.socket(fileno=os.dup(link.fileno()))
    try:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    finally:
        sock.close()
