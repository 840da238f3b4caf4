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
