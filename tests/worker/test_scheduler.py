"""The continuous-batching scheduler in process, over both model kinds and both runtimes.

The scheduler, the continuous batch and the engines know no model kind: they follow the
model's interface (a growing key/value cache for the translator, a fixed (h, c) state started
by the encoder for the captioner). Requests that join a running batch at different steps,
with different searches, must decode exactly as they decode alone, on onnxruntime (host
arrays, and the device path of IO binding) and on the PyTorch reference engines; leaving rows
free their rows; limits hold.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import pytest
from helpers import RANDOM_SEEDS, drain

from service.runtime.batch import joined
from service.runtime.batching import source_batch
from service.runtime.captioning import caption_images, pixels
from service.runtime.decoding import DecodingOptions
from service.runtime.inference import CachedInference
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.tokenizer import Tokenizer
from service.runtime.translation import translate_ids
from service.worker.messages import Admitted, Failure, Job, Last, Partial, Result
from service.worker.scheduler import REST_SECONDS, Scheduler

OPTIONS = [
    DecodingOptions(max_length=24),
    DecodingOptions(beam_size=4, max_length=24),
    DecodingOptions(beam_size=3, num_hypotheses=2, max_length=12),
    DecodingOptions(temperature=0.8, top_k=20, num_hypotheses=2, seed=7, max_length=24),
]


@dataclass
class Kind:
    """One model kind's inputs as the scheduler takes them and its decode alone."""

    engine: object
    sources: list  # token id lists, or uint8 images

    def inputs(self, sources) -> dict[str, np.ndarray]:
        if isinstance(sources[0], list):
            src_ids, src_mask = source_batch(sources, 512)
            return {"src_ids": src_ids, "src_mask": src_mask}
        return {"pixels": pixels(np.stack(sources))}

    def alone(self, sources, options: DecodingOptions):
        if isinstance(sources[0], list):
            # a static engine's step runs over its buckets: a batch of its own, alone
            alone = joined if getattr(self.engine, "cache", None) == "static" else CachedInference
            return translate_ids(self.engine, sources, options, 512, alone)
        return caption_images(self.engine, np.stack(sources), options)

    def job(self, job_id: int, sources, options: DecodingOptions, **kw) -> Job:
        return Job(job_id, self.inputs(sources), options, **kw)


@pytest.fixture(scope="module")
def translator(exported_translator, test_sentences):
    version = exported_translator[0]
    return version, Tokenizer(version.tokenizer_file).encode_batch(test_sentences)


@pytest.fixture(scope="module")
def captioner(exported_captioner, captioner_data):
    from models.caption_data import read_scenes

    _, images = read_scenes(captioner_data, "test")
    return exported_captioner[0], list(images[::97][:12])


def _onnx(setup, io_binding: bool = False, cache: str | None = None) -> Kind:
    version, sources = setup
    engine = OnnxEngine(version, "fp32", io_binding=io_binding or None, cache=cache)
    return Kind(engine, sources)


def _torch(setup, checkpoint) -> Kind:
    from models.checkpoint import load_checkpoint
    from models.reference import reference_engine

    model, _ = load_checkpoint(checkpoint)
    return Kind(reference_engine(model), setup[1])


def _drain(scheduler: Scheduler, jobs: list[Job], every: int = 1) -> dict[int, object]:
    """Submits one job every `every` rounds; returns the final event of each job."""
    return drain(scheduler, jobs, every)[0]


ENGINES = [
    ("translator", "onnx"),
    ("translator", "onnx-device-path"),
    ("translator", "torch"),
    ("translator", "onnx-growing"),
    ("translator", "onnx-device-path-growing"),
    ("translator", "onnx-static"),
    ("captioner", "onnx"),
    ("captioner", "onnx-device-path"),
    ("captioner", "torch"),
]  # onnx: the translator's cache written in place, as served on the CPU


@pytest.mark.parametrize(("model", "runtime"), ENGINES, ids=["-".join(e) for e in ENGINES])
def test_requests_joining_a_running_batch_decode_as_they_do_alone(request, model, runtime):
    from helpers import SHIPPED_CAPTIONER, SHIPPED_TRANSLATOR

    setup = request.getfixturevalue(model)
    if runtime == "torch":
        kind = _torch(setup, SHIPPED_TRANSLATOR if model == "translator" else SHIPPED_CAPTIONER)
    else:
        cache = runtime.rsplit("-", 1)[1] if runtime.endswith(("-growing", "-static")) else None
        kind = _onnx(setup, runtime.startswith("onnx-device-path"), cache)
        default = "in_place" if model == "translator" else "none"  # an LSTM has no cache
        assert kind.engine.cache == (cache or default)
    sources = kind.sources
    jobs = [kind.job(i, [s], OPTIONS[i % len(OPTIONS)]) for i, s in enumerate(sources)]
    jobs.append(kind.job(len(jobs), sources[:3], OPTIONS[1]))  # three inputs in one request
    scheduler = Scheduler(kind.engine, max_rows=24)
    done = _drain(scheduler, jobs, every=3)
    assert max(scheduler.stats.step_rows) > 8, "requests must have shared steps"
    for job in jobs:
        inputs = sources[:3] if job.inputs == 3 else [sources[job.id]]
        alone = kind.alone(inputs, job.options)
        event = done[job.id]
        assert isinstance(event, Result), event
        got = [[h.tokens for h in nbest] for nbest in event.results]
        assert got == [[h.tokens for h in nbest] for nbest in alone], job.id
    assert scheduler.batch.rows == 0 and scheduler.batch.state is None  # everything freed


RANDOM_TRAFFIC = {  # runtime: (model, device path, cache, the scheduler's threads and steps
    # ahead, OPTIONS drawn from, share of jobs of two inputs); None: greedy lanes of one input,
    # each with a step limit drawn, so that they end between two looks (a search or a sample
    # steps one step at a time)
    "host-in-place": ("translator", False, None, {}, [0, 0, 0, 1, 2, 3], 0.2),
    "static-steps-ahead": ("translator", True, "static", {"steps_ahead": 4}, None, 0.0),
    # the ways the GPU's default may take: the encoder and the greedy steps on their threads
    "static-threads": (
        "translator",
        True,
        "static",
        {"encoder_thread": True, "step_thread": True},
        # one-row greedy lanes mostly: the step thread steps where no search runs (a beam,
        # a sample, a job of two inputs)
        [0, 0, 0, 0, 0, 1],
        0.05,
    ),
    "captioner-encoder-thread": ("captioner", True, None, {"encoder_thread": True}, [0, 1, 3], 0.2),
}


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
@pytest.mark.parametrize("runtime", list(RANDOM_TRAFFIC))
def test_random_traffic_with_cancels_decodes_as_alone(request, runtime, seed):
    """Jobs drawn at random arriving in bursts and cancelled now and then: greedy rows,
    beams, samples, one or two inputs over the CPU's host rows; greedy lanes over the
    static step with steps run ahead (the GPU's way, here uncaptured); the static step with
    the encoder and the greedy steps on their threads; the captioner with its encoder on its
    thread: each cancelled job ends Cancelled or with its result, every other one decodes as
    it does alone, and the batch is empty at the end."""
    model, device_path, cache, threads, drawn, two = RANDOM_TRAFFIC[runtime]
    kind = _onnx(request.getfixturevalue(model), device_path, cache)
    engine = kind.engine
    if threads.get("encoder_thread"):  # its runs last a few steps, as a GPU's may
        engine = _SlowEncoder(engine, 0.005)
    scheduler = Scheduler(engine, max_rows=16, ahead_wait=60.0, **threads)
    rng = np.random.default_rng(seed)
    inputs, jobs = {}, []
    for i in range(16):
        picked = rng.choice(len(kind.sources), size=1 + (rng.random() < two), replace=False)
        inputs[i] = [kind.sources[j] for j in picked]
        lane = DecodingOptions(max_length=int(rng.integers(3, 30)))
        jobs.append(kind.job(i, inputs[i], lane if drawn is None else OPTIONS[rng.choice(drawn)]))
    pending, done, cancelled, rounds, beside = list(jobs), {}, set(), 0, 0
    admitted, before_join = set(), None  # before_join: the job cancelled before it joined
    while (pending or scheduler.busy) and rounds < 2000:
        # a job in since a round and not admitted: waiting, or its encoder run beside the steps
        held = [j.id for j in jobs if j not in pending and j.id not in done.keys() | admitted]
        for _ in range(rng.integers(0, 3)):
            if pending:
                scheduler.submit(pending.pop(0))
        running = [j.id for j in jobs if j not in pending and j.id not in done]
        # one cancelled as soon as it is in, one before its rows join, others now and then
        if running and (rng.random() < 0.05 or (not cancelled and running[-1] >= 5)):
            victim = running[-1] if not cancelled else int(rng.choice(running))
            scheduler.cancel(victim)
            cancelled.add(victim)
        elif held and before_join is None and len(scheduler.row_owner):
            before_join = held[-1]
            scheduler.cancel(before_join)
            cancelled.add(before_join)
        scheduler.iterate()
        rounds += 1
        beside += scheduler._launched is not None  # a step left running on the step thread
        admitted.update(e.job_id for e in scheduler.events if isinstance(e, Admitted))
        done.update({e.job_id: e for e in scheduler.events if isinstance(e, Last)})
        scheduler.events.clear()
    scheduler.close()
    assert set(done) == set(inputs) and cancelled
    # encoded beside the steps, a job is held a round or more before its rows join
    assert before_join is not None or not threads.get("encoder_thread")
    assert before_join is None or isinstance(done[before_join], Failure)  # it never ran
    for job in jobs:
        event = done[job.id]
        if isinstance(event, Failure):
            assert job.id in cancelled and event.kind == "Cancelled", event
            continue
        alone = kind.alone(inputs[job.id], job.options)
        got = [[h.tokens for h in nbest] for nbest in event.results]
        assert got == [[h.tokens for h in nbest] for nbest in alone], job.id
    assert scheduler.batch.rows == 0
    steps = len(scheduler.stats.step_seconds)
    ahead = threads.get("steps_ahead", 1)
    assert steps > rounds if ahead > 1 else steps <= rounds  # runs of several steps, or none
    assert (beside > 0) == threads.get("step_thread", False)


def test_both_kinds_share_one_worker_loop_without_mixing(translator, captioner):
    """Two schedulers, as a worker runs one per model: interleaved rounds, each decodes as
    alone (the state of one kind never reaches the other)."""
    kinds = [_onnx(translator), _onnx(captioner)]
    schedulers = [Scheduler(k.engine, max_rows=16) for k in kinds]
    jobs = [[k.job(i, [s], OPTIONS[i % 2]) for i, s in enumerate(k.sources[:6])] for k in kinds]
    done: list[dict] = [{}, {}]
    while any(jobs) or any(s.busy for s in schedulers):
        for i, scheduler in enumerate(schedulers):
            if jobs[i]:
                scheduler.submit(jobs[i].pop(0))
            scheduler.iterate()
            done[i].update({e.job_id: e for e in scheduler.events if isinstance(e, Result)})
            scheduler.events.clear()
    for kind, results in zip(kinds, done, strict=True):
        assert len(results) == 6
        for job_id, event in results.items():
            alone = kind.alone([kind.sources[job_id]], OPTIONS[job_id % 2])
            assert event.results[0][0].tokens == alone[0][0].tokens


def test_a_fixed_state_joins_into_a_dead_slot_with_its_own_initial_state(captioner):
    """A captioner row joining a running batch takes a freed slot, its own encoder state
    written in place (no rebuild), and decodes as alone."""
    kind = _onnx(captioner)
    scheduler = Scheduler(kind.engine, max_rows=8)
    short = replace(OPTIONS[0], max_length=3)
    for job_id, options in ((0, short), (1, OPTIONS[0]), (3, OPTIONS[0])):
        scheduler.submit(kind.job(job_id, [kind.sources[job_id]], options))
    for _ in range(3):
        scheduler.iterate()
    assert scheduler.batch.rows == 2 and scheduler.batch.slots == 3  # job 0 left a dead slot
    rebuilds, events = scheduler.batch.rebuilds, list(scheduler.events)
    scheduler.events.clear()
    scheduler.submit(kind.job(2, [kind.sources[2]], OPTIONS[0]))
    scheduler.iterate()
    assert scheduler.batch.rebuilds == rebuilds and scheduler.batch.slots == 3
    scheduler.events = events + scheduler.events
    done = _drain(scheduler, [])
    for job_id in (1, 2, 3):
        alone = kind.alone([kind.sources[job_id]], OPTIONS[0])
        assert done[job_id].results[0][0].tokens == alone[0][0].tokens


def test_request_level_batching_waits_for_the_batch_to_end(translator):
    kind = _onnx(translator)
    scheduler = Scheduler(kind.engine, max_rows=64, batching="request", window=0.0)
    jobs = [kind.job(i, [s], OPTIONS[0]) for i, s in enumerate(kind.sources[:6])]
    admitted_at_step = {}
    pending, steps = list(jobs), 0
    while pending or scheduler.busy:
        if pending:
            scheduler.submit(pending.pop(0))
        scheduler.iterate()
        steps += 1
        for event in scheduler.events:
            if isinstance(event, Admitted):
                admitted_at_step[event.job_id] = steps
        scheduler.events.clear()
    # the first request ran alone to its end before the others were admitted together
    assert admitted_at_step[0] == 1
    assert len({admitted_at_step[i] for i in range(1, 6)}) == 1
    assert admitted_at_step[1] > 3


def test_cancel_and_deadline_free_rows_at_the_next_step(translator):
    kind = _onnx(translator)
    now = [100.0]
    scheduler = Scheduler(kind.engine, max_rows=16, clock=lambda: now[0])
    long = DecodingOptions(temperature=5.0, max_length=400, seed=1)  # runs to max_length
    sources = kind.sources
    scheduler.submit(kind.job(1, [sources[0]], long))
    scheduler.submit(kind.job(2, [sources[1]], long, deadline=100.5))
    scheduler.submit(kind.job(3, [sources[2]], DecodingOptions(beam_size=4)))
    for _ in range(3):
        scheduler.iterate()
    assert scheduler.batch.rows == 6
    scheduler.cancel(1)
    now[0] = 101.0
    scheduler.iterate()
    assert scheduler.batch.rows == 4  # only the beam search is left
    errors = {e.job_id: e.kind for e in scheduler.events if isinstance(e, Failure)}
    assert errors == {1: "Cancelled", 2: "DeadlineExceeded"}


def test_a_finished_job_is_let_go_before_its_deadline(translator):
    """Jobs with a distant deadline (a client's generous one) that finish are not held until
    it passes: neither their inputs (a captioner's images) nor their searches stay."""
    import gc
    import weakref

    kind = _onnx(translator)
    scheduler = Scheduler(kind.engine, max_rows=8, clock=lambda: 0.0)
    options = [DecodingOptions(max_length=4), DecodingOptions(beam_size=2, max_length=4)]
    jobs = [kind.job(i, [s], options[i % 2], deadline=600.0) for i, s in enumerate(kind.sources)]
    inputs = [weakref.ref(job.encoder_inputs["src_ids"]) for job in jobs]
    done = _drain(scheduler, jobs)
    assert all(isinstance(e, Result) for e in done.values()) and len(done) == len(jobs)
    del jobs
    gc.collect()
    assert [i for i, ref in enumerate(inputs) if ref() is not None] == []  # none held


def test_a_job_whose_search_raises_fails_alone_and_the_rest_decode_as_alone(translator):
    """A fault in one job's search (here a temperature below the one the front accepts, so
    that every score underflows and the draw meets NaN) fails that job with Internal; its
    rows leave, and the jobs beside it, greedy, beam and sampled, decode as alone."""
    kind = _onnx(translator)
    scheduler = Scheduler(kind.engine, max_rows=32)
    sources = kind.sources[:4]
    poison = DecodingOptions(temperature=1e-40, seed=1, max_length=24)  # never validated here
    jobs = [kind.job(0, [sources[0]], poison)]
    jobs += [kind.job(i + 1, [sources[i]], OPTIONS[i]) for i in range(len(OPTIONS))]
    done = _drain(scheduler, jobs)
    assert isinstance(done[0], Failure) and done[0].kind == "Internal"
    assert "probabilities contain NaN" in done[0].message
    for i, options in enumerate(OPTIONS):
        (expected,) = kind.alone([sources[i]], options)
        got = done[i + 1].results[0]
        assert [h.tokens for h in got] == [h.tokens for h in expected]
    assert scheduler.batch.rows == 0 and not scheduler.busy


def test_waiting_requests_enter_only_when_rows_are_free(captioner):
    kind = _onnx(captioner)
    scheduler = Scheduler(kind.engine, max_rows=8)
    sources = kind.sources
    scheduler.submit(kind.job(1, [sources[0]], DecodingOptions(beam_size=8)))
    scheduler.submit(kind.job(2, [sources[1]], DecodingOptions()))
    scheduler.iterate()
    assert [j.id for j in scheduler.running] == [1] and len(scheduler.waiting) == 1
    scheduler.submit(kind.job(3, sources[:3], DecodingOptions(beam_size=4)))  # never fits
    errors = [e for e in scheduler.events if isinstance(e, Failure)]
    assert errors and errors[0].job_id == 3 and "12 batch rows" in errors[0].message


@pytest.mark.parametrize(
    ("model", "cache"), [("translator", "growing"), ("translator", "in_place"), ("captioner", None)]
)
def test_a_batch_that_never_empties_stays_bounded(request, model, cache):
    """Requests keep arriving; compaction keeps the cache near the longest live row (the
    translator's key/value cache, growing or written in place; the captioner has no growing
    state, only its mask)."""
    kind = _onnx(request.getfixturevalue(model), cache=cache)
    scheduler = Scheduler(kind.engine, max_rows=16)
    options = DecodingOptions(max_length=20)
    longest = 0
    for i in range(60):
        scheduler.submit(kind.job(i, [kind.sources[i % len(kind.sources)]], options))
        scheduler.iterate()
        scheduler.iterate()
        longest = max(longest, scheduler.batch.cache_length)
        scheduler.events.clear()
    assert longest <= 20 + 20 // 8 + 8  # without compaction it would pass 100
    assert np.all(scheduler.batch.lengths <= 20)
    if model == "translator":
        assert longest >= 20
        buffer = scheduler.batch.state["past_key_values.0.key"]
        if cache == "growing":
            assert buffer.shape[2] == scheduler.batch.cache_length
        else:  # every row from position 0: as long as the longest row needs, at most twice
            assert 20 <= buffer.shape[2] <= 2 * 32


def test_an_in_place_cache_grows_with_its_longest_row_and_is_cut_when_it_leaves(translator):
    """The buffer grows (doubling) as a row reaches its end; once that row has left, a rebuild
    cuts it to twice what the live rows hold, and the row left decodes on as it does alone."""
    from service.runtime.batch import ContinuousBatch
    from service.runtime.inference import CachedInference

    engine = OnnxEngine(translator[0], "fp32")
    assert engine.cache == "in_place"
    sources = translator[1][:2]
    encoder = engine.encode(*source_batch(sources, 512))
    batch = ContinuousBatch(engine)
    batch.join(encoder, np.array([0]))
    token = np.array([[engine.special_tokens.bos]])
    for _ in range(100):
        batch.step(token)
        token = np.array([[17]])
    capacity = batch.state["past_key_values.0.key"].shape[2]
    assert capacity >= 101
    batch.join(encoder, np.array([1]))  # no dead slot: one added after the last, in place
    assert batch.rebuilds == 0 and batch.slots == 2
    alone = CachedInference(engine, engine.encode(*source_batch(sources[1:], 512)), 1)
    tokens = [engine.special_tokens.bos, 5, 9, 11, 13, 21, 40, 7, 8]
    for i, new in enumerate(tokens):
        if i == 5:
            batch.reorder(np.array([1]))  # the long row leaves
        feed = np.array([[17], [new]]) if i < 5 else np.array([[new]])
        logits, _ = batch.step(feed)
        expected, _ = alone.step(np.array([[new]]))
        np.testing.assert_allclose(logits[-1], expected[0], atol=1e-4)
        if i == 5:  # the step after the leave rebuilt: cut to twice the 6 positions held
            assert batch.rebuilds == 1
            assert batch.state["past_key_values.0.key"].shape[2] == 2 * (5 + 1)
    assert batch.state["past_key_values.0.key"].shape[2] >= len(tokens)


def test_an_idle_scheduler_lets_its_host_batch_memory_go_after_a_rest(translator):
    """A host batch keeps the memory its rows were in for the next rows (rows.arenas); a
    worker idle REST_SECONDS lets it go, once, and decodes as before afterwards."""
    now = [0.0]
    kind = _onnx(translator)
    scheduler = Scheduler(kind.engine, clock=lambda: now[0])
    arenas = scheduler.batch.store.arenas
    jobs = [kind.job(i, [kind.sources[i]], DecodingOptions(max_length=24)) for i in range(3)]
    first = _drain(scheduler, jobs)
    assert not scheduler.busy and scheduler.batch.rows == 0 and arenas.buffers
    scheduler.rest()  # the first look while idle: the rest starts
    now[0] += REST_SECONDS - 0.5
    scheduler.rest()
    assert scheduler.batch.store.arenas is arenas  # not yet
    now[0] += 0.5
    scheduler.rest()
    rested = scheduler.batch.store.arenas
    assert rested is not arenas and not rested.buffers
    now[0] += 2 * REST_SECONDS
    scheduler.rest()  # once a rest
    assert scheduler.batch.store.arenas is rested
    again = _drain(scheduler, [replace(job, id=job.id + 3) for job in jobs])

    def tokens(results, offset):
        return [[h.tokens for h in results[i + offset].results[0]] for i in range(3)]

    assert tokens(again, 3) == tokens(first, 0) and all(tokens(first, 0))
    assert rested.buffers  # the next rows' memory, kept again


class _SlowEncoder:
    """An engine whose encoder takes `seconds` longer (delegating everything else), so that
    an admission's encoder on the encoder thread is still running over several steps."""

    def __init__(self, engine, seconds: float):
        self._engine, self._seconds = engine, seconds

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def encode(self, *inputs, **named):
        import time

        time.sleep(self._seconds)
        return self._engine.encode(*inputs, **named)


STORES = [
    ("translator", "onnx", None),
    ("translator", "onnx-device-path", None),
    ("translator", "onnx-device-path", "growing"),
    ("translator", "onnx-device-path", "static"),
    ("captioner", "onnx", None),
]


def _store(request, model: str, runtime: str, cache) -> Kind:
    return _onnx(request.getfixturevalue(model), runtime == "onnx-device-path", cache)


@pytest.mark.parametrize(("model", "runtime", "cache"), STORES)
def test_rows_joining_while_another_admission_is_encoded_decode_as_alone(
    request, model, runtime, cache
):
    """The encoder on its own thread: rows step while later admissions are encoded, and the
    admitted rows join at a later step boundary; every job (greedy rows, beams, samples, a
    stream) decodes as alone, and a stream's partials add up to its result."""
    kind = _store(request, model, runtime, cache)
    engine = kind.engine
    scheduler = Scheduler(_SlowEncoder(engine, 0.02), max_rows=24, encoder_thread=True)
    store, placed = scheduler.batch.store, []
    if cache == "static":  # the encoder thread writes the memory into reserved slots
        place = store.place
        store.place = lambda reservation, rows: (place(reservation, rows), placed.append(1))
    sources = kind.sources[:9]
    jobs = [
        kind.job(i, [s], OPTIONS[i % len(OPTIONS)] if i % 3 else OPTIONS[0], stream=i == 3)
        for i, s in enumerate(sources)
    ]
    pending, done, partial, overlapped = list(jobs), {}, [], 0
    while pending or scheduler.busy:
        if pending:
            scheduler.submit(pending.pop(0))
        encoding = scheduler._admission is not None
        rows = scheduler.rows
        scheduler.iterate()
        overlapped += encoding and rows > 0 and scheduler._admission is not None
        for event in scheduler.events:
            if isinstance(event, Last):
                done[event.job_id] = event
            elif isinstance(event, Partial):
                partial.append(event)
        scheduler.events.clear()
    scheduler.close()
    assert overlapped > 0, "no step ran while an admission was encoded"
    assert bool(placed) == (cache == "static")
    for job in jobs:
        alone = kind.alone([sources[job.id]], job.options)
        assert isinstance(done[job.id], Result), done[job.id]
        got = [[h.tokens for h in nbest] for nbest in done[job.id].results]
        assert got == [[h.tokens for h in nbest] for nbest in alone], job.id
    streamed: list[int] = []
    for event in partial:
        assert event.job_id == 3
        streamed = streamed[: event.kept] + event.new
    assert streamed == done[3].results[0][0].tokens[: len(streamed)]
    assert len(streamed) >= len(done[3].results[0][0].tokens) - 1
    assert scheduler.batch.rows == 0 and all(o is None for o in scheduler.owners)


@pytest.mark.parametrize("step_thread", [False, True], ids=["step-inline", "step-thread"])
@pytest.mark.parametrize(("model", "runtime", "cache"), STORES)
def test_a_cancelled_or_expired_job_leaves_no_row_behind(
    request, model, runtime, cache, step_thread
):
    """Cancelled while running (a greedy row, a beam search), cancelled while its encoder
    runs, expired while running: each fails once and its rows leave at once; the others
    decode on as alone."""
    kind = _store(request, model, runtime, cache)
    now = [0.0]
    scheduler = Scheduler(
        _SlowEncoder(kind.engine, 0.01),
        max_rows=16,
        clock=lambda: now[0],
        encoder_thread=True,
        step_thread=step_thread,
    )
    long = DecodingOptions(max_length=30)
    s = kind.sources
    first = [
        kind.job(0, [s[0]], long),
        kind.job(1, [s[1]], OPTIONS[1]),
        kind.job(2, [s[2]], long, deadline=5.0),
        kind.job(3, [s[3]], OPTIONS[0]),
    ]
    for job in first:
        scheduler.submit(job)
    scheduler.iterate()  # admitted and joined (nothing ran yet), one step
    assert scheduler.rows == 1 + 4 + 1 + 1
    scheduler.submit(kind.job(4, [s[4]], long))
    scheduler.iterate()  # job 4's encoder runs beside this step
    scheduler.cancel(0)
    scheduler.cancel(1)
    scheduler.cancel(4)
    now[0] = 6.0
    scheduler.iterate()
    failures = {e.job_id: e.kind for e in scheduler.events if isinstance(e, Failure)}
    assert failures == {0: "Cancelled", 1: "Cancelled", 2: "DeadlineExceeded", 4: "Cancelled"}
    assert [r.id for r in scheduler.running] == [3] and scheduler.rows == 1
    assert scheduler.batch.rows == len(scheduler.row_owner) == len(scheduler.next_tokens)
    scheduler.events.clear()
    done = _drain(scheduler, [])
    assert list(done) == [3] and isinstance(done[3], Result)  # each failed job failed once
    alone = kind.alone([s[3]], OPTIONS[0])
    assert done[3].results[0][0].tokens == alone[0][0].tokens
    assert scheduler.batch.rows == 0 and sorted(scheduler._free) == list(range(32))
    scheduler.close()


@pytest.mark.parametrize("step_thread", [False, True], ids=["step-inline", "step-thread"])
def test_a_scheduler_stopping_mid_admission_answers_every_job(translator, step_thread):
    """A stop while an admission's encoder runs (and, on the step thread, a step): both are
    waited for, and every job held (running, encoding, waiting) fails once with
    Unavailable, or is answered where its last step ended it; none is lost."""
    kind = _onnx(translator)
    engine = _SlowEncoder(kind.engine, 0.05)
    scheduler = Scheduler(engine, max_rows=4, encoder_thread=True, step_thread=step_thread)
    jobs = [
        kind.job(i, [s], DecodingOptions(max_length=50)) for i, s in enumerate(kind.sources[:7])
    ]
    scheduler.submit(jobs[0])
    scheduler.iterate()  # job 0 runs
    for job in jobs[1:]:
        scheduler.submit(job)
    scheduler.iterate()  # jobs 1-3 encoded beside the step, 4-6 wait for rows
    assert scheduler._admission is not None and len(scheduler.waiting) == 3
    scheduler.close()
    ended = [e for e in scheduler.events if isinstance(e, Last)]
    assert sorted(e.job_id for e in ended) == list(range(7))
    assert all(e.kind == "Unavailable" for e in ended if isinstance(e, Failure))
    assert scheduler.rows == 0 and not scheduler.busy


@pytest.mark.parametrize(("model", "runtime", "cache"), STORES)
def test_steps_on_the_step_thread_decode_as_alone(request, model, runtime, cache):
    """Greedy rows stepped on the step thread while the scheduler finishes the jobs the last
    step ended and builds its partials: jobs joining every round, ending at scattered
    steps, streamed or not, decode as alone; a beam search among them steps inline and the
    thread takes over again once it ends; a stream's partials add up to its result."""
    kind = _store(request, model, runtime, cache)
    # the step thread steps greedy lanes, which a version with an output grammar has none of
    # (every row of it is a controlled row): the captioner's steps here are without it
    kind.engine.grammar = None
    scheduler = Scheduler(kind.engine, max_rows=12, encoder_thread=True, step_thread=True)
    sources = kind.sources[:10]
    beam = 6
    jobs = [
        kind.job(
            i,
            [s],
            OPTIONS[1] if i == beam else DecodingOptions(max_length=6 + 3 * (i % 4)),
            stream=i in (2, 5),
        )
        for i, s in enumerate(sources)
    ]
    pending, done, partial, beside = list(jobs), {}, {2: [], 5: []}, 0
    while pending or scheduler.busy:
        if pending:
            scheduler.submit(pending.pop(0))
        scheduler.iterate()
        beside += scheduler._launched is not None  # a step left running on the thread
        for event in scheduler.events:
            if isinstance(event, Last):
                done[event.job_id] = event
            elif isinstance(event, Partial):
                partial[event.job_id].append(event)
        scheduler.events.clear()
    scheduler.close()
    assert beside > 5 and scheduler.beside_seconds > 0, "no step ran on the step thread"
    for job in jobs:
        alone = kind.alone([sources[job.id]], job.options)
        assert isinstance(done[job.id], Result), done[job.id]
        got = [[h.tokens for h in nbest] for nbest in done[job.id].results]
        assert got == [[h.tokens for h in nbest] for nbest in alone], job.id
    for job_id, events in partial.items():
        streamed: list[int] = []
        for event in events:
            streamed = streamed[: event.kept] + event.new
        tokens = done[job_id].results[0][0].tokens  # the token of a last step: its result's
        assert streamed == tokens[: len(streamed)] and len(streamed) >= len(tokens) - 1
    assert scheduler.batch.rows == 0 and len(scheduler._free) == len(scheduler.owners)


class _GlobalCapture:
    """CUDA's global capture mode as onnxruntime meets it: the first run of a binding on a
    thread records its graph there (onnxruntime keeps graphs per thread), and any other use
    of the device while it records fails both (here: noted as a clash)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.users, self.capturing = 0, False
        self.recorded: dict[tuple, set[threading.Thread]] = {}
        self.captures: list[tuple[tuple, threading.Thread]] = []
        self.clashes: list[str] = []

    def use(self, what: str, call):
        with self._lock:
            if self.capturing:
                self.clashes.append(f"{what} while a graph was recorded")
            self.users += 1
        try:
            return call()
        finally:
            with self._lock:
                self.users -= 1

    def step(self, key: tuple, run) -> None:
        import time

        thread = threading.current_thread()
        if thread in self.recorded.setdefault(key, set()):
            return self.use("a step", run)
        with self._lock:
            if self.users or self.capturing:
                self.clashes.append("a graph recorded beside another run")
            self.capturing = True
        try:
            time.sleep(0.005)  # a capture is longer than a replay
            run()
        finally:
            with self._lock:
                self.capturing = False
        self.recorded[key].add(thread)
        self.captures.append((key, thread))


class _ModelledEncoder(_SlowEncoder):
    def __init__(self, engine, seconds: float, device: _GlobalCapture):
        super().__init__(engine, seconds)
        self._device = device

    def encode(self, *inputs, **named):
        encode = super().encode
        return self._device.use("an encoder run", lambda: encode(*inputs, **named))


def _recorded_steps(scheduler: Scheduler, device: _GlobalCapture) -> None:
    """The scheduler's static store's steps run as `device` runs a captured binding, each
    (bucket, form) a binding of its own with its Recording."""
    from service.runtime.tensors import Launch, Recording

    store, recordings = scheduler.batch.store, {}
    launch = store.launch

    def recorded(table, tokens, positions, attention, search):
        made = launch(table, tokens, positions, attention, search)
        key = (id(store), id(store.bucket), attention)
        recording = recordings.setdefault(key, Recording())
        return Launch(partial(device.step, key, made.run), made.output, recording)

    store.launch = recorded


@pytest.mark.parametrize("step_thread", [False, True], ids=["inline", "step-thread"])
def test_a_step_that_records_its_graph_runs_alone_once_on_the_thread_that_replays_it(
    translator, step_thread
):
    """A static step's first run of a binding on a thread records its CUDA graph there, and
    nothing else of the process may use the device meanwhile. Two schedulers in one worker
    (two models), each with its encoder on a thread, then a third after the first closed (a
    served scheduler after the start-up check): no recording beside another run, whether the
    steps run inline or on the step thread; each binding recorded once, on the thread that
    runs its steps; every job decodes as alone."""
    kind, device = _onnx(translator, True, "static"), _GlobalCapture()
    engine = _ModelledEncoder(kind.engine, 0.02, device)

    def scheduler():
        made = Scheduler(engine, max_rows=12, encoder_thread=True, step_thread=step_thread)
        _recorded_steps(made, device)
        return made

    def jobs(first: int):
        return [
            kind.job(first + i, [s], DecodingOptions(max_length=4 + 3 * (i % 5)))
            for i, s in enumerate(kind.sources[:8])
        ]

    done, pending = {}, {}
    for made in (scheduler(), scheduler()):
        pending[made] = jobs(100 * len(pending))
    while any(pending.values()) or any(s.busy for s in pending):  # one worker's loop
        for made, waiting in pending.items():
            if waiting:
                made.submit(waiting.pop(0))
            made.iterate()
            done.update((e.job_id, e) for e in made.events if isinstance(e, Last))
            made.events.clear()
    for made in pending:
        made.close()
    later = scheduler()
    done.update(_drain(later, jobs(200)))
    later.close()
    assert device.clashes == []
    assert len(device.captures) >= 6, "too few steps recorded their graphs"
    keys = [key for key, _ in device.captures]
    assert len(keys) == len(set(keys)), "a binding recorded twice"
    threads = {thread.name for _, thread in device.captures}
    assert threads == ({"step"} if step_thread else {threading.main_thread().name})
    assert len(done) == 24
    for job_id, event in done.items():
        i = job_id % 100
        alone = kind.alone([kind.sources[i]], DecodingOptions(max_length=4 + 3 * (i % 5)))
        assert event.results[0][0].tokens == alone[0][0].tokens, job_id
