"""The translator's torch-side commands: decoding options from the command line (checked, the
model's max length when unset), the test parts `--split all` scores, `translate --engine
torch` and `evaluate` (JSON and text, with Apertium beside it) with the shipped checkpoint."""

from __future__ import annotations

import json
import re
from argparse import Namespace
from dataclasses import fields

import pytest
from helpers import SHIPPED_TRANSLATOR

from models import commands
from models.commands import decoding_options
from service.runtime.decoding import DecodingOptions
from service.runtime.errors import InvalidArgument


def _args(**given) -> Namespace:
    """The decoding flags at their defaults (max length unset), then `given`."""
    defaults = {
        ("n_best" if f.name == "num_hypotheses" else f.name): f.default
        for f in fields(DecodingOptions)
        if f.name != "suppress"
    }
    return Namespace(**{**defaults, "max_length": None, **given})


def test_an_unset_max_length_is_the_model_s_and_the_flags_are_carried():
    options = decoding_options(_args(beam_size=4, length_penalty=0.6, top_k=0), 160, n_best=3)
    assert (options.beam_size, options.max_length, options.num_hypotheses) == (4, 160, 3)
    assert options.length_penalty == 0.6 and not options.sampling
    assert decoding_options(_args(max_length=20), 160).max_length == 20
    sampled = decoding_options(_args(temperature=0.7, top_p=0.9, seed=5), 160, n_best=2)
    assert sampled.sampling and (sampled.top_p, sampled.seed, sampled.num_hypotheses) == (
        0.9,
        5,
        2,
    )


def test_bad_flags_are_refused_together():
    with pytest.raises(InvalidArgument, match=r"beam_size.*max_length"):
        decoding_options(_args(beam_size=0, max_length=161), 160)
    with pytest.raises(InvalidArgument, match="num_hypotheses"):
        decoding_options(_args(beam_size=1), 160, n_best=2)


def test_split_all_scores_every_test_part_the_data_has(tmp_path):
    assert commands._splits(Namespace(split="dev", data=tmp_path)) == ["dev"]
    with pytest.raises(SystemExit, match="no test part"):
        commands._splits(Namespace(split="all", data=tmp_path))
    for split in ("test-everyday", "test"):
        (tmp_path / f"{split}.es").write_text("hola\n")
    assert commands._splits(Namespace(split="all", data=tmp_path)) == ["test", "test-everyday"]


def test_translate_gives_each_text_its_n_best_by_the_checkpoint():
    args = _args(checkpoint=SHIPPED_TRANSLATOR, beam_size=3, n_best=2)
    tokenizer, nbest = commands.translate(args, ["Dios es amor.", "La casa es roja."])
    assert [len(n) for n in nbest] == [2, 2]
    assert [tokenizer.decode(n[0].tokens) for n in nbest] == ["God is love.", "The house is red."]
    for hypotheses in nbest:
        assert hypotheses[0].score >= hypotheses[1].score
        assert hypotheses[0].tokens != hypotheses[1].tokens


def _evaluate_args(data, **given) -> Namespace:
    settings = {
        "checkpoint": SHIPPED_TRANSLATOR,
        "split": "test",
        "data": data,
        "limit": 2,
        "baseline": None,
        "versus": None,
        "sentence_splitting": "sentences",
        "json": True,
    }
    return _args(**{**settings, **given})


@pytest.fixture
def data(tmp_path):
    """A test split of three short pairs."""
    (tmp_path / "test.es").write_text("Dios es amor.\nLa casa es roja.\nEl perro come.\n")
    (tmp_path / "test.en").write_text("God is love.\nThe house is red.\nThe dog eats.\n")
    return tmp_path


@pytest.fixture
def apertium():
    from models.packages import missing_debian_packages

    if missing_debian_packages(("apertium", "apertium-eng-spa")):
        pytest.skip("Apertium spa-eng is not installed")


def test_evaluate_reports_the_model_and_apertium_on_the_same_sentences(data, apertium, capsys):
    assert commands.evaluate(_evaluate_args(data, versus="apertium")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["engine"] == "torch" and report["split"] == "test"
    assert str(SHIPPED_TRANSLATOR) in report["system"]
    assert report["decoding"]["sentence_splitting"] == "sentences"
    assert report["decoding"]["max_length"] == 512  # the model's own
    ours, theirs = report["parts"]["bible"], report["versus"]["parts"]["bible"]
    assert ours["sentences"] == theirs["sentences"] == 2  # the limit
    assert ours["bleu"] == ours["chrf"] == 100.0  # both translated as the references
    assert report["versus"]["system"] == "apertium spa-eng"


def test_the_apertium_baseline_prints_each_part_and_the_signatures(data, apertium, capsys):
    args = _evaluate_args(data, baseline="apertium", json=False, limit=0)
    assert commands.evaluate(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(
        r"apertium spa-eng bible: BLEU [\d.]+ chrF [\d.]+ \(3 sentences\)", lines[0]
    )
    assert lines[1].startswith("BLEU nrefs:1|") and lines[2].startswith("chrF nrefs:1|")
