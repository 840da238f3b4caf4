"""bench.scheduler_step: the scheduler's own work a step over a batch with no model."""

from __future__ import annotations

import re

from bench import scheduler_step


def test_the_scheduler_steps_greedy_beam_and_mixed_jobs_over_the_stand_in_batch(capsys):
    """Every job is admitted and stepped (the script raises where a row is missing)."""
    runs = (["--jobs", "16"], ["--jobs", "4", "--beam", "3"], ["--jobs", "8", "--beam-jobs", "2"])
    for argv in runs:
        assert scheduler_step.main([*argv, "--steps", "10", "--rounds", "1"]) == 0
        line = capsys.readouterr().out.strip()
        ms, us = re.fullmatch(r".*: ([0-9.]+) ms per step, ([0-9.]+) us per job", line).groups()
        assert float(ms) > 0 and float(us) > 0, line


def test_jobs_that_end_are_replaced_and_each_one_s_cost_is_counted(capsys):
    """--ending: rows kept full by jobs of up to N tokens; as many jobs end a step as the
    rows over the jobs' mean length."""
    step, job = scheduler_step.per_job_seconds(rows=16, steps=60, max_length=8)
    assert step > 0 and job > 0
    ended = step / job  # jobs of 4 to 8 tokens, 6 on average: 16 rows end 2.67 a step
    assert 16 / 8 <= ended <= 16 / 4, ended
    argv = ["--jobs", "16", "--ending", "8", "--steps", "60", "--rounds", "1"]
    assert scheduler_step.main(argv) == 0
    line = capsys.readouterr().out.strip()
    shape = r"16 rows, jobs of 4-8 tokens: [0-9.]+ ms per step, [0-9.]+ us per finished job "
    assert re.fullmatch(shape + r"\([0-9.]+ jobs a step\)", line), line
