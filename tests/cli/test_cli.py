"""The `attnserve` command line: evaluate and translate on a handful of sentences."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import ROOT, SHIPPED_TRANSLATOR

from attnserve.cli import main


def _json_lines(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def _evaluate(capsys, data, *options: str) -> dict:
    """`attnserve evaluate` on the first six test sentences; its JSON report."""
    argv = ["evaluate", "translator", "--split", "test", "--limit", "6", "--json"]
    assert main([*argv, "--data", str(data), *options]) == 0
    (report,) = _json_lines(capsys)
    return report


def test_evaluate_reports_scores_signatures_and_settings(capsys, translator_data):
    options = ["--checkpoint", str(SHIPPED_TRANSLATOR), "--beam-size", "2", "--max-length", "64"]
    report = _evaluate(capsys, translator_data, *options)
    scores = report["parts"]["bible"]
    assert scores["sentences"] == 6
    assert 0.0 <= scores["bleu"] <= 100.0 and 0.0 < scores["chrf"] <= 100.0
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "nc:6" in scores["chrf_signature"]
    decoding = {"beam_size": 2, "max_length": 64, "length_penalty": 1.0, "num_hypotheses": 1}
    assert decoding.items() <= report["decoding"].items()
    assert report["decoding"]["temperature"] == 0.0  # search, not sampling


def test_evaluate_scores_the_apertium_baseline(capsys, translator_data):
    report = _evaluate(capsys, translator_data, "--baseline", "apertium")
    assert report["engine"] == "apertium"
    assert report["parts"]["bible"]["sentences"] == 6
    assert report["parts"]["bible"]["chrf"] > 10  # a real translation, not empty lines


def test_evaluate_all_parts_beside_apertium(capsys, tmp_path):
    parts = {
        "test": [("Y dijo Dios: Sea la luz.", "And God said, Let there be light.")],
        "test-modern": [("La contraseña es incorrecta.", "The password is incorrect.")],
        "test-everyday": [("Buenos días.", "Good morning."), ("Tengo hambre.", "I am hungry.")],
    }
    for split, pairs in parts.items():
        for side, language in ((0, "es"), (1, "en")):
            (tmp_path / f"{split}.{language}").write_text("".join(p[side] + "\n" for p in pairs))
    argv = ["evaluate", "translator", "--split", "all", "--versus", "apertium", "--json"]
    assert main([*argv, "--data", str(tmp_path), "--max-length", "32"]) == 0
    (report,) = _json_lines(capsys)
    for scored in (report, report["versus"]):
        assert list(scored["parts"]) == ["bible", "modern", "everyday"]
        assert [p["sentences"] for p in scored["parts"].values()] == [1, 1, 2]
    assert report["versus"]["system"] == "apertium spa-eng"
    assert report["versus"]["parts"]["everyday"]["chrf"] > 30  # Apertium knows these words


def test_translate_json_has_nbest_scores_log_probs_and_alignment(capsys):
    code = main(
        [
            "translate",
            "--engine",
            "torch",
            "--json",
            "--beam-size",
            "3",
            "--n-best",
            "2",
            "--max-length",
            "40",
            "Yo soy de Canadá.",
        ]
    )
    assert code == 0
    (response,) = _json_lines(capsys)
    (result,) = response["translations"]
    first, second = result["hypotheses"]
    alignment = first["alignment"]
    assert alignment["source_tokens"][-1] == "</s>"
    assert first["score"] >= second["score"]
    assert len(first["token_log_probs"]) == len(alignment["weights"])
    assert all(len(row) == len(alignment["source_tokens"]) for row in alignment["weights"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["translate", "--beam-size", "2", "--n-best", "5", "hola"],
            "error: INVALID_ARGUMENT: num_hypotheses must be in 1..beam_size (2), got 5\n",
        ),
        (
            ["caption", "--temperature", "-1", str(ROOT / "examples" / "scene.png")],
            "error: INVALID_ARGUMENT: temperature must be 0 (no sampling) or in 0.01..100, "
            "got -1.0\n",
        ),
        (
            ["translate", "--checkpoint", "none.pt", "hola"],
            "error: --checkpoint: [Errno 2] No such file or directory: 'none.pt'\n",
        ),
    ],
)
def test_the_torch_engine_refuses_as_a_server_does_without_a_traceback(argv, message, capsys):
    """Options the runtime refuses name their field on one line, exit status 1, as over gRPC."""
    command, *rest = argv
    assert main([command, "--engine", "torch", *rest]) == 1
    assert capsys.readouterr().err == message


def test_a_checkpoint_that_holds_none_is_one_line_naming_it(tmp_path, capsys):
    """A file of something else ended in pickle's or json's traceback."""
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint at all")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "config.json").write_text("{")
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    for command, checkpoint, given in (
        ("translate", junk, "hola"),
        ("translate", folder, "hola"),
        ("caption", folder, str(ROOT / "examples" / "scene.png")),
    ):
        argv = [command, "--engine", "torch", "--checkpoint", str(checkpoint), given]
        assert main(argv) == 1, argv
        error = capsys.readouterr().err
        assert error.startswith(f"error: --checkpoint: {checkpoint}: not a checkpoint"), error
        assert error.count("\n") == 1, error


def test_the_console_script_translates_stdin_without_a_traceback():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnserve.cli",
            "translate",
            "--engine",
            "torch",
            "--beam-size",
            "1",
            "--max-length",
            "30",
        ],
        input="Dios.\n\nLa tierra.\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2
