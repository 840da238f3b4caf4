"""bench.train_sizes, run small: every size trains on the same batches and is reported."""

from __future__ import annotations

import json

import pytest

from bench import train_sizes
from models.shipped import SHIPPED_TRANSLATOR

TOKENIZER = SHIPPED_TRANSLATOR / "tokenizer.model"


@pytest.mark.slow
def test_every_size_is_timed_on_the_same_batches(tmp_path, translator_data, capsys):
    code = train_sizes.main(
        [
            "--data",
            str(translator_data),
            "--run",
            str(tmp_path),
            "--tokenizer",
            str(TOKENIZER),
            "--batches",
            "1",
            "--rounds",
            "1",
            "--pairs",
            "300",
            "--sizes",
            "base,wide",
            "--json",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    rows = {r["size"]: r for r in report["rows"]}
    assert set(rows) == {"base", "wide"} and rows["base"]["step_ratio"] == 1.0
    assert rows["base"]["parameters"] == 8_368_384 and rows["wide"]["fp16_mb"] > 30
    assert rows["wide"]["s_per_step"] > 0 and report["base_run"] is None  # no run there


def test_a_larger_size_is_read_against_the_base_run_at_its_steps(tmp_path):
    history = [
        {"step": 1000, "dev_bleu": 20.0},
        {"step": 2000, "dev_bleu": 25.0},
        {"step": 4000, "dev_bleu": 28.0},
    ]
    rows = train_sizes.budget_rows(history, {"base": 1.0, "wide": 1.6})
    assert rows["base"] == (4000, 28.0)
    assert rows["wide"] == (2500, 25.0)  # 4,000 steps' minutes buy 2,500 of its steps
