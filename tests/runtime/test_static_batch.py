"""The static step served by the continuous batch (`OnnxEngine(cache="static")`): rows in the
slots of buckets of fixed buffers (1, 2, 4, ... rows), written and moved by the gather graph
straight into the slots' memory, each row decoding as it does alone; on CUDA each bucket's
step replayed as a CUDA graph. On the CPU the same code runs uncaptured."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import built_tiny_translator

from bench.lib.engine_workers import decode_runs
from service.runtime.batch import ContinuousBatch, joined
from service.runtime.batching import source_batch
from service.runtime.decoding import DecodingOptions
from service.runtime.graphs import STATIC
from service.runtime.inference import CachedInference
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.translation import translate_ids


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, shipped_translator):
    directory = tmp_path_factory.mktemp("repo") / "tiny" / "1"
    model, version = built_tiny_translator(directory, shipped_translator[1], 5, ("fp32", "fp16"))
    rng = np.random.default_rng(3)
    vocab = int(version.config["vocab_size"])
    sources = [list(rng.integers(4, vocab, size=n)) for n in (4, 9, 6, 12, 3, 7)]
    return model, version, sources


def test_the_static_step_has_every_shape_fixed_but_the_rows(tiny):
    model, version, _ = tiny
    for name in ("decoder", "lean_decoder"):
        graph = onnx.load(str(version.graph("fp32", STATIC + name))).graph
        dims = {
            v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in (*graph.input, *graph.output)
        }
        capacity = model.config.max_length
        assert dims["past_key_values.0.key"] == ["batch", 4, capacity, 8]
        assert dims["present.2.value"] == dims["past_key_values.2.value"]
        # GQA's total length is the capacity, a constant: nothing read back to the host
        assert not any(n.op_type == "ReduceMax" for n in graph.node)
        totals = {n.input[6] for n in graph.node if n.op_type == "GroupQueryAttention"}
        assert totals <= {i.name for i in graph.initializer} and len(totals) == 1
    assert not version.has_graph("int8", STATIC + "decoder")  # CUDA graphs: float variants


def _alone(engine, source):
    """A row's own decode: (cached inference, its first logits) fed `bos`."""
    inference = CachedInference(engine, engine.encode(*source_batch([source], 512)), 1)
    return inference


def test_rows_join_free_slots_move_between_buckets_and_decode_as_alone(tiny):
    _, version, sources = tiny
    static = OnnxEngine(version, "fp32", cache="static")
    reference = OnnxEngine(version, "fp32", cache="growing")
    assert static.cache == "static" and static.io_binding and not static.capture
    encoder = static.encode(*source_batch(sources, 512))
    batch = ContinuousBatch(static)
    rows: list[tuple[int, CachedInference]] = []  # (source, its decode alone), in row order
    bos = static.special_tokens.bos
    fed: list[list[int]] = []

    def join(index: list[int]) -> None:
        batch.join(encoder, np.array(index))
        for i in index:
            rows.append((i, _alone(reference, sources[i])))
            fed.append([bos])

    def step() -> None:
        tokens = np.array([[f[-1]] for f in fed])
        logits, _ = batch.step(tokens)
        for r, ((_, alone), f) in enumerate(zip(rows, fed, strict=True)):
            expected, _ = alone.step(np.array([[f[-1]]]))
            np.testing.assert_allclose(logits[r], expected[0], atol=1e-4)
            f.append(int(expected[0].argmax()))

    join([0])
    assert batch.slots == 1
    first = batch.state["past_key_values.0.key"]
    step()
    join([1, 2])  # 3 rows: moved into the bucket of 4, a free slot left
    assert batch.slots == 4 and batch.rows == 3 and batch.rebuilds == 2
    step()
    step()
    batch.reorder(np.array([0, 2]))  # row 1 leaves: its slot is free
    del rows[1], fed[1]
    step()
    moves = batch.rebuilds
    join([3, 4])  # two free slots: written in place, nothing moves
    assert batch.rebuilds == moves and batch.slots == 4 and batch.rows == 4
    step()
    # a beam repeats a row into a free slot... none free: the batch moves to 8 slots
    batch.reorder(np.array([0, 1, 1, 2, 3]))
    rows.insert(2, (rows[1][0], _alone(reference, sources[rows[1][0]])))
    for token in fed[1][:-1]:  # the copy's decode alone, brought to the same step
        rows[2][1].step(np.array([[token]]))
    fed.insert(2, list(fed[1]))
    assert batch.slots == 8 and batch.rebuilds == moves + 1
    step()
    # a repeat with free slots copies within the bucket
    batch.reorder(np.array([0, 1, 2, 3, 4, 4]))
    rows.append((rows[4][0], _alone(reference, sources[rows[4][0]])))
    for token in fed[4][:-1]:
        rows[-1][1].step(np.array([[token]]))
    fed.append(list(fed[4]))
    assert batch.slots == 8 and batch.rebuilds == moves + 1
    step()
    batch.reorder(np.array([5]))  # one row of 8 slots: a bucket of 1 again, the same buffers
    rows, fed = [rows[5]], [fed[5]]
    step()
    assert batch.slots == 1 and batch.state["past_key_values.0.key"] is first
    assert sorted(batch.store.slot_sets) == [1, 4, 8]


def test_a_longer_memory_moves_the_batch_and_every_row_keeps_its_slot(tiny):
    """A joining source longer than the bucket's memory: the batch moves to a bucket of as
    many slots and a larger memory (only the memory moves, the cache stays in its buffers);
    once that row leaves, to a smaller memory again. Rows decode as alone throughout."""
    _, version, _ = tiny
    rng = np.random.default_rng(8)
    vocab = int(version.config["vocab_size"])
    sources = [list(rng.integers(4, vocab, size=n)) for n in (5, 6, 40)]
    static = OnnxEngine(version, "fp32", cache="static")
    reference = OnnxEngine(version, "fp32", cache="growing")
    encoder = static.encode(*source_batch(sources, 512))
    batch = ContinuousBatch(static)
    batch.join(encoder, np.array([0, 1]))
    assert (batch.slots, batch.store.bucket.memory_size) == (2, 16)
    alone = {i: _alone(reference, sources[i]) for i in range(3)}
    fed = {i: [static.special_tokens.bos] for i in range(3)}

    def step(live: list[int]) -> None:
        logits, _ = batch.step(np.array([[fed[i][-1]] for i in live]))
        for r, i in enumerate(live):
            expected, _ = alone[i].step(np.array([[fed[i][-1]]]))
            np.testing.assert_allclose(logits[r], expected[0], atol=1e-4)
            fed[i].append(int(expected[0].argmax()))

    step([0, 1])
    step([0, 1])
    batch.reorder(np.array([0]))  # row 1 leaves a free slot
    cache, slot, moves = batch.state["past_key_values.0.key"], batch.alive[0], batch.rebuilds
    batch.join(encoder, np.array([2]))  # 41 memory positions: a bucket of 64
    assert (batch.slots, batch.store.bucket.memory_size) == (2, 64) and batch.rebuilds == moves + 1
    assert batch.alive[0] == slot and batch.state["past_key_values.0.key"] is cache
    step([0, 2])
    step([0, 2])
    batch.reorder(np.array([0]))  # the long row leaves: 6 positions in a memory of 64
    step([0])
    assert (batch.slots, batch.store.bucket.memory_size) == (2, 16) and batch.rebuilds == moves + 2
    step([0])
    assert sorted(batch.store.buckets) == [(2, 16), (2, 64)]


def test_a_slot_taken_by_a_row_of_a_shorter_memory_is_stepped_with_its_own_mask(tiny):
    """A row that joins, or a beam copied, into the slot of a row of a longer memory that
    left (the bucket unchanged, nothing moved) decodes as alone at the very next step: the
    mask that step reads for that slot is its own, not the row's before it."""
    _, version, _ = tiny
    rng = np.random.default_rng(5)
    vocab = int(version.config["vocab_size"])
    sources = [list(rng.integers(4, vocab, size=n)) for n in (13, 3, 4, 2)]
    static = OnnxEngine(version, "fp32", cache="static")
    reference = OnnxEngine(version, "fp32", cache="growing")
    encoder = static.encode(*source_batch(sources, 512))
    batch = ContinuousBatch(static)
    bos = static.special_tokens.bos
    rows: list[tuple[CachedInference, list[int]]] = []  # each row's decode alone, its tokens

    def join(index: list[int]) -> None:
        batch.join(encoder, np.array(index))
        rows.extend((_alone(reference, sources[i]), [bos]) for i in index)

    def step() -> None:
        logits, _ = batch.step(np.array([[fed[-1]] for _, fed in rows]))
        for r, (alone, fed) in enumerate(rows):
            expected, _ = alone.step(np.array([[fed[-1]]]))
            np.testing.assert_allclose(logits[r], expected[0], atol=1e-4)
            fed.append(int(expected[0].argmax()))

    join([0, 1, 2])  # 3 rows in 4 slots of a memory of 16
    step()
    step()
    bucket, slots = batch.store.bucket, batch.alive.tolist()
    batch.reorder(np.array([1, 2]))  # the longest memory's row leaves its slot free
    del rows[0]
    step()
    copied = _alone(reference, sources[2])  # row 1 repeated into the freed slot
    for token in rows[1][1][:-1]:
        copied.step(np.array([[token]]))
    batch.reorder(np.array([0, 1, 1]))
    rows.append((copied, list(rows[1][1])))
    assert batch.alive.tolist()[2] == slots[0] and batch.store.bucket is bucket
    step()
    step()
    batch.reorder(np.array([0, 1]))  # the copy leaves; a row of 2 positions takes its slot
    del rows[2]
    step()
    join([3])
    assert batch.alive.tolist()[2] == slots[0] and batch.store.bucket is bucket
    step()
    step()


@pytest.mark.parametrize(
    "options",
    [
        DecodingOptions(max_length=20),
        DecodingOptions(beam_size=4, max_length=20),
        DecodingOptions(beam_size=3, num_hypotheses=2, max_length=12),
    ],
    ids=["greedy", "beam4", "nbest"],
)
def test_a_padded_batch_decodes_as_the_in_place_step(tiny, options):
    _, version, sources = tiny
    static = OnnxEngine(version, "fp32", cache="static")
    in_place = OnnxEngine(version, "fp32", cache="in_place")
    got = translate_ids(static, sources, options, 512, joined)
    expected = translate_ids(in_place, sources, options, 512)
    assert [[h.tokens for h in n] for n in got] == [[h.tokens for h in n] for n in expected]


def test_the_static_step_refuses_what_it_cannot_run(tiny):
    _, version, sources = tiny
    with pytest.raises(ValueError, match="needs IO binding"):
        OnnxEngine(version, "fp32", cache="static", io_binding=False)
    with pytest.raises(ValueError, match="capture needs cache='static'"):
        OnnxEngine(version, "fp32", cache="in_place", capture=True)
    with pytest.raises(ValueError, match="need device cuda"):
        OnnxEngine(version, "fp32", cache="static", capture=True)
    static = OnnxEngine(version, "fp32", cache="static")
    with pytest.raises(ValueError, match="runs over a batch's buckets"):
        translate_ids(static, sources[:2], DecodingOptions(max_length=4), 512)
    store = ContinuousBatch(static).store
    keys = store.bucket_of(1).memory["encoder.0.key"]  # the longest source's size
    longer = np.zeros((1, 4, store.memory_limit + 1, 8), np.float32)
    with pytest.raises(ValueError, match="do not fit"):
        store.fit(longer, keys)


@pytest.mark.gpu
def test_each_bucket_replayed_as_a_cuda_graph_decodes_as_uncaptured(tiny):
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("no CUDA execution provider")
    _, version, sources = tiny
    captured = OnnxEngine(version, "fp16", "cuda", cache="static")
    assert captured.capture
    uncaptured = OnnxEngine(version, "fp16", "cuda", cache="static", capture=False)
    for options in (DecodingOptions(max_length=20), DecodingOptions(beam_size=4, max_length=20)):
        got = translate_ids(captured, sources, options, 512, joined)
        expected = translate_ids(uncaptured, sources, options, 512, joined)
        assert [[h.tokens for h in n] for n in got] == [[h.tokens for h in n] for n in expected]
        for rows in (1, 3):  # buckets replayed again, other rows in them
            got = translate_ids(captured, sources[:rows], options, 512, joined)
            expected = translate_ids(uncaptured, sources[:rows], options, 512, joined)
            assert [n[0].tokens for n in got] == [n[0].tokens for n in expected]


@pytest.mark.gpu
def test_steps_run_ahead_as_cuda_graphs_decode_as_one_step_at_a_time(tiny):
    """Greedy steps back to back (`search_step`'s `steps`): each a captured graph fed the ids
    the one before chose on the device, all but the last queued without a wait; recorded on
    the first run, replayed on the next, token for token as one step at a time."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("no CUDA execution provider")
    from service.runtime.rows import row_store
    from service.runtime.search import SearchRequest

    _, version, sources = tiny
    engine = OnnxEngine(version, "fp16", "cuda", cache="static")
    assert engine.capture
    store, request = row_store(engine), SearchRequest(1, None, False)
    encoder = engine.encode(*source_batch(sources, 512))

    def decode(window: int) -> np.ndarray:
        store.clear()  # the buckets kept: their graphs replayed
        batch = ContinuousBatch(engine, store)
        batch.join(encoder, np.arange(len(sources)))
        return decode_runs(batch, engine.special_tokens.bos, request, 20, window)[0]

    one = decode(1)
    for _ in range(2):  # recorded, then replayed
        assert np.array_equal(decode(4), one)


def test_the_configured_cache_applies_where_the_version_ships_that_step(tiny):
    from service.front.config import ServerConfig
    from service.runtime.cache_choice import choose_cache, shipped_caches
    from service.runtime.errors import InvalidArgument

    _, version, _ = tiny

    def cache_for(setting: str, variant: str) -> str:
        return choose_cache(setting, "cpu", shipped_caches(version, variant)).cache

    assert cache_for("static", "fp32") == "static"
    assert cache_for("in_place", "fp32") == "in_place"
    assert cache_for("growing", "fp32") == "growing"
    assert cache_for("auto", "fp32") == "in_place"  # the default on the CPU
    # int8 has no static step (nor has a captioner any cached one): its own default
    assert cache_for("static", "int8") == cache_for("auto", "int8")
    ServerConfig(cache="static").validate()
    with pytest.raises(InvalidArgument, match="io_binding cannot be false"):
        ServerConfig(cache="static", io_binding=False).validate()
    with pytest.raises(InvalidArgument, match="auto, in_place, growing or static"):
        ServerConfig(cache="fixed").validate()


def test_what_leaves_a_step_is_not_overwritten_by_the_next(tiny):
    """The bucket's output buffers are written by every step; the logits, attention and
    candidates a step hands out are the caller's."""
    from service.runtime.search import SearchRequest

    _, version, sources = tiny
    static = OnnxEngine(version, "fp32", cache="static")
    batch = joined(static, static.encode(*source_batch(sources[:2], 512)), 2)
    bos = static.special_tokens.bos
    logits, attention = batch.step(np.array([[bos], [bos]]))
    candidates, _ = batch.search_step(np.array([[5], [6]]), SearchRequest(k=3, attention=False))
    held = [a.copy() for a in (logits, attention, candidates.ids, candidates.log_probs)]
    batch.step(np.array([[7], [8]]))
    batch.search_step(np.array([[9], [10]]), SearchRequest(k=3, attention=False))
    for kept, now in zip(
        held, (logits, attention, candidates.ids, candidates.log_probs), strict=True
    ):
        np.testing.assert_array_equal(kept, now)


def test_a_searched_step_crosses_to_the_device_once_and_back_once(tiny, monkeypatch):
    """Each crossing is a synchronisation on a GPU: a step of the lean step writes its ids,
    positions and memory mask in one copy and reads its ids and log-probabilities back in
    another, whatever k; they are the search's over the full step's logits."""
    from service.runtime.search import SearchRequest, host_search

    _, version, sources = tiny
    static = OnnxEngine(version, "fp32", cache="static")
    encoder = static.encode(*source_batch(sources[:3], 512))
    searched, full = joined(static, encoder, 3), joined(static, encoder, 3)
    crossings = []
    for method in ("numpy", "update_inplace"):
        original = getattr(ort.OrtValue, method)

        def counted(value, *args, original=original, method=method):
            crossings.append(method)
            return original(value, *args)

        monkeypatch.setattr(ort.OrtValue, method, counted)
    tokens = np.array([[static.special_tokens.bos]] * 3)
    for k in (1, 4, 4):
        request = SearchRequest(k=k, attention=False)
        crossings.clear()
        found, _ = searched.search_step(tokens, request)
        assert sorted(crossings) == ["numpy", "update_inplace"]
        logits, _ = full.step(tokens)
        expected = host_search(logits, request)
        np.testing.assert_array_equal(found.ids, expected.ids)
        np.testing.assert_allclose(found.log_probs, expected.log_probs, atol=1e-5)
        assert found.log_probs.dtype == np.float32
        tokens = found.ids[:, -1:]  # each row's k-th best: a path the greedy one is not


def _counting(session, runs: list) -> None:
    """Counts `session`'s runs with IO binding into `runs` (the session keeps running)."""
    run = session.run_with_iobinding

    def counted(binding, options=None):
        runs.append(1)
        return run(binding, options)

    session.run_with_iobinding = counted


def _scattered_decode(version, sources, without: str) -> tuple[list, list]:
    """Rows leaving scattered slots free, others joining them, beams repeated into them, each
    row checked against its decode alone at every step, by a static engine whose version
    ships none of `without` ("scatter", "place"). Returns every step's logits and, for each
    admission and repeat, the runs (scatter, place, gather) it took."""
    static = OnnxEngine(version, "fp32", cache="static")
    static.static_step = replace(static.static_step, **dict.fromkeys(without.split(), None))
    reference = OnnxEngine(version, "fp32", cache="growing")
    runs: dict[str, list] = {"scatter": [], "place": [], "gather": []}
    for op in ("scatter", "place"):
        if getattr(static.static_step, op) is not None:
            _counting(getattr(static.static_step, op), runs[op])
    for dtype in ("float32", "int64"):  # the masks are copied whole
        _counting(static.ops["gather"][dtype], runs["gather"])
    batch, bos = ContinuousBatch(static), static.special_tokens.bos
    rows: list[tuple[CachedInference, list[int]]] = []  # each row's decode alone, its tokens
    out, counts = [], []

    def counted(change) -> None:
        for r in runs.values():
            r.clear()
        change()
        counts.append(tuple(len(r) for r in runs.values()))

    def join(index: list[int]) -> None:
        encoder = static.encode(*source_batch([sources[i] for i in index], 512))
        counted(lambda: batch.join(encoder, np.arange(len(index))))
        rows.extend((_alone(reference, sources[i]), [bos]) for i in index)

    def step() -> None:
        logits, _ = batch.step(np.array([[fed[-1]] for _, fed in rows]))
        out.append(logits.copy())
        for r, (alone, fed) in enumerate(rows):
            expected, _ = alone.step(np.array([[fed[-1]]]))
            np.testing.assert_allclose(logits[r], expected[0], atol=1e-4)
            fed.append(int(expected[0].argmax()))

    join([0, 1, 2, 3, 4, 5])  # slots 0..5 of 8
    step()
    batch.reorder(np.array([0, 2, 4]))  # slots 1, 3 and 5 free (and 6, 7)
    rows[:] = rows[0::2]
    step()
    join([1, 3, 5])  # into slots 1, 3 and 5
    assert batch.alive.tolist() == [0, 2, 4, 1, 3, 5]
    step()
    step()
    # beams: rows 0 and 4 kept twice, copied into the free slots 2 and 4
    index = np.array([0, 0, 3, 4, 4])
    counted(lambda: batch.reorder(index))
    assert batch.alive.tolist() == [0, 2, 1, 3, 4] and batch.slots == 8
    copies = []
    for i in index:
        alone = _alone(reference, sources[[0, 2, 4, 1, 3, 5][i]])
        for token in rows[i][1][:-1]:  # brought to the same step
            alone.step(np.array([[token]]))
        copies.append((alone, list(rows[i][1])))
    rows[:] = copies
    step()
    step()
    return out, counts


def test_the_scatter_op_writes_any_slots_in_one_run_and_decodes_as_the_place_op(tiny):
    """Rows joining the scattered slots rows left free, and beams repeated into them: one
    run of the version's scatter op an admission (every memory tensor of every slot), one a
    repeat for the state and one for the memory, where the place op took one a run of slots
    and the gather graph one a tensor and a run; consecutive slots take one run of the place
    op. Every row decodes as alone, and the three ways decode the same logits."""
    _, version, sources = tiny
    for op in ("place", "scatter"):
        assert version.has_op(op, "float32") and version.has_op(op, "float16")
    scattered, counts = _scattered_decode(version, sources, "")
    placed, place_counts = _scattered_decode(version, sources, "scatter")
    gathered, gather_counts = _scattered_decode(version, sources, "scatter place")
    memory = len(OnnxEngine(version, "fp32", cache="static").memory_names)
    # (scatter, place, gather) runs: the first admission, the second, the repeat
    assert counts == [(0, 1, 0), (1, 0, 0), (2, 0, 0)]
    assert place_counts == [(0, 1, 0), (0, 3, 0), (0, 4, 0)]
    assert gather_counts == [(0, 0, memory), (0, 0, 3 * memory), (0, 0, 4 * memory)]
    for a, b, c in zip(scattered, placed, gathered, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("op", ["place", "scatter"])
def test_a_memory_op_of_another_model_is_refused(tiny, tmp_path, op):
    import json
    import shutil

    from export.ops import MEMORY_OPS
    from service.runtime.errors import ModelRepositoryError
    from service.runtime.repository import sha256, verify

    _, version, _ = tiny
    copy = tmp_path / "tiny" / "1"
    shutil.copytree(version.directory, copy)
    path = copy / "ops" / f"{op}_float32.onnx"
    onnx.save_model(MEMORY_OPS[op](onnx.TensorProto.FLOAT, 2), str(path))
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest["ops"][op]["float32"] == f"ops/{op}_float32.onnx"
    manifest["files"][f"ops/{op}_float32.onnx"] = sha256(path)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelRepositoryError, match=f"{op} op writes 2 tensors, the model has"):
        OnnxEngine(verify(copy), "fp32", cache="static")
    del manifest["ops"][op]  # a version without one: the other op, or a tensor at a time
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert getattr(OnnxEngine(verify(copy), "fp32", cache="static").static_step, op) is None


def test_a_greedy_admission_gathers_nothing_on_the_device_and_copies_host_arrays(tiny):
    """Every row of an encoder's output joining in order is taken as it is where the batch
    never writes it in place (device tensors), and copied where it does (host arrays, whose
    free slots the next rows are written into)."""
    _, version, sources = tiny
    device = OnnxEngine(version, "fp32", cache="growing", io_binding=True)
    gathers: list = []
    _counting(device.ops["gather"]["float32"], gathers)
    encoder = device.encode(*source_batch(sources[:3], 512))
    batch = ContinuousBatch(device)
    batch.join(encoder, np.arange(3))
    assert gathers == [] and batch.memory["encoder.0.key"] is encoder.memory["encoder.0.key"]
    taken, take = [], device.take

    def counted(tensor, index):
        taken.append(index)
        return take(tensor, index)

    device.take = counted
    ContinuousBatch(device).join(encoder, np.array([2, 0]))  # other rows, or another order
    assert len(taken) == len(device.memory_names) + 1  # its memory and its mask taken
    host = OnnxEngine(version, "fp32", cache="in_place")
    encoder = host.encode(*source_batch(sources[:3], 512))
    batch = ContinuousBatch(host)
    batch.join(encoder, np.arange(3))
    kept = batch.memory["encoder.0.key"]
    assert kept is not encoder.memory["encoder.0.key"]
    np.testing.assert_array_equal(kept, encoder.memory["encoder.0.key"])
