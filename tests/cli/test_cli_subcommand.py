"""What an `attnserve` command is (`attnserve.cli.subcommand`): every command a registered
`Subcommand`, each once and under its own name, with a `--help` that builds without torch;
`check` before `run`, and a `Failure` as one line on stderr and exit status 1."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import subprocess
import sys
from typing import ClassVar

import pytest
from helpers import ROOT

import attnserve.cli
from attnserve.cli import caption, exporting, health, serve, training, translate
from attnserve.cli.subcommand import Failure, Subcommand

# the module (the package's `main` is the function)
main_module = importlib.import_module("attnserve.cli.main")
GROUPS = (training, translate, caption, exporting, serve, health)


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action


def _every_subcommand_class() -> set[type[Subcommand]]:
    """The Subcommand classes defined anywhere in the attnserve.cli package."""
    found = set()
    for info in pkgutil.iter_modules(attnserve.cli.__path__):
        if info.name == "__main__":
            continue
        module = importlib.import_module(f"attnserve.cli.{info.name}")
        for _, value in inspect.getmembers(module, inspect.isclass):
            defined_here = value.__module__ == module.__name__
            if defined_here and issubclass(value, Subcommand) and value is not Subcommand:
                found.add(value)
    return found


def test_every_command_class_is_registered_once_in_its_groups_order():
    registered = main_module.COMMANDS
    assert registered == tuple(c for group in GROUPS for c in group.COMMANDS)
    assert len(set(registered)) == len(registered)
    assert set(registered) == _every_subcommand_class()  # none written and left out


def test_command_names_are_unique_and_each_parses_to_its_own_handler():
    names = [command.name for command in main_module.COMMANDS]
    assert len(set(names)) == len(names)
    parser = main_module.build_parser()
    assert list(_subparsers(parser).choices) == names
    for command in main_module.COMMANDS:
        handler = _subparsers(parser).choices[command.name].get_default("handler")
        assert type(handler) is command
        assert command.help.strip() and handler.parser.prog == f"attnserve {command.name}"


@pytest.mark.parametrize("command", main_module.COMMANDS, ids=lambda c: c.name)
def test_each_command_has_a_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main_module.build_parser().parse_args([command.name, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: attnserve {command.name}")
    if command.description:  # argparse rewraps it: compare the words
        assert command.description.split()[:6] == out.split("\n\n")[1].split()[:6]


def test_the_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        main_module.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for command in main_module.COMMANDS:
        assert command.name in out
    with pytest.raises(SystemExit) as missing:
        main_module.main([])  # a command is required
    assert missing.value.code == 2
    assert "required: command" in capsys.readouterr().err


def test_the_parser_and_every_help_build_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['safetensors'] = None\n"
        "import contextlib, io\n"
        "from attnserve.cli.main import COMMANDS, build_parser\n"
        "for command in COMMANDS:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        try:\n"
        "            build_parser().parse_args([command.name, '--help'])\n"
        "        except SystemExit as exit_:\n"
        "            assert exit_.code == 0, command.name\n"
        "heavy = [m for m in ('models.commands', 'models.caption_commands', 'export.commands')\n"
        "         if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


class _Echo(Subcommand):
    """A command of the protocol's own: refuses --count below 1, fails on --count 13."""

    name = "echo"
    help = "print the count"
    calls: ClassVar[list[str]] = []

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--count", type=int, default=None)

    def check(self, args: argparse.Namespace) -> None:
        self.calls.append("check")
        if args.count is not None and args.count < 1:
            self.parser.error("--count: at least 1")
        if args.count is None:
            args.count = 1

    def run(self, args: argparse.Namespace) -> int:
        self.calls.append("run")
        if args.count == 13:
            raise Failure("thirteen")
        print(args.count)
        return 0


@pytest.fixture
def echo(monkeypatch):
    _Echo.calls = []
    monkeypatch.setattr(main_module, "COMMANDS", (_Echo,))
    return _Echo


def test_main_checks_then_runs_the_command_named(echo, capsys):
    assert main_module.main(["echo"]) == 0  # check completed the default
    assert main_module.main(["echo", "--count", "3"]) == 0
    assert capsys.readouterr().out.split() == ["1", "3"]
    assert echo.calls == ["check", "run", "check", "run"]


def test_a_check_refusal_is_a_usage_error_and_nothing_runs(echo, capsys):
    with pytest.raises(SystemExit) as exit_:
        main_module.main(["echo", "--count", "0"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: attnserve echo") and "error: --count: at least 1" in err
    assert echo.calls == ["check"]


def test_a_failure_is_one_line_on_stderr_and_status_1(echo, capsys):
    assert main_module.main(["echo", "--count", "13"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "error: thirteen\n" and captured.out == ""


def test_the_base_command_takes_no_arguments_checks_nothing_and_cannot_run():
    class Bare(Subcommand):
        name = "bare"
        help = "nothing"

    parser = argparse.ArgumentParser(prog="attnserve")
    command = Bare()
    sub = command.subparser_init(parser.add_subparsers(dest="command"))
    assert sub is command.parser and sub.description is None
    args = parser.parse_args(["bare"])
    assert args.handler is command and vars(args) == {"command": "bare", "handler": command}
    command.check(args)
    assert vars(args) == {"command": "bare", "handler": command}  # left as it was
    with pytest.raises(NotImplementedError, match="bare"):
        command.run(args)
    with pytest.raises(SystemExit):
        parser.parse_args(["bare", "--anything"])
