"""`attnserve caption` (`attnserve.cli.caption`): the engines' options checked and the torch
engine's defaults, and the image files refused before anything decodes them."""

from __future__ import annotations

import pytest
from helpers import SHIPPED_CAPTIONER

from attnserve.cli import caption, main
from attnserve.cli.main import build_parser
from attnserve.cli.options import TORCH_DECODING


def _parsed(*argv: str):
    args = build_parser().parse_args(["caption", *argv])
    args.handler.check(args)
    return args


@pytest.mark.parametrize(
    "argv",
    [
        ["--engine", "torch", "--stream"],
        ["--engine", "torch", "--server", "127.0.0.1:1"],
        ["--engine", "torch", "--version", "2"],
        ["--checkpoint", str(SHIPPED_CAPTIONER)],
        ["--engine", "torch", "--target-prefix", "a red"],  # the torch engine has no words
        ["--engine", "torch", "--suppress", "circle"],
    ],
)
def test_caption_options_of_the_other_engine_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["caption", *argv, "image.png"])
    assert exit_.value.code == 2
    assert "only with --engine" in capsys.readouterr().err


def test_an_attention_figure_that_cannot_be_written_is_refused_before_any_call(tmp_path, capsys):
    for path, problem in ((tmp_path, "a folder, not a file"), (tmp_path / "no" / "a.png", "no")):
        with pytest.raises(SystemExit) as exit_:
            main(["caption", "--attention", str(path), "image.png"])
        assert exit_.value.code == 2
        assert f"error: --attention {path}: {problem}" in capsys.readouterr().err


def test_every_grpc_only_name_is_an_option_of_caption():
    args = build_parser().parse_args(["caption", "image.png"])
    assert all(hasattr(args, name) for name in caption.GRPC_ONLY)
    assert "attention" not in caption.GRPC_ONLY  # both engines draw the figure


def test_the_torch_engine_keeps_the_models_own_max_length_and_the_shipped_captioner():
    args = _parsed("--engine", "torch", "--beam", "2", "a.png")
    assert args.checkpoint == SHIPPED_CAPTIONER
    assert args.max_length is None  # the model's own limit, not the translator's 256
    assert caption.TORCH_CAPTIONING["max_length"] is None
    assert args.beam_size == 2 and args.n_best == TORCH_DECODING["n_best"]
    assert args.length_penalty == TORCH_DECODING["length_penalty"]
    grpc = _parsed("--version", "3", "a.png", "b.png")
    assert grpc.model_version == "3" and grpc.max_length is None and grpc.beam_size is None
    assert [str(p) for p in grpc.images] == ["a.png", "b.png"]


def test_caption_needs_an_image(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["caption", "--engine", "torch"])
    assert exit_.value.code == 2
    assert "images" in capsys.readouterr().err


def test_the_torch_engine_refuses_unreadable_files_with_status_2(tmp_path, capsys):
    words, missing = tmp_path / "words.png", tmp_path / "none.png"
    words.write_bytes(b"no es una imagen")
    assert main(["caption", "--engine", "torch", str(words), str(words)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {words}: not an image (PNG, JPEG or WebP expected)",
        f"error: {words}: not an image (PNG, JPEG or WebP expected)",
    ]
    assert main(["caption", "--engine", "torch", str(missing), str(words)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {missing}: No such file or directory\n"  # files first
    assert captured.out == ""
