"""`data`, `train` and `evaluate` (`attnserve.cli.training`): each model's torch-side commands,
and the defaults these commands complete before handing over: where the data, run and
checkpoint are, the training budget, and the evaluation's max length per model."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from attnserve.cli import main, training
from attnserve.cli.main import build_parser
from attnserve.cli.options import TORCH_DECODING, shipped_checkpoint


@pytest.fixture
def handed(monkeypatch):
    """The arguments each command hands to its model's commands (instead of running them)."""
    calls = []

    def commands(model: str):
        def record(name):
            return lambda args: calls.append((model, name, args)) or 0

        return SimpleNamespace(
            data=record("data"), train=record("train"), evaluate=record("evaluate")
        )

    monkeypatch.setattr(training, "model_commands", commands)
    return calls


def test_each_model_has_its_own_commands():
    from models import caption_commands, commands

    assert training.model_commands("captioner") is caption_commands
    assert training.model_commands("translator") is commands
    for module in (caption_commands, commands):
        assert all(callable(getattr(module, name)) for name in ("data", "train", "evaluate"))


def test_data_writes_to_data_of_the_model_unless_told(handed):
    assert main(["data", "captioner"]) == 0
    assert main(["data", "translator", "--out", "elsewhere", "--catalogs"]) == 0
    (_, _, captioner), (_, _, translator) = handed
    assert [(model, name) for model, name, _ in handed] == [
        ("captioner", "data"),
        ("translator", "data"),
    ]
    assert captioner.out == Path("data/captioner") and translator.out == Path("elsewhere")
    assert translator.catalogs and not captioner.catalogs


def test_data_shows_the_scene_defaults_of_the_captioners_data():
    from models.caption_data import DataOptions

    args = build_parser().parse_args(["data", "captioner"])
    assert (args.train_scenes, args.test_scenes) == (
        DataOptions().train,
        DataOptions().test_per_part,
    )


def test_train_completes_its_paths_and_each_models_budget(handed):
    from models.caption_train import CaptionTrainOptions
    from models.train import TrainOptions

    assert main(["train", "translator"]) == 0
    assert main(["train", "captioner", "--max-minutes", "3", "--run-dir", "r"]) == 0
    (_, name, translator), (_, _, captioner) = handed
    assert name == "train"
    assert translator.data == Path("data/translator")
    assert translator.run_dir == Path("runs/translator")
    assert translator.out == shipped_checkpoint("translator")
    assert translator.max_minutes == TrainOptions().max_minutes
    assert captioner.max_minutes == 3.0 and captioner.run_dir == Path("r")
    assert training._training_budget("captioner") == CaptionTrainOptions().max_minutes
    assert training._training_budget("captioner") != training._training_budget("translator")


def test_train_pack_writes_the_packed_run_and_does_not_train(handed, monkeypatch, capsys):
    from models import run_state

    packed = []
    monkeypatch.setattr(
        run_state, "pack_run", lambda run_dir, out: packed.append((run_dir, out)) or {"bytes": 9}
    )
    assert main(["train", "translator", "--run-dir", "r", "--pack", "p.pt"]) == 0
    assert packed == [(Path("r"), Path("p.pt"))]
    assert json.loads(capsys.readouterr().out) == {"bytes": 9}
    assert handed == []


def test_train_resumes_from_a_packed_run_only_without_a_run(handed, monkeypatch, tmp_path, capsys):
    from models import run_state

    unpacked = []
    monkeypatch.setattr(
        run_state,
        "unpack_run",
        lambda packed, run_dir: unpacked.append((packed, run_dir)) or {"step": 40},
    )
    fresh, going = tmp_path / "fresh", tmp_path / "going"
    going.mkdir()
    (going / "last.pt").write_bytes(b"")
    for run_dir in (fresh, going):
        argv = ["train", "translator", "--run-dir", str(run_dir), "--resume-from", "p.pt"]
        assert main(argv) == 0
    assert unpacked == [(Path("p.pt"), fresh)]  # a run going on is not replaced
    assert json.loads(capsys.readouterr().out) == {"resumed": "p.pt", "step": 40}
    assert [args.run_dir for _, _, args in handed] == [fresh, going]  # both train


def test_evaluate_takes_the_translators_max_length_and_the_captioners_own(handed):
    assert main(["evaluate", "translator"]) == 0
    assert main(["evaluate", "captioner", "--split", "all"]) == 0
    assert main(["evaluate", "translator", "--max-length", "40", "--data", "d"]) == 0
    translator, captioner, short = (args for _, _, args in handed)
    assert translator.max_length == TORCH_DECODING["max_length"] == 256
    assert captioner.max_length is None  # the model's own limit
    assert short.max_length == 40 and short.data == Path("d")
    assert translator.checkpoint == shipped_checkpoint("translator")
    assert captioner.data == Path("data/captioner") and captioner.split == "all"
    assert translator.beam_size == TORCH_DECODING["beam_size"]  # the torch defaults
    assert translator.split == "test" and translator.sentence_splitting == "sentences"


def test_evaluate_refuses_an_unknown_split_or_peer(capsys):
    for argv in (["--split", "train"], ["--baseline", "google"]):
        with pytest.raises(SystemExit) as exit_:
            main(["evaluate", "translator", *argv])
        assert exit_.value.code == 2
    assert capsys.readouterr().err.count("invalid choice") == 2


@pytest.mark.parametrize("flag", ["--target-prefix", "--suppress"])
def test_evaluate_does_not_take_words_its_pytorch_decoding_would_ignore(flag, handed, capsys):
    """Words the server tokenizes: evaluate's PyTorch decoding has no use for them."""
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", "translator", flag, "the"])
    assert exit_.value.code == 2
    assert f"unrecognized arguments: {flag} the" in capsys.readouterr().err
    assert handed == []  # nothing evaluated


@pytest.mark.parametrize(
    ("argv", "missing"),
    [
        (["evaluate", "translator", "--data", "{tmp}/none"], "test.es"),
        (["evaluate", "captioner", "--data", "{tmp}/none"], "test.jsonl"),
        (["evaluate", "translator", "--checkpoint", "{tmp}/none"], "model.safetensors"),
        (["train", "translator", "--data", "{tmp}/none", "--run-dir", "{tmp}/run"], "train.es"),
        (["train", "captioner", "--data", "{tmp}/none", "--run-dir", "{tmp}/run"], "glyphs.json"),
        (["train", "translator", "--run-dir", "{tmp}/run", "--resume-from", "{tmp}/p.pt"], "p.pt"),
        (["train", "translator", "--run-dir", "{tmp}/run", "--pack", "{tmp}/p.pt"], "last.pt"),
    ],
)
def test_a_missing_input_of_train_or_evaluate_is_one_line_not_a_traceback(
    argv, missing, tmp_path, capsys
):
    """Data, a checkpoint or a packed run not there: `error: COMMAND MODEL: ...` naming the
    file, and exit status 1, before any training or decoding."""
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    assert main([*argv, "--out", str(tmp_path / "out")] if argv[0] == "train" else argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {argv[0]} {argv[1]}: ") and missing in err
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()  # nothing shipped


def test_data_into_a_folder_that_cannot_be_made_is_one_line(tmp_path, capsys):
    taken = tmp_path / "a file"
    taken.write_text("", encoding="utf-8")
    argv = ["data", "captioner", "--train-scenes", "1", "--test-scenes", "1"]
    assert main([*argv, "--out", str(taken / "data")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: data captioner: ") and str(taken) in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("flag", ["--train-scenes", "--test-scenes"])
@pytest.mark.parametrize("count", ["0", "-5"])
def test_data_refuses_no_scenes_before_writing_anything(flag, count, tmp_path, capsys):
    """Not a traceback from numpy midway, with part of the corpus written."""
    with pytest.raises(SystemExit) as exit_:
        main(["data", "captioner", "--out", str(tmp_path / "data"), flag, count])
    assert exit_.value.code == 2
    assert f"argument {flag}: must be 1 or more, got {count}" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("command", "flag", "value", "least"),
    [
        ("train captioner", "--batch-size", "0", 1),
        ("train translator", "--max-tokens", "0", 1),
        ("train translator", "--max-epochs", "0", 1),
        ("train translator", "--warmup-steps", "0", 1),  # the schedule divides by it
        ("train translator", "--checkpoint-every", "0", 1),  # step % 0 at the first step
        ("train translator", "--snapshot-every", "0", 1),
        ("train translator", "--max-steps", "-1", 0),
        ("train translator", "--dev-sentences", "-1", 0),
        ("train captioner", "--decay-steps", "-1", 0),
        ("train captioner", "--evaluate-every", "-1", 0),
        ("train translator", "--average", "-1", 0),
        ("train translator", "--threads", "-1", 0),
        ("evaluate translator", "--limit", "-1", 0),  # all sentences but the last
    ],
)
def test_counts_that_mean_nothing_are_refused_before_anything_runs(
    command, flag, value, least, handed, capsys
):
    """Not a ZeroDivisionError minutes into a run, nor a silent evaluation of all sentences
    but the last: usage and status 2 before the model's commands are called."""
    with pytest.raises(SystemExit) as exit_:
        main([*command.split(), flag, value])
    assert exit_.value.code == 2
    assert f"argument {flag}: must be {least} or more, got {value}" in capsys.readouterr().err
    assert handed == []
