"""A worker's settings: what the front hands each worker process it starts."""

from __future__ import annotations

from dataclasses import dataclass

from service.runtime.choices import AUTO, Auto, Batching, Cache, Device, Threading
from service.runtime.repository import ModelVersion
from service.worker.scheduler import MAX_ROWS, WINDOW_SECONDS, Scheduler


@dataclass(frozen=True)
class WorkerSettings:
    index: int
    models: tuple[tuple[str, ModelVersion], ...]  # (key, version verified by the front)
    variants: tuple[tuple[str, str], ...] = ()  # (key, variant) of every model version
    # the server's settings of the same names (service.front.config.ServerConfig)
    device: Device = "cpu"
    gpu: int = 0  # the GPU of this worker, on cuda
    io_binding: bool | None = None
    cache: Cache | Auto = AUTO
    max_rows: int = MAX_ROWS
    batching: Batching = "continuous"
    window: float = WINDOW_SECONDS
    encoder: Threading | Auto = AUTO
    step: Threading = "inline"
    socket: str = ""  # a Unix socket the other fronts connect to ("" with one front)
    authkey: bytes = b""  # what a front connecting to `socket` must know

    def variant_of(self, key: str) -> str:
        return dict(self.variants)[key]

    def scheduler(self, engine) -> Scheduler:
        """A scheduler over `engine` as configured (the encoder on a thread of its own on
        cuda unless configured otherwise)."""
        encoder = self.encoder == "thread" or (self.encoder == "auto" and self.device == "cuda")
        return Scheduler(
            engine,
            self.max_rows,
            self.batching,
            self.window,
            encoder_thread=encoder,
            step_thread=self.step == "thread",
        )
