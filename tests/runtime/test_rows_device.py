"""Rows held as the engine's own tensors: `DeviceRows` (OrtValues, moved by rebuilds) and
`HostRows` (numpy arrays, written into free slots in place). Either way every row's logits
are those of its decode alone as rows join, leave and repeat."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from helpers import RANDOM_SEEDS

from service.runtime.batch import ContinuousBatch
from service.runtime.batching import source_batch
from service.runtime.inference import CachedInference
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.rows import row_store
from service.runtime.rows.arenas import Arenas, spare
from service.runtime.rows.device import DeviceRows, HostRows

ENGINES = {  # name: (cache, io_binding, the store the engine names)
    "host-in-place": ("in_place", False, HostRows),
    "host-growing": ("growing", False, HostRows),
    "device-growing": ("growing", True, DeviceRows),
    "device-in-place": ("in_place", True, DeviceRows),
}


@pytest.fixture(scope="module")
def sources(tiny_translator):
    _, version = tiny_translator
    rng = np.random.default_rng(4)
    vocab = int(version.config["vocab_size"])
    return [rng.integers(4, vocab, size=n).tolist() for n in (5, 9, 3, 14, 7)]


class Decodes:
    """A batch over a store, each row checked against its own decode alone."""

    def __init__(self, version, engine, store, sources):
        self.engine, self.sources, self.store = engine, sources, store
        self.reference = OnnxEngine(version, "fp32", cache="growing")
        self.encoder = engine.encode(*source_batch(sources, 512))
        self.batch = ContinuousBatch(engine, store)
        self.rows: list[tuple[int, CachedInference, list[int]]] = []  # (source, alone, fed)

    def alone(self, source: int) -> CachedInference:
        encoder = self.reference.encode(*source_batch([self.sources[source]], 512))
        return CachedInference(self.reference, encoder, 1)

    def join(self, index: list[int]) -> None:
        self.batch.join(self.encoder, np.array(index))
        bos = self.engine.special_tokens.bos
        self.rows += [(i, self.alone(i), [bos]) for i in index]

    def step(self) -> None:
        logits, _ = self.batch.step(np.array([[fed[-1]] for _, _, fed in self.rows]))
        assert logits.shape[0] == len(self.rows)
        for row, (_, alone, fed) in zip(logits, self.rows, strict=True):
            expected, _ = alone.step(np.array([[fed[-1]]]))
            np.testing.assert_allclose(row, expected[0], atol=1e-4)
            fed.append(int(expected[0].argmax()))

    def reorder(self, index: list[int]) -> None:
        """Rows `index` kept (each decodes again alone up to where its origin is)."""
        self.batch.reorder(np.array(index))
        rows = []
        for i in index:
            source, _, fed = self.rows[i]
            alone = self.alone(source)
            for token in fed[:-1]:
                alone.step(np.array([[token]]))
            rows.append((source, alone, list(fed)))
        self.rows = rows


@pytest.mark.parametrize("name", list(ENGINES))
def test_rows_join_leave_and_repeat_and_each_decodes_as_alone(tiny_translator, sources, name):
    _, version = tiny_translator
    cache, io_binding, kind = ENGINES[name]
    engine = OnnxEngine(version, "fp32", cache=cache, io_binding=io_binding)
    assert engine.rows == ("device" if io_binding else "host")
    decodes = Decodes(version, engine, kind(engine), sources)
    decodes.join([0, 1, 2])
    decodes.step()
    decodes.step()
    decodes.reorder([0, 2])  # the row of source 1 leaves its slot
    decodes.join([3])  # a longer source joins
    decodes.step()
    decodes.reorder([0, 1, 1, 2])  # a beam repeats
    decodes.step()
    decodes.step()
    decodes.join([4])
    decodes.step()
    state = decodes.store.state["past_key_values.0.key"]
    assert isinstance(state, np.ndarray if kind is HostRows else ort.OrtValue)


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
@pytest.mark.parametrize("name", [*ENGINES, "static"])
def test_random_joins_leaves_and_repeats_decode_as_alone(tiny_translator, sources, name, seed):
    """Traffic drawn at random (rows joining, leaving and repeated as beams repeat them, the
    batch emptied and its memory let go): every row's logits at every step are those of its
    decode alone, whatever the store reused or rebuilt (the static step's buckets too, the
    GPU's default, here uncaptured)."""
    _, version = tiny_translator
    if name == "static":
        engine = OnnxEngine(version, "fp32", cache="static")
        store = row_store(engine)
    else:
        cache, io_binding, kind = ENGINES[name]
        engine = OnnxEngine(version, "fp32", cache=cache, io_binding=io_binding)
        store = kind(engine)
    decodes = Decodes(version, engine, store, sources)
    rng = np.random.default_rng(seed)
    rebuilt = []
    for _ in range(36):
        rows, move = len(decodes.rows), rng.random()
        if rows == 0 or (move < 0.25 and rows < 12):
            decodes.join(rng.integers(0, len(sources), size=rng.integers(1, 4)).tolist())
        elif move < 0.45:  # each row kept, dropped or repeated, in order
            counts = rng.choice([0, 1, 1, 2], size=rows)
            decodes.reorder([i for i in range(rows) for _ in range(counts[i])])
            if not decodes.rows and rng.random() < 0.5:
                decodes.batch.rest()  # an idle worker lets its rows' memory go
        if decodes.rows and all(len(fed) < 24 for _, _, fed in decodes.rows):
            decodes.step()
        elif decodes.rows:  # the longest rows ended
            decodes.reorder([i for i, (_, _, fed) in enumerate(decodes.rows) if len(fed) < 24])
        rebuilt.append(decodes.store.rebuilds)
    assert max(rebuilt) > 0  # the traffic made the store move its rows


# A static bucket's slot without a row held input 0 after the rows moved (into a bucket of
# more slots), or the input of the row it last held (into one of longer memory, every row in
# its slot): a row of that input repeated into it (a beam) skipped its memory, taking it
# for a sibling's, and decoded over whatever the slot's memory held. Found by the random
# traffic above (seeds 41 and 43 of 50).


def test_a_row_repeated_into_a_slot_left_free_by_more_slots_takes_its_memory(
    tiny_translator, sources
):
    _, version = tiny_translator
    engine = OnnxEngine(version, "fp32", cache="static")
    decodes = Decodes(version, engine, row_store(engine), sources)
    decodes.join([0])
    decodes.step()
    decodes.join([1, 2])  # into a bucket of 4 slots: slot 3 free
    decodes.step()
    decodes.reorder([0, 0, 1, 2])  # row 0, the batch's input 0, repeated into slot 3
    assert decodes.batch.table.alive.tolist() == [0, 3, 1, 2]
    decodes.step()


def test_a_row_repeated_into_its_siblings_slot_after_a_longer_memory_takes_its_memory(
    tiny_translator, sources
):
    _, version = tiny_translator
    engine = OnnxEngine(version, "fp32", cache="static")
    longer = [*sources, sources[3] + sources[1]]  # 23 tokens: past the first memory bucket
    decodes = Decodes(version, engine, row_store(engine), longer)
    decodes.join([0])
    decodes.step()
    decodes.reorder([0, 0, 0])  # a beam of three rows of input 0 (slots 0-2 of 4)
    decodes.step()
    decodes.reorder([0])  # two of them end: slots 1 and 2 held input 0 last
    memory = decodes.store.bucket.memory_size
    decodes.join([5])  # a longer source: the rows move to longer memory, in their slots
    assert decodes.store.bucket.memory_size > memory and decodes.batch.slots == 4
    decodes.step()
    decodes.reorder([0, 0, 1])  # the beam repeats into slot 2 again
    assert decodes.batch.table.alive.tolist() == [0, 2, 1]
    decodes.step()


def test_host_rows_write_a_joining_row_into_a_free_slot_in_place(tiny_translator, sources):
    _, version = tiny_translator
    engine = OnnxEngine(version, "fp32", cache="in_place")
    store = HostRows(engine)
    assert not store.adopts_encoder_rows  # the arrays are written into: copies taken
    decodes = Decodes(version, engine, store, sources)
    decodes.join([0, 3, 1])
    decodes.step()
    memory, state = store.memory["encoder.0.key"], store.state["past_key_values.0.key"]
    decodes.reorder([0, 2])  # the row of slot 1 leaves
    decodes.join([2])  # a shorter memory: into slot 1, nothing rebuilt
    assert store.rebuilds == 0 and decodes.batch.alive.tolist() == [0, 2, 1]
    assert store.memory["encoder.0.key"] is memory and store.state["past_key_values.0.key"] is state
    decodes.step()
    decodes.reorder([0, 0, 1])  # a repeat into the free slot: copied in place
    assert store.rebuilds == 0 and sorted(decodes.batch.alive.tolist()) == [0, 1, 2]
    decodes.step()
    decodes.reorder([0, 1, 2, 2])  # no free slot: one added after the last, in place
    assert store.rebuilds == 0 and decodes.batch.slots == 4
    decodes.step()


def _lives_in_arenas(store: HostRows) -> bool:
    """Whether every tensor of the store is the view its arenas handed out last."""
    return all(store.arenas.homes[key][1] is t for key, t in store._held().items())


def test_host_rows_join_after_the_last_slot_in_their_memory_and_rebuild_into_it_again(
    tiny_translator, sources
):
    _, version = tiny_translator
    engine = OnnxEngine(version, "fp32", cache="in_place")
    store = HostRows(engine)
    decodes = Decodes(version, engine, store, sources)
    decodes.join([3, 1])  # the longest source first; room for spare(2) = 8 more rows
    decodes.step()  # the buffers grown to their first capacity in the same memory
    assert _lives_in_arenas(store) and store.state["past_key_values.0.key"].shape[2] == 32
    decodes.join([2])
    decodes.step()
    decodes.join([0, 4])  # no dead slot: slots added after the last, nothing rebuilt
    decodes.step()
    assert store.rebuilds == 0 and decodes.batch.slots == 5 and _lives_in_arenas(store)
    decodes.join([0, 1, 2, 3, 4, 0])  # 11 rows: more than the memory holds, rebuilt
    assert store.rebuilds == 1 and decodes.batch.slots == 11 and _lives_in_arenas(store)
    decodes.step()
    buffers = {key: list(pair) for key, pair in store.arenas.buffers.items()}
    decodes.reorder([1, 4, 9])  # most slots dead: rebuilt before the next step
    decodes.step()
    assert store.rebuilds == 2 and decodes.batch.slots == 3 and _lives_in_arenas(store)
    # into the memory that held the rows before the last rebuild: nothing allocated
    assert all(
        pair[0] is buffers[key][0] and pair[1] is buffers[key][1]
        for key, pair in store.arenas.buffers.items()
    )
    decodes.reorder([0, 1, 2, 2, 2])  # no free slot for the repeats: two added, in place
    assert store.rebuilds == 2 and decodes.batch.slots == 5
    decodes.step()
    decodes.reorder([])
    decodes.join([4])  # an emptied batch's next rows adopted into the memory kept
    decodes.step()
    assert _lives_in_arenas(store) and decodes.batch.slots == 1


def test_arenas_write_a_tensor_into_the_buffer_it_is_not_in_and_extend_it_in_place():
    arenas = Arenas()
    first = arenas.fresh("k", (2, 3), np.float32)
    first[:] = 1
    assert arenas.room("k", first, 2 + spare(2)) and not arenas.room("k", first, 3 + spare(2))
    assert not arenas.room("k", first.copy(), 3)  # not the array it handed out
    second = arenas.fresh("k", (4, 3), np.float32, old=first)
    assert not np.shares_memory(first, second)
    second[:2] = first
    grown = arenas.extend("k", second, 5)
    assert np.shares_memory(grown, second) and (grown[:2] == 1).all() and grown.flags.c_contiguous
    third = arenas.fresh("k", (3, 3), np.float32, old=grown)  # back into the first's memory
    assert np.shares_memory(third, first) and not np.shares_memory(third, grown)


def test_device_rows_rebuild_for_every_join_and_repeat_and_place_nothing_ahead(
    tiny_translator, sources
):
    _, version = tiny_translator
    engine = OnnxEngine(version, "fp32", cache="growing", io_binding=True)
    store = DeviceRows(engine)
    assert store.adopts_encoder_rows
    assert store.growing and not store.buffers  # a growing cache on the shared time axis
    decodes = Decodes(version, engine, store, sources)
    table = decodes.batch.table
    assert store.reserve(table, 2) is None and not store.placed(table, None)
    with pytest.raises(ValueError, match="not placed ahead"):
        store.place(None, None)
    decodes.join([0, 1])
    assert store.rebuilds == 0  # the first rows are adopted as they are
    decodes.step()
    decodes.join([2])
    assert store.rebuilds == 1 and decodes.batch.slots == 3
    decodes.step()
    decodes.reorder([0, 0, 1, 2])
    assert store.rebuilds == 2 and decodes.batch.slots == 4
    decodes.step()
    decodes.reorder([3])  # three of four slots dead: rebuilt before the next step
    decodes.step()
    assert store.rebuilds == 3 and decodes.batch.slots == 1
    store.clear()
    assert store.state is None and store.memory is None
