"""bench.front_work: every request kind is measured, in process and against a baseline tree
(here this checkout again, so the ratio is near one)."""

from __future__ import annotations

import json

from bench import front_work


def test_every_kind_is_measured_and_the_baseline_compared(translator_repository, capsys):
    flags = ["--calls", "20", "--rounds", "1", "--repository", str(translator_repository)]
    assert front_work.main([*flags, "--baseline", str(front_work.ROOT), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for tree in ("this", "baseline"):
        assert set(report["us_a_call"][tree]) == set(front_work.REQUESTS)
        assert all(us > 0 for us in report["us_a_call"][tree].values())
    ratios = report["baseline_over_this"]
    assert all(0.2 < ratio < 5 for ratio in ratios.values()), ratios
