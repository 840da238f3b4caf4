"""The encoder beside the steps: requests' inputs put together into one padded batch, encoded
on a thread of its own holding the worker's device lock shared, then handed to `then` before
the run counts as done."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from helpers import random_sources, tiny_transformer

from service.runtime.batching import source_batch
from service.worker.device import DeviceLock
from service.worker.encoder_thread import EncoderThread, together


def test_inputs_are_stacked_in_order_and_padded_to_the_longest():
    a = {"src_ids": np.array([[5, 6, 2]]), "src_mask": np.array([[1, 1, 1]])}
    b = {"src_ids": np.array([[7, 2], [8, 2]]), "src_mask": np.array([[1, 1], [1, 1]])}
    batch = together([b, a])
    assert set(batch) == {"src_ids", "src_mask"}
    np.testing.assert_array_equal(batch["src_ids"], [[7, 2, 0], [8, 2, 0], [5, 6, 2]])
    np.testing.assert_array_equal(batch["src_mask"], [[1, 1, 0], [1, 1, 0], [1, 1, 1]])
    alone = together([a])
    assert alone["src_ids"] is a["src_ids"]  # one request: nothing copied


@pytest.fixture(scope="module")
def engine():
    from models.reference import TorchEngine

    return TorchEngine(tiny_transformer(seed=2))


def test_each_request_s_rows_encode_as_they_do_alone(engine):
    sources = random_sources(512, [3, 9, 5], seed=1)
    given = [
        dict(zip(("src_ids", "src_mask"), source_batch([s], 512), strict=True)) for s in sources
    ]
    thread = EncoderThread(engine, DeviceLock())
    try:
        output, seconds = thread.submit(given).result(timeout=30)
    finally:
        thread.close()
    assert seconds > 0
    assert output.memory_mask.shape == (3, 10)  # the longest source and its </s>
    for row, source in enumerate(sources):
        alone = engine.encode(**given[row])
        length = len(source) + 1
        np.testing.assert_array_equal(output.memory_mask[row, :length], 1)
        assert not output.memory_mask[row, length:].any()
        for name, tensor in alone.memory.items():  # (1, heads, S, head_dim)
            np.testing.assert_allclose(
                np.asarray(output.memory[name])[row, :, :length],
                np.asarray(tensor)[0, :, :length],
                rtol=1e-5,
                atol=1e-4,
            )


class _Recording:
    """An engine that records the thread it runs on and whether the device lock was held."""

    def __init__(self, device: DeviceLock, release: threading.Event):
        self.device, self.release, self.calls = device, release, []

    def encode(self, **inputs):
        self.calls.append((threading.current_thread().name, self.device._sharing == 1, inputs))
        self.release.wait(10)
        return {"rows": len(inputs["x"])}


def test_a_run_holds_the_device_shared_and_then_runs_before_it_counts_as_done():
    device, release = DeviceLock(), threading.Event()
    engine = _Recording(device, release)
    thread = EncoderThread(engine, device)
    written, recorded = [], []

    def record():  # a step that records its CUDA graph
        with device.alone():
            recorded.append(len(written))

    try:
        future = thread.submit([{"x": np.zeros((2, 3))}, {"x": np.zeros((1, 4))}], written.append)
        for _ in range(100):  # until the run is inside the engine
            if engine.calls:
                break
            time.sleep(0.01)
        step = threading.Thread(target=record)
        step.start()
        step.join(0.2)  # while the encoder runs, a recording step waits
        assert not future.done() and recorded == []
        release.set()
        output, _ = future.result(timeout=10)
        step.join(10)
    finally:
        thread.close()
    ((name, shared, inputs),) = engine.calls
    assert name.startswith("encoder") and name != threading.current_thread().name
    assert shared and inputs["x"].shape == (3, 4)
    assert written == [output] == [{"rows": 3}]
    assert recorded == [1]  # it ran once the encoder's run and `then` had ended
    assert device._sharing == 0  # let go once the run ended


def test_a_closed_thread_waits_for_its_run_and_takes_no_more():
    device, release = DeviceLock(), threading.Event()
    thread = EncoderThread(_Recording(device, release), device)
    future = thread.submit([{"x": np.zeros((1, 1))}])
    threading.Timer(0.2, release.set).start()
    thread.close()
    assert future.done() and future.result()[0] == {"rows": 1}
    with pytest.raises(RuntimeError):
        thread.submit([{"x": np.zeros((1, 1))}])


def test_an_empty_batch_encodes_inline_and_a_running_one_beside_its_steps(engine, monkeypatch):
    """With nothing to run beside, the admission's encoder runs on the loop's thread (two
    thread handoffs saved on an idle worker's first token), holding the device shared as the
    thread's runs do; once rows run, the next admission's goes to the encoder thread."""
    from service.runtime.decoding import DecodingOptions
    from service.worker.device import DEVICE
    from service.worker.messages import Job, Result
    from service.worker.scheduler import Scheduler

    runs, original = [], engine.encode

    def encode(**inputs):
        runs.append((threading.current_thread().name, DEVICE._sharing))
        return original(**inputs)

    monkeypatch.setattr(engine, "encode", encode)
    sources = random_sources(512, [4, 7], seed=3)
    lengths = (30, 5)
    jobs = [
        Job(i, dict(zip(("src_ids", "src_mask"), source_batch([s], 512), strict=True)), options)
        for i, (s, options) in enumerate(
            zip(sources, [DecodingOptions(max_length=n) for n in lengths], strict=True)
        )
    ]
    scheduler = Scheduler(engine, max_rows=8, encoder_thread=True)
    try:
        scheduler.submit(jobs[0])
        scheduler.iterate()  # admitted into the empty batch, and stepped
        assert runs == [(threading.current_thread().name, 1)] and scheduler.rows == 1
        scheduler.submit(jobs[1])
        done = {}
        while scheduler.busy:
            scheduler.iterate()
            done.update((e.job_id, e) for e in scheduler.events if isinstance(e, Result))
            scheduler.events.clear()
    finally:
        scheduler.close()
    assert len(runs) == 2 and runs[1][0].startswith("encoder") and runs[1][1] >= 1
    assert set(done) == {0, 1}
