"""Requests arriving while others decode: the device path (cache rows moved by the helper
graphs) decodes them as the host path (rows written into dead slots in place) does."""

from __future__ import annotations

from models.corpus import read_split
from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.tokenizer import Tokenizer
from service.worker.messages import Job, Result
from service.worker.scheduler import Scheduler


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
    assert rebuilds >= host_rebuilds  # the device path rebuilds to join (measured faster)
    for i in range(len(sources)):
        assert device[i].results[0][0].tokens == host[i].results[0][0].tokens, i
