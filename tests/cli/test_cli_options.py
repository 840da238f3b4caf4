"""The flags several commands share (`attnserve.cli.options`): decoding options, the server and
its deadline, the engine, and `check_engine`, which refuses the other engine's options and
fills the torch engine's defaults."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

import pytest

from attnserve.cli import main
from attnserve.cli.options import (
    ENGINES,
    MODELS,
    TORCH_DECODING,
    TORCH_ONLY,
    add_decoding,
    add_engine,
    add_server,
    check_engine,
    default_data,
    seconds,
    shipped_checkpoint,
    utf8,
)
from models.shipped import SHIPPED_CAPTIONER, SHIPPED_TRANSLATOR
from service.runtime.decoding import MODEL_RULES, DecodingOptions

DECODING_DESTS = (
    "beam_size",
    "max_length",
    "length_penalty",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "target_prefix",
    "min_length",
    "no_repeat_ngram_size",
    "repetition_penalty",
    "suppress",
    "max_length_ratio",
)


def _decoding(defaults) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t", exit_on_error=False)
    add_decoding(parser, defaults)
    return parser


def test_torch_decoding_is_the_runtimes_defaults_under_the_flags_names():
    runtime = DecodingOptions()
    names = {f.name for f in fields(DecodingOptions)} - {"suppress", *MODEL_RULES}
    assert set(TORCH_DECODING) == (names - {"num_hypotheses"}) | {"n_best"}
    assert TORCH_DECODING["n_best"] == runtime.num_hypotheses == 1
    assert TORCH_DECODING["beam_size"] == 1 and TORCH_DECODING["temperature"] == 0.0
    for name, value in TORCH_DECODING.items():
        assert value == getattr(runtime, "num_hypotheses" if name == "n_best" else name)


def test_decoding_options_are_unset_without_defaults():
    args = _decoding(None).parse_args([])
    assert all(getattr(args, dest) is None for dest in DECODING_DESTS)


def test_decoding_options_take_the_defaults_given_and_the_flags_over_them():
    args = _decoding(TORCH_DECODING).parse_args([])
    for dest in DECODING_DESTS:
        assert getattr(args, dest) == TORCH_DECODING.get(dest)  # seed, prefix, suppress: None
    args = _decoding(TORCH_DECODING).parse_args(
        ["--beam", "4", "--top-p", "0.9", "--suppress", "a b", "--suppress", "c"]
    )
    assert (args.beam_size, args.top_p, args.suppress) == (4, 0.9, ["a b", "c"])
    assert args.max_length == TORCH_DECODING["max_length"]
    with pytest.raises(argparse.ArgumentError, match="beam-size"):
        _decoding(None).parse_args(["--beam-size", "two"])


def test_seconds_must_be_above_zero_and_at_most_a_year():
    assert seconds("2.5") == 2.5 and seconds("1e-3") == 0.001
    assert seconds("31536000") == 365 * 24 * 3600
    # "inf" and 1e10 overflow gRPC's deadline: each call failed DEADLINE_EXCEEDED at once
    for text in ("0", "-1", "nan", "inf", "1e10", "31536001"):
        refusal = f"must be above 0 and at most 31536000 \\(a year\\), got {text}"
        with pytest.raises(argparse.ArgumentTypeError, match=refusal):
            seconds(text)
    with pytest.raises(ValueError):
        seconds("soon")


def test_the_server_flags_read_paths_and_refuse_a_deadline_of_zero(capsys):
    parser = argparse.ArgumentParser(prog="t")
    add_server(parser, 7.0)
    args = parser.parse_args([])
    assert (args.server, args.timeout, args.tls, args.tls_ca, args.token_file) == (
        None,
        None,
        False,
        None,
        None,
    )  # None: the environment's or the command's own default, chosen later
    args = parser.parse_args(["--server", "h:1", "--timeout", "3", "--tls-ca", "ca.pem", "--tls"])
    assert (args.server, args.timeout, args.tls, args.tls_ca) == ("h:1", 3.0, True, Path("ca.pem"))
    assert "default: 7" in parser.format_help()
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--timeout", "0"])
    assert exit_.value.code == 2
    assert (
        "--timeout: must be above 0 and at most 31536000 (a year), got 0" in capsys.readouterr().err
    )


def test_the_engine_is_grpc_unless_torch_is_asked_for(capsys):
    parser = argparse.ArgumentParser(prog="t")
    add_engine(parser)
    assert parser.parse_args([]).engine == ENGINES[0] == "grpc"
    assert parser.parse_args(["--engine", "torch"]).engine == "torch"
    with pytest.raises(SystemExit):
        parser.parse_args(["--engine", "onnx"])
    assert "invalid choice: 'onnx'" in capsys.readouterr().err


def _command() -> argparse.ArgumentParser:
    """A command with both engines' options, as translate and caption have."""
    parser = argparse.ArgumentParser(prog="cmd")
    add_engine(parser)
    add_server(parser, 1.0)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--n-best", type=int)
    add_decoding(parser, None)
    return parser


GRPC = ("server", "stream", "timeout")


def _checked(*argv: str) -> argparse.Namespace:
    parser = _command()
    args = parser.parse_args(list(argv))
    check_engine(parser, args, GRPC, TORCH_DECODING, Path("shipped"))
    return args


def test_check_engine_refuses_every_option_of_the_other_engine_by_its_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        _checked("--engine", "torch", "--server", "h:1", "--stream")
    assert exit_.value.code == 2
    assert "error: --server, --stream: only with --engine grpc" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _checked("--checkpoint", "c")
    assert "error: --checkpoint: only with --engine torch" in capsys.readouterr().err
    assert TORCH_ONLY == ("checkpoint",)


def test_check_engine_leaves_grpc_options_unset_for_the_server():
    args = _checked("--beam", "3")
    assert args.beam_size == 3 and args.checkpoint is None
    assert args.max_length is None and args.n_best is None  # the server's defaults


def test_check_engine_fills_the_torch_defaults_only_where_none_was_given():
    args = _checked("--engine", "torch", "--beam", "3", "--length-penalty", "0")
    assert args.beam_size == 3 and args.length_penalty == 0.0  # given, even zero
    assert args.checkpoint == Path("shipped")
    for name, value in TORCH_DECODING.items():
        if name not in ("beam_size", "length_penalty"):
            assert getattr(args, name) == value, name
    assert _checked("--engine", "torch", "--checkpoint", "mine").checkpoint == Path("mine")


def test_the_models_shipped_checkpoints_and_default_data():
    assert MODELS == ("translator", "captioner")
    assert shipped_checkpoint("translator") == SHIPPED_TRANSLATOR
    assert shipped_checkpoint("captioner") == SHIPPED_CAPTIONER
    for model in MODELS:
        assert (shipped_checkpoint(model) / "config.json").is_file()
        assert default_data(model) == Path("data", model)
        assert not default_data(model).is_absolute()  # relative to where the command runs


NOT_UTF8 = "caf\udce9"  # b"caf\xe9" (latin-1) as Python decodes it from the command line


@pytest.mark.parametrize(
    "argv",
    [
        ["translate", NOT_UTF8],
        ["translate", "--engine", "torch", NOT_UTF8],
        ["translate", "--model", NOT_UTF8, "hola"],
        ["translate", "--model-version", NOT_UTF8, "hola"],
        ["translate", "--source-language", NOT_UTF8, "hola"],
        ["translate", "--target-language", NOT_UTF8, "hola"],
        ["translate", "--target-prefix", NOT_UTF8, "hola"],
        ["translate", "--suppress", NOT_UTF8, "hola"],
        ["translate", "--server", NOT_UTF8, "hola"],
        ["score", "--model", NOT_UTF8],
        ["caption", "--version", NOT_UTF8, "a.png"],
        ["health", "--service", NOT_UTF8],
    ],
)
def test_an_argument_sent_as_text_that_is_not_utf8_is_refused_as_usage(argv, capsys):
    """Bytes of another encoding (a latin-1 terminal, a file's `$(cat ...)`) cannot go in a
    request: usage and status 2 naming the argument and the byte, before any call, as
    standard input that is not UTF-8 is refused; not a traceback midway."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument " in err
    assert "not UTF-8 ('utf-8' codec can't decode byte 0xe9 in position 3" in err


def test_utf8_keeps_every_text_utf8_can_carry():
    for text in ("hola", "¿Qué tal? 😀", "", "a\tb"):
        assert utf8(text) == text
    # UTF-8 bytes that an ASCII locale (LC_ALL=C, PYTHONUTF8=0) left as surrogates
    assert utf8("caf\udcc3\udca9") == "café"
    with pytest.raises(argparse.ArgumentTypeError, match=r"^not UTF-8 \("):
        utf8("\ud800")  # a lone surrogate, not a byte
