"""bench.worker_messages: both ways read every message a front sent, and the report says what each
cost."""

from __future__ import annotations

import json

from bench import worker_messages


def test_both_ways_read_every_message_and_are_reported(capsys):
    assert (
        worker_messages.main(["--messages", "200", "--burst", "1,4", "--rounds", "1", "--json"])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert [r["burst"] for r in report["results"]] == [1, 4]
    for row in report["results"]:
        for way in ("connection", "inbox"):
            assert row[f"{way}_cpu_us"] > 0 and row[f"{way}_wall_us"] > 0
        assert row["cpu_ratio"] == row["connection_cpu_us"] / row["inbox_cpu_us"]
