"""`export` and `parity` (`attnserve.cli.exporting`): their flags and choices, and the
defaults `export` completes (the shipped checkpoint, the model's data, its name) before
handing over to `export.commands`."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnserve.cli import exporting, main
from attnserve.cli.main import build_parser
from attnserve.cli.options import shipped_checkpoint


@pytest.fixture
def handed(monkeypatch):
    """What each command hands to export.commands (instead of exporting)."""
    from export import commands

    calls = []
    monkeypatch.setattr(commands, "export", lambda args: calls.append(("export", args)) or 0)
    monkeypatch.setattr(commands, "parity", lambda args: calls.append(("parity", args)) or 3)
    monkeypatch.setattr(commands, "export_hf", lambda a: calls.append(("export_hf", a)) or 0)
    return calls


def test_export_needs_a_model_and_where_to_write(capsys):
    for argv in (["export", "translator"], ["export", "--out", "r"], ["export", "x", "--out", "r"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "the following arguments are required: --out" in err
    assert "invalid choice: 'x'" in err


def test_export_defaults_to_the_shipped_checkpoint_its_data_and_name(handed):
    assert main(["export", "captioner", "--out", "repo"]) == 0
    ((command, args),) = handed
    assert command == "export" and isinstance(args.handler, exporting.Export)
    assert args.out == Path("repo") and args.version == "1"
    assert args.checkpoint == shipped_checkpoint("captioner")
    assert args.data == Path("data/captioner") and args.name == "captioner"
    assert (args.variants, args.graphs, args.int8_scales) == (
        "fp32,int8,fp16",
        "built",
        "per-channel",
    )


def test_export_keeps_what_is_given(handed):
    argv = ["export", "translator", "--out", "repo", "--checkpoint", "runs/t/best.pt"]
    argv += ["--name", "modern", "--version", "3", "--data", "d", "--graphs", "traced"]
    assert main([*argv, "--int8-scales", "per-tensor", "--sentences", "20"]) == 0
    ((_, args),) = handed
    assert args.checkpoint == Path("runs/t/best.pt") and args.name == "modern"
    assert (args.version, args.data, args.graphs) == ("3", Path("d"), "traced")
    assert (args.int8_scales, args.sentences) == ("per-tensor", 20)


def test_export_refuses_an_unknown_way_of_making_graphs(capsys):
    with pytest.raises(SystemExit):
        main(["export", "translator", "--out", "r", "--graphs", "onnxscript"])
    assert "invalid choice: 'onnxscript'" in capsys.readouterr().err


@pytest.mark.parametrize("model", ["translator", "hf"])
def test_export_refuses_a_variant_it_would_leave_out_unseen(model, handed, capsys):
    """A misspelt variant was ignored: minutes of export and a certificate later, the version
    lacked it. Refused before anything is exported; the names given reach the export."""
    argv = ["export", model, "dir", "--out", "r", "--name", "n"]
    for variants in ("fp32,int-8", "fp32,", "bogus"):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--variants", variants])
        assert exit_.value.code == 2
        assert "not a variant (of fp32, int8, fp16)" in capsys.readouterr().err
    assert handed == []
    assert main([*argv, "--variants", "fp32, int8"]) == 0
    ((_, args),) = handed
    assert args.variants == "fp32,int8"


@pytest.mark.parametrize("command", ["export translator --out r", "parity r/translator/1"])
def test_no_or_a_negative_number_of_test_sentences_is_refused(command, handed, capsys):
    """parity --sentences -1 decoded every test sentence but the last of each part (a slice
    [:-1]) instead of 200, and said nothing of it."""
    for count in ("0", "-1"):
        with pytest.raises(SystemExit) as exit_:
            main([*command.split(), "--sentences", count])
        assert exit_.value.code == 2
        assert f"--sentences: must be 1 or more, got {count}" in capsys.readouterr().err
    assert handed == []


def test_export_hf_refusals_are_one_line_not_a_traceback(tmp_path, capsys):
    """A directory export hf refuses (here: no config.json at all; the others, by their
    reason, in tests/export/test_hf_version.py) is `error: ...` and exit status 1."""
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["export", "hf", str(empty), "--out", str(tmp_path / "r"), "--name", "x"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: export hf {empty}: ") and "no config.json" in err
    assert "Traceback" not in err and not (tmp_path / "r").exists()


def test_parity_hands_over_its_directory_and_returns_the_suites_status(handed):
    assert main(["parity", "repo/translator/2", "--json", "--sentences", "12"]) == 3
    ((command, args),) = handed
    assert command == "parity" and isinstance(args.handler, exporting.Parity)
    assert args.directory == Path("repo/translator/2")
    assert args.json and args.sentences == 12
    assert args.checkpoint is None and args.data is None  # the manifest's own, chosen there


def test_parity_needs_a_directory(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["parity"])
    assert "directory" in capsys.readouterr().err


def test_export_hf_needs_a_directory_and_a_name(capsys):
    for argv in (["export", "hf", "--out", "r"], ["export", "hf", "models/opus", "--out", "r"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
    assert "export hf needs DIRECTORY and --name" in capsys.readouterr().err


def test_export_hf_hands_the_directory_and_languages_over(handed):
    argv = ["export", "hf", "models/opus-mt-es-de", "--out", "repo", "--name", "opus"]
    argv += ["--source-language", "es", "--target-language", "de", "--texts", "t.txt"]
    assert main(argv) == 0
    ((command, args),) = handed
    assert command == "export_hf" and args.directory == Path("models/opus-mt-es-de")
    assert (args.name, args.version, args.out) == ("opus", "1", Path("repo"))
    assert (args.source_language, args.target_language) == ("es", "de")
    assert args.texts == Path("t.txt") and args.references is None


def test_parity_of_a_missing_version_is_one_line_not_a_traceback(tmp_path, capsys):
    assert main(["parity", str(tmp_path / "translator" / "9")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: parity {tmp_path / 'translator' / '9'}: ")
    assert "unreadable manifest" in err and "Traceback" not in err


def test_export_of_a_missing_checkpoint_is_one_line_not_a_traceback(tmp_path, capsys):
    argv = ["export", "translator", "--out", str(tmp_path / "r")]
    assert main([*argv, "--checkpoint", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: export translator: ") and "model.safetensors" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("model", ["translator", "hf"])
def test_too_few_certificate_inputs_refuse_the_export_before_it_is_written(tmp_path, capsys, model):
    """The certificate needs 200 inputs: fewer are refused at once, not after the graphs."""
    directory = [str(tmp_path / "opus"), "--name", "opus"] if model == "hf" else []
    argv = ["export", model, *directory, "--out", str(tmp_path / "r"), "--sentences", "3"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: export ") and "needs at least 200" in err
    assert "Traceback" not in err and not (tmp_path / "r").exists()
