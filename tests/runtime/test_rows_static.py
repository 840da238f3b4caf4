"""StaticRows: the rows of a continuous batch in the static step's buckets, sized in powers
of two, memory written ahead into reserved slots, steps refused where the buffers cannot
hold them."""

from __future__ import annotations

import numpy as np
import pytest

from service.runtime.batch import ContinuousBatch
from service.runtime.batching import source_batch
from service.runtime.inference import CachedInference
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.rows.static import MIN_MEMORY, Reservation, StaticRows


@pytest.fixture(scope="module")
def engines(tiny_translator):
    _, version = tiny_translator
    return OnnxEngine(version, "fp32", cache="static"), OnnxEngine(version, "fp32", cache="growing")


@pytest.fixture(scope="module")
def sources(tiny_translator):
    vocab = int(tiny_translator[1].config["vocab_size"])
    rng = np.random.default_rng(9)
    return [rng.integers(4, vocab, size=n).tolist() for n in (6, 11, 4, 40)]


def test_buckets_are_powers_of_two_and_made_once(engines):
    store = StaticRows(engines[0].static_step)
    assert [store.slots_for(n) for n in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    assert [store.memory_for(n) for n in (1, 16, 17, 100)] == [MIN_MEMORY, 16, 32, 128]
    assert store.memory_for(store.memory_limit) == store.memory_limit
    with pytest.raises(ValueError, match=f"the static step holds {store.memory_limit}"):
        store.memory_for(store.memory_limit + 1)
    bucket = store.bucket_of(4, 32)
    assert store.bucket_of(4, 32) is bucket and (bucket.slots, bucket.memory_size) == (4, 32)
    assert store.bucket_of(4).memory_size == store.memory_limit  # the longest source's
    assert store.bucket_of(4, 16).state is bucket.state  # the cache shared by a slot count
    assert store.bucket_of(2, 32).state is not bucket.state
    assert sorted(store.slot_sets) == [2, 4]
    assert store.state is None and store.memory is None  # no rows in any bucket yet


def _alone(engine, source):
    return CachedInference(engine, engine.encode(*source_batch([source], 512)), 1)


def test_memory_placed_into_reserved_slots_decodes_as_alone(engines, sources):
    static, growing = engines
    encoder = static.encode(*source_batch(sources, 512))
    batch = ContinuousBatch(static)
    assert batch.reserve(1) is None  # no bucket yet: nothing to reserve in
    batch.join(encoder, np.array([0, 1, 2]))  # 3 rows in a bucket of 4
    store = batch.store
    assert (batch.slots, store.bucket.memory_size) == (4, 16)
    reservation = batch.reserve(1)
    assert isinstance(reservation, Reservation) and reservation.slots.tolist() == [3]
    assert batch.reserve(1) is None  # one reservation at a time
    assert not store.placed(batch.table, reservation)  # nothing written yet
    batch.place(reservation, np.array([2]), encoder)
    assert store.placed(batch.table, reservation)
    moves = store.rebuilds
    batch.join(encoder, np.array([2]), reservation)
    assert store.reserved is None and batch.alive.tolist() == [0, 1, 2, 3]
    assert store.rebuilds == moves
    bos = static.special_tokens.bos
    alone = [_alone(growing, sources[i]) for i in (0, 1, 2, 2)]
    tokens = np.full((4, 1), bos)
    for _ in range(3):
        logits, _ = batch.step(tokens)
        expected = [a.step(t[None])[0][0] for a, t in zip(alone, tokens, strict=True)]
        np.testing.assert_allclose(logits, np.stack(expected), atol=1e-4)
        tokens = np.stack(expected).argmax(1)[:, None]


def test_a_reservation_wider_than_the_free_slots_moves_the_batch_first(engines, sources):
    static, _ = engines
    encoder = static.encode(*source_batch(sources, 512))
    batch = ContinuousBatch(static)
    batch.join(encoder, np.array([0, 1]))
    store = batch.store
    reservation = store.reserve(batch.table, 3)  # 2 rows + 3: a bucket of 8
    assert batch.slots == 8 and reservation.slots.tolist() == [2, 3, 4]
    store.release(reservation)
    assert store.reserved is None
    long = store.reserve(batch.table, 1)
    store.place(long, encoder.rows(static.take, np.array([3])))  # 41 positions: not in 16
    assert not long.placed and not store.placed(batch.table, long)
    store.release(long)


def test_a_bucket_four_times_too_large_is_left_for_a_smaller_one(engines, sources):
    static, _ = engines
    encoder = static.encode(*source_batch(sources, 512))
    batch = ContinuousBatch(static)
    batch.join(encoder, np.array([0, 1, 2, 3]))
    assert (batch.slots, batch.store.bucket.memory_size) == (4, 64)
    bos = static.special_tokens.bos
    batch.step(np.full((4, 1), bos))
    batch.reorder(np.array([2]))  # one row of four slots, 5 positions of 64
    batch.step(np.full((1, 1), bos))
    assert (batch.slots, batch.store.bucket.memory_size) == (1, 16)


def test_a_step_the_buffers_cannot_hold_is_refused(engines, sources):
    static, _ = engines
    encoder = static.encode(*source_batch(sources[:2], 512))
    batch = ContinuousBatch(static)
    batch.join(encoder, np.array([0, 1]))
    store, table = batch.store, batch.table
    with pytest.raises(ValueError, match="one token for each of its 2 slots"):
        store.launch(table, np.ones((1, 1), np.int64), np.zeros((1, 1), np.int64), True, None)
    beyond = np.full((2, 1), store.capacity)
    with pytest.raises(ValueError, match=f"holds {store.capacity} positions"):
        store.launch(table, np.ones((2, 1), np.int64), beyond, True, None)
    with pytest.raises(ValueError, match="not within one"):
        store._move(table, 2, store.bucket.memory_size)
