"""bench.gpu's service-level report: the workers' loop seconds by phase over a level (the
counter's growth, every worker summed) and their table in ms a step, the sentence's level
included."""

from __future__ import annotations

import pytest

from bench.lib.gpu_markdown import _loop_lines
from bench.lib.metrics import server_numbers
from service.worker.loop_clock import PHASES

LOOP = "attnserve_worker_loop_seconds_total"
STEPS = "attnserve_decode_step_batch_rows_count"
OUTBOX = "attnserve_worker_outbox_seconds_total"


def _samples(steps: float, loop: dict[str, float]) -> dict:
    samples = {(STEPS, (("model", "translator"),)): steps}
    samples.update(((LOOP, (("phase", phase),)), seconds) for phase, seconds in loop.items())
    return samples


def test_a_level_s_loop_seconds_are_the_counter_s_growth_by_phase():
    before = _samples(10, {"idle": 5.0, "run": 1.0})
    after = _samples(110, {"idle": 5.5, "run": 1.2, "prepare": 0.05})
    before[(OUTBOX, ())], after[(OUTBOX, ())] = 1.0, 1.25
    numbers = server_numbers(before, after)
    assert numbers["outbox_seconds"] == pytest.approx(0.25)
    assert numbers["steps"] == 100
    assert numbers["loop_seconds"] == pytest.approx({"idle": 0.5, "run": 0.2, "prepare": 0.05})
    assert server_numbers({}, {})["loop_seconds"] == {}  # a server without the counter
    encoder = "attnserve_encoder_duration_seconds"
    before[(encoder + "_count", (("model", "translator"),))] = 3
    after[(encoder + "_count", (("model", "translator"),))] = 10
    after[(encoder + "_sum", (("model", "translator"),))] = 0.014
    alone = "attnserve_worker_device_alone_"
    before[(alone + "runs_total", ())], after[(alone + "runs_total", ())] = 4, 6
    after[(alone + "seconds_total", ())] = 0.5
    numbers = server_numbers(before, after)
    assert numbers["encoder_runs"] == 7 and numbers["encoder_ms_mean"] == pytest.approx(2.0)
    assert numbers["device_alone_runs"] == 2
    assert numbers["device_alone_seconds"] == pytest.approx(0.5)


def test_the_loop_table_gives_ms_a_step_by_phase_and_the_busy_sum():
    loop = {**dict.fromkeys(PHASES, 0.0), "idle": 0.5, "run": 0.2, "outputs": 0.1}
    level = {"clients": 256, "server": {"steps": 100, "loop_seconds": loop, "outbox_seconds": 0.03}}
    quiet = {"clients": 1024, "server": {"steps": 0, "loop_seconds": {}}}  # left out
    sentence = {"server": {"steps": 50, "loop_seconds": {"idle": 1.0, "run": 0.05}}}
    lines = _loop_lines({"levels": [level, quiet], "sentence": sentence})
    header = lines[lines.index("") + 3]
    assert header == "| clients | steps | " + " | ".join(PHASES) + " | busy | outbox |"
    row_256, row_sentence = lines[-2:]
    cells = row_256.strip("|").split("|")
    names = ["clients", "steps", *PHASES, "busy", "outbox"]
    ms = dict(zip(names, map(str.strip, cells), strict=True))
    assert ms["clients"] == "256" and ms["steps"] == "100"
    assert ms["idle"] == "5.000" and ms["run"] == "2.000" and ms["outputs"] == "1.000"
    assert ms["busy"] == "3.000" and ms["outbox"] == "0.300"  # busy: all but idle
    assert row_sentence.startswith("| 1 (sentence) | 50 | 20.000 |")
    assert row_sentence.endswith("| 1.000 | 0.000 |")  # its run alone is busy
    assert _loop_lines({"levels": [quiet], "sentence": {}}) == []  # nothing measured
