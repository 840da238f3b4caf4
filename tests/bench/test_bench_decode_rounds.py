"""bench.decode's rounds: every engine runs each case in a rotating order, and a case that no
engine runs is left without samples rather than stopping the run."""

from __future__ import annotations

from types import SimpleNamespace

from bench.decode import Translation, _rounds


class _Worker:
    def __init__(self, name: str, calls: list):
        self.name, self.calls = name, calls

    def call(self, method, ids, pieces, beam, length):
        self.calls.append((self.name, len(ids), beam, length))
        return {"tokens": len(ids) * length}


def _task(batches: list[int]) -> Translation:
    args = SimpleNamespace(batches=batches, lengths=[4], uncached_max_batch=1)
    return Translation(args, ([[5, 6]] * max(batches), [["a", "b"]] * max(batches)))


def test_a_case_no_engine_runs_has_no_samples_and_the_others_run():
    calls: list = []
    workers = {"torch-uncached": _Worker("torch-uncached", calls)}  # batch 1 only
    samples = _rounds(workers, range(2), _task([1, 2]))
    assert {case for _, case in samples} == {(1, 1, 4), (1, 4, 4)}
    assert all(len(series) == 2 for series in samples.values())
    assert {batch for _, batch, _, _ in calls} == {1}


def test_no_engine_at_all_gives_no_samples():
    assert _rounds({}, range(-1, 1), _task([1])) == {}


def test_every_engine_runs_each_case_from_the_round_s_own_first():
    calls: list = []
    workers = {name: _Worker(name, calls) for name in ("onnx-fp32", "ct2-float32")}
    _rounds(workers, range(2), _task([1]))
    firsts = [calls[0][0], calls[4][0]]  # each round: 2 cases (beams) x 2 engines
    assert firsts == ["onnx-fp32", "ct2-float32"]
