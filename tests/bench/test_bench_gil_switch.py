"""bench.gil_switch, run small on the CPU: the closed loop admits every job through the
encoder thread and reports rounds and queue waits that hold together."""

from __future__ import annotations

from bench import gil_switch
from service.runtime.onnx_engine import OnnxEngine


def test_the_closed_loop_admits_jobs_in_rounds_on_the_encoder_thread(exported_translator):
    engine = OnnxEngine(exported_translator[0], "fp32")
    got = gil_switch.measure(engine, rows=8, seconds=0.5, max_length=6, run_seconds=0.0005)
    assert got["jobs_per_second"] > 0 and got["steps_per_second"] > 0
    assert got["admission_rounds"] >= 1 and got["jobs_per_round"] >= 1
    # eight jobs in flight: a round admits at most as many
    assert got["jobs_per_round"] <= 8
    assert 0 <= got["queue_wait_ms_p50"] <= got["queue_wait_ms_p99"]
    assert got["round_ms_mean"] > 0
    assert gil_switch.encoder_alone_ms(engine, jobs=3, repeats=3) > 0
