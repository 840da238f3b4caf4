"""The `put` helper graph (rows written into slots where the tensors live) and the continuous
batch using it: on the device path requests join into dead slots instead of rebuilding."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from export.ops import put_graph
from service.batching import source_batch
from service.decoding import DecodingOptions
from service.messages import Result
from service.onnx_engine import OnnxEngine
from service.scheduler import Job, Scheduler
from service.tokenizer import Tokenizer


@pytest.mark.parametrize("shape", [(6, 3), (6, 2, 5, 4), (6,)])
def test_put_writes_padded_rows_into_slots(shape):
    rng = np.random.default_rng(len(shape))
    data = rng.normal(size=shape).astype(np.float32)
    smaller = (2, *[max(1, d - 1) for d in shape[1:]])
    updates = rng.normal(size=smaller).astype(np.float32)
    slots = np.array([4, 1])
    session = ort.InferenceSession(
        put_graph(TensorProto.FLOAT).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (output,) = session.run(None, {"data": data, "indices": slots, "updates": updates})
    expected = data.copy()
    expected[slots] = 0
    expected[(slots, *map(slice, smaller[1:]))] = updates
    np.testing.assert_array_equal(output, expected)


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


def test_the_device_path_joins_into_dead_slots_as_the_host_path(exported_translator,
                                                                 test_sentences):  # fmt: skip
    version = exported_translator[0]
    sources = Tokenizer(version.tokenizer_file).encode_batch(test_sentences[:30])
    options = DecodingOptions(max_length=48)
    host, host_joins, host_rebuilds = _staggered(OnnxEngine(version, "fp32"), sources, options)
    device, joins, rebuilds = _staggered(
        OnnxEngine(version, "fp32", io_binding=True), sources, options
    )
    assert joins == host_joins >= 10
    assert rebuilds == host_rebuilds < joins  # the same decisions: most joins reuse slots
    for i in range(len(sources)):
        assert device[i].results[0][0].tokens == host[i].results[0][0].tokens, i
