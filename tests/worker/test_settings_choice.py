"""Where a worker's scheduler runs admissions' encoder and a step of greedy rows: the rule
that `serve --print-config` states is the one the worker applies."""

from __future__ import annotations

import pytest
from helpers import tiny_transformer

from service.worker.settings import WorkerSettings, encoder_choice, step_choice


@pytest.fixture(scope="module")
def engine():
    from models.reference import TorchEngine

    return TorchEngine(tiny_transformer(seed=3))


@pytest.mark.parametrize(
    ("device", "encoder", "step", "encoder_thread", "step_thread"),
    [
        ("cuda", "auto", "inline", True, False),
        ("cpu", "auto", "inline", False, False),
        ("cuda", "inline", "thread", False, True),
        ("cpu", "thread", "thread", True, True),
    ],
)
def test_the_worker_places_encoder_and_step_as_the_printed_choice_says(
    engine, device, encoder, step, encoder_thread, step_thread
):
    settings = WorkerSettings(0, (), device=device, encoder=encoder, step=step)
    scheduler = settings.scheduler(engine)
    try:
        assert (scheduler._encoder is not None) == encoder_thread
        assert (scheduler._stepper is not None) == step_thread
    finally:
        scheduler.close()
    assert encoder_choice(encoder, device)[0] == encoder_thread
    assert step_choice(step)[0] == step_thread
    configured = encoder_choice(encoder, device)[1] == "set by the configuration"
    assert configured == (encoder != "auto")


def test_the_configured_steps_ahead_and_their_runs_reach_the_scheduler(engine):
    from service.front.config import ServerConfig
    from service.front.pool import worker_settings

    config = ServerConfig(steps_ahead=6, ahead_wait_ms=0.75, workers=1)
    (settings,) = worker_settings(config, (), "cpu", {})
    scheduler = settings.scheduler(engine)
    try:
        assert scheduler.steps_ahead == 6 and scheduler.ahead_wait == pytest.approx(0.00075)
    finally:
        scheduler.close()
