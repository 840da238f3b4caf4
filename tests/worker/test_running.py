"""The scheduler's state of one request: its status and why it left, the rows it takes, and
which jobs decode as one greedy row (with their step limit)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from service.runtime.controls import InputControls
from service.runtime.decoding import DecodingOptions
from service.worker.messages import Job
from service.worker.running import FinishReason, Request, RequestStatus


def _job(inputs: int = 1, **options) -> Job:
    ids = np.full((inputs, 4), 5, dtype=np.int64)
    return Job(7, {"src_ids": ids, "src_mask": np.ones_like(ids)}, DecodingOptions(**options))


def test_only_finished_and_aborted_have_ended():
    assert {s for s in RequestStatus if s.ended} == {RequestStatus.FINISHED, RequestStatus.ABORTED}


def test_a_request_starts_waiting_with_the_rows_of_its_job_and_ends_with_a_reason():
    request = Request(_job(inputs=3, beam_size=4), queued_at=1.5)
    assert (request.status, request.finish_reason, request.owner) == (
        RequestStatus.WAITING,
        None,
        -1,
    )
    assert request.id == 7 and request.rows == 12  # 3 inputs x 4 beams
    sampled = Request(_job(inputs=2, temperature=0.7, num_hypotheses=3, beam_size=1), 0.0)
    assert sampled.rows == 6  # a row per sample
    request.owner, request.status = 4, RequestStatus.RUNNING
    request.end(RequestStatus.ABORTED, FinishReason.CANCELLED)
    assert request.status.ended and request.finish_reason is FinishReason.CANCELLED
    assert request.owner == -1  # its rows given back
    assert request.streamed == [] and sampled.streamed is not request.streamed


def test_a_single_plain_greedy_input_is_a_greedy_row():
    assert Request.is_greedy_row(_job())
    assert Request.is_greedy_row(_job(max_length_ratio=0.0))  # a step limit is no control


@pytest.mark.parametrize(
    "job",
    [
        _job(inputs=2),
        _job(beam_size=2),
        _job(temperature=0.5, seed=1),
        replace(_job(), keep_alignment=True),
        _job(min_length=3),
        _job(no_repeat_ngram_size=2),
        _job(repetition_penalty=1.2),
        replace(_job(), controls=InputControls(prefixes=((9, 10),))),
    ],
    ids=["inputs", "beam", "sampling", "alignment", "min", "ngram", "penalty", "prefix"],
)
def test_anything_that_needs_a_search_is_not_a_greedy_row(job):
    assert not Request.is_greedy_row(job)


def test_an_empty_prefix_and_an_input_limit_leave_a_greedy_row():
    job = replace(_job(), controls=InputControls(max_lengths=(6,), prefixes=((),)))
    assert Request.is_greedy_row(job)
    assert Request.max_length(job) == 6


def test_the_step_limit_is_the_input_s_own_else_the_options():
    assert Request.max_length(_job(max_length=40)) == 40
    prefixed = replace(_job(max_length=40), controls=InputControls(prefixes=((3,),)))
    assert Request.max_length(prefixed) == 40
    limited = replace(_job(max_length=40), controls=InputControls(max_lengths=(11,)))
    assert Request.max_length(limited) == 11
