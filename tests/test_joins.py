"""Requests arriving while others decode: the device path (rows written into dead slots by
the put graph, on the device) takes the same decisions as the host path (numpy writes) and
decodes them alike."""

from __future__ import annotations

import numpy as np
import pytest

from models.corpus import read_split
from service.batch import ContinuousBatch
from service.batching import source_batch
from service.decoding import DecodingOptions
from service.inference import CachedInference
from service.messages import Result
from service.onnx_engine import OnnxEngine
from service.scheduler import Job, Scheduler
from service.tokenizer import Tokenizer


def _staggered(engine, sources, options):
    """Requests arriving while others decode (at most 2 waiting): results, joins, rebuilds."""
    scheduler = Scheduler(engine, max_rows=8)
    done, submitted = {}, 0
    while len(done) < len(sources):
        if submitted < len(sources) and len(scheduler.waiting) < 2:
            src, mask = source_batch([sources[submitted]], 512)
            scheduler.submit(Job(submitted, {"src_ids": src, "src_mask": mask}, options))
            submitted += 1
        scheduler.iterate()
        done |= {e.job_id: e for e in scheduler.events if isinstance(e, Result)}
        scheduler.events.clear()
    return done, len(scheduler.stats.encoder_seconds), scheduler.batch.rebuilds


def test_staggered_requests_decode_alike_on_the_device_and_the_host_path(
    exported_translator, translator_data
):
    version = exported_translator[0]
    spanish, _ = read_split(translator_data, "test")
    # 30 requests through 8 rows: the joins after the batch first fills find dead slots
    sources = Tokenizer(version.tokenizer_file).encode_batch(spanish[:30])
    options = DecodingOptions(max_length=48)
    host, host_joins, host_rebuilds = _staggered(OnnxEngine(version, "fp32"), sources, options)
    device, joins, rebuilds = _staggered(
        OnnxEngine(version, "fp32", io_binding=True), sources, options
    )
    assert joins == host_joins >= 10
    assert host_rebuilds < joins  # the host path reuses dead slots for most joins
    assert rebuilds == host_rebuilds  # the device path reuses dead slots as the host path does
    for i in range(len(sources)):
        assert device[i].results[0][0].tokens == host[i].results[0][0].tokens, i


@pytest.mark.parametrize("cache", ["growing", "static"])
def test_a_join_into_scattered_dead_slots_is_one_put_run_a_memory_tensor(
    exported_translator, translator_data, cache
):
    """On the device path a request joining dead slots costs one run of the put graph per
    memory tensor, however scattered the slots, and no rebuild; its rows then step as alone."""
    version = exported_translator[0]
    engine = OnnxEngine(version, "fp32", io_binding=True, cache=cache)
    spanish, _ = read_split(translator_data, "test")
    sources = sorted(Tokenizer(version.tokenizer_file).encode_batch(spanish[:40]), key=len)[::-5]
    bos = engine.special_tokens.bos
    batch = ContinuousBatch(engine)
    batch.join(engine.encode(*source_batch(sources[:6], 512)), np.arange(6))  # the longest
    for token in (bos, 17):
        batch.step(np.full((6, 1), token))
    batch.reorder(np.array([1, 3, 5]))  # slots 0, 2 and 4 die
    joining = engine.encode(*source_batch(sources[6:8], 512))
    runs, run, rebuilds = [], engine._run, batch.rebuilds
    engine._run = lambda session, feeds, **kw: (runs.append(session), run(session, feeds, **kw))[1]
    batch.join(joining, np.arange(2))
    engine._run = run
    assert batch.rebuilds == rebuilds and list(batch.alive) == [1, 3, 5, 0, 2]
    assert runs == [engine.ops["put"]["float32"]] * len(engine.memory_names)
    host = OnnxEngine(version, "fp32")  # the host path, the joining rows alone
    alone = CachedInference(host, host.encode(*source_batch(sources[6:8], 512)), 2)
    for token in (bos, 17, 9):
        logits, _ = batch.step(np.array([[17], [17], [17], [token], [token]]))
        expected, _ = alone.step(np.full((2, 1), token))
        np.testing.assert_allclose(logits[3:], expected, atol=1e-4)
