"""`attnserve serve` and `attnserve repository` (`attnserve.cli.serve`): a flag per setting,
the settings from embedded defaults, a TOML file, ATTNSERVE_* variables and flags in that
order, printed as a configuration file that reads back the same with secrets left out; and
a repository's versions listed and verified."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tomllib
from dataclasses import fields, replace
from pathlib import Path

import pytest
from helpers import ROOT

from attnserve.cli import main, serve
from attnserve.cli.main import build_parser
from service.front.config import ENV_PREFIX, ServerConfig, load_config
from service.runtime.repository import revision


@pytest.fixture
def clean_environment(monkeypatch):
    """No ATTNSERVE_* setting from the machine the tests run on."""
    for field in fields(ServerConfig):
        monkeypatch.delenv(ENV_PREFIX + field.name.upper(), raising=False)
    return monkeypatch


def _print_config(capsys, *flags: str) -> tuple[int, str]:
    code = main(["serve", "--print-config", "--device", "cpu", *flags])
    return code, capsys.readouterr().out


def test_serve_has_a_flag_per_setting_left_unset_by_default():
    args = build_parser().parse_args(["serve"])
    assert all(getattr(args, f.name) is None for f in fields(ServerConfig))
    args = build_parser().parse_args(["serve", "--max-batch-rows", "8", "--tls-client-ca", "c"])
    assert (args.max_batch_rows, args.tls_client_ca) == ("8", "c")  # read by load_config
    assert set(serve.FLAG_HELP) <= {f.name for f in fields(ServerConfig)}


def test_flags_win_over_the_environment_which_wins_over_the_file(
    clean_environment, tmp_path, capsys
):
    file = tmp_path / "attnserve.toml"
    file.write_text('workers = 2\nfronts = 3\nlisten = "127.0.0.1:1"\n', encoding="utf-8")
    clean_environment.setenv("ATTNSERVE_FRONTS", "5")
    clean_environment.setenv("ATTNSERVE_MAX_BATCH_ROWS", "24")
    clean_environment.setenv("ATTNSERVE_DRAIN_SECONDS", "")  # empty: not set
    flags = ["--config", str(file), "--repository", str(tmp_path), "--max-batch-rows", "12"]
    code, out = _print_config(capsys, *flags)
    assert code == 0
    settings = tomllib.loads(out)  # the choices are comments: still a configuration file
    assert settings["workers"] == 2  # the file's
    assert settings["fronts"] == 5  # the environment's over the file's
    assert settings["max_batch_rows"] == 12  # the flag's over the environment's
    assert settings["listen"] == "127.0.0.1:1"
    assert settings["drain_seconds"] == ServerConfig().drain_seconds
    assert settings["device"] == "cpu" and settings["repository"] == str(tmp_path)


def test_the_printed_settings_read_back_as_the_same_config(clean_environment, tmp_path, capsys):
    flags = ["--repository", str(tmp_path), "--io-binding", "true", "--ready-file", "r.json"]
    code, out = _print_config(capsys, *flags, "--latency-budget-seconds", "0.25")
    assert code == 0
    assert "io_binding = true" in out.splitlines() and 'ready_file = "r.json"' in out
    printed = tmp_path / "printed.toml"
    printed.write_text(out, encoding="utf-8")
    expected = replace(
        ServerConfig(),
        repository=tmp_path,
        device="cpu",
        io_binding=True,
        ready_file=Path("r.json"),
        latency_budget_seconds=0.25,
    )
    assert load_config(printed, environ={}) == expected


def test_secrets_are_named_not_shown(clean_environment, tmp_path, capsys):
    token = "t0ken-one-of-sixteen attnserve.v1.TranslationService"
    clean_environment.setenv("ATTNSERVE_AUTH_TOKENS", token)
    code, out = _print_config(capsys, "--repository", str(tmp_path))
    assert code == 0
    assert "# auth_tokens is set (not shown)" in out.splitlines()
    assert "t0ken-one" not in out
    _, unset = _print_config(capsys, "--repository", str(tmp_path), "--auth-tokens", "")
    assert tomllib.loads(unset)["auth_tokens"] == ""  # the empty flag's: no secret to hide
    assert "t0ken-one" not in unset and "is set (not shown)" not in unset


def test_the_choices_say_why_and_name_what_cannot_be_read(clean_environment, tmp_path, capsys):
    _, out = _print_config(capsys, "--repository", str(tmp_path), "--workers", "3")
    comments = [line for line in out.splitlines() if line.startswith("# ")]
    assert comments[0] == "# device cpu: set by the configuration"
    assert "# workers 3: set by the configuration" in comments
    assert comments[-1] == f"# no model version under {tmp_path}: no variant chosen"
    assert (
        "# encoder inline: auto on cpu: each worker has a core, which a thread would share"
        in comments
    )
    assert any(c.startswith("# step inline: a thread of its own saved no time") for c in comments)
    _, out = _print_config(
        capsys, "--repository", str(tmp_path), "--encoder", "thread", "--step", "thread"
    )
    comments = [line for line in out.splitlines() if line.startswith("# ")]
    assert "# encoder thread: set by the configuration" in comments
    assert any(c.startswith("# step thread: set by the configuration") for c in comments)
    manifest = tmp_path / "translator" / "1" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text("{not json", encoding="utf-8")
    _, out = _print_config(capsys, "--repository", str(tmp_path))
    assert out.splitlines()[-1].startswith(f"# {manifest}: unreadable manifest (")


def test_a_setting_that_cannot_be_read_is_an_error_and_status_2(
    clean_environment, tmp_path, capsys
):
    assert main(["serve", "--print-config", "--workers", "many"]) == 2
    assert capsys.readouterr().err == "error: configuration: workers: cannot read 'many'\n"
    file = tmp_path / "bad.toml"
    file.write_text("wrokers = 2\n", encoding="utf-8")
    assert main(["serve", "--print-config", "--config", str(file)]) == 2
    assert "unknown settings ['wrokers']" in capsys.readouterr().err
    clean_environment.setenv("ATTNSERVE_IO_BINDING", "sometimes")
    assert main(["serve", "--print-config"]) == 2
    assert "io_binding" in capsys.readouterr().err


def test_a_configuration_file_not_in_utf8_is_an_error_and_status_2(
    clean_environment, tmp_path, capsys
):
    """TOML is UTF-8: a file saved in latin-1 is named in one line, not a traceback."""
    file = tmp_path / "latin.toml"
    file.write_bytes('http_root_path = "/café"\n'.encode("latin-1"))
    assert main(["serve", "--print-config", "--config", str(file)]) == 2
    assert capsys.readouterr().err == (
        f"error: configuration file {file}: 'utf-8' codec can't decode byte 0xe9 in position"
        " 22: invalid continuation byte\n"
    )


def test_print_config_refuses_the_security_settings_serve_refuses(
    clean_environment, tmp_path, capsys
):
    pem, short, latin = tmp_path / "server.pem", tmp_path / "tokens", tmp_path / "latin"
    short.write_text("a-token-of-sixteen-chars\nshort\n", encoding="utf-8")
    latin.write_bytes("a-token-of-sixteen-chars-é\n".encode("latin-1"))
    refused = {
        ("--tls-cert", str(pem)): "tls_cert and tls_key go together",
        ("--tls-key", str(pem)): "tls_cert and tls_key go together",
        ("--tls-client-ca", str(pem)): "tls_client_ca needs tls_cert and tls_key",
        ("--metrics-tls-cert", str(pem)): "metrics_tls_cert and metrics_tls_key go together",
        ("--auth-tokens", "short"): "auth_tokens, entry 1: a token has 16 characters or more",
        ("--auth-tokens-file", str(short)): f"auth_tokens_file {short}, entry 2: a token has 16",
        ("--auth-tokens-file", str(tmp_path / "none")): f"auth_tokens_file {tmp_path / 'none'}: ",
        ("--auth-tokens-file", str(latin)): f"auth_tokens_file {latin}: 'utf-8' codec can't decode",
    }
    for flags, problem in refused.items():
        assert main(["serve", "--print-config", "--repository", str(tmp_path), *flags]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith(f"error: configuration: {problem}")
    both = ["--tls-cert", str(pem), "--auth-tokens", "short"]
    assert main(["serve", "--print-config", *both]) == 2  # every problem in one error
    assert "go together; auth_tokens, entry 1" in capsys.readouterr().err
    paired = ["--tls-cert", str(pem), "--tls-key", str(pem), "--tls-client-ca", str(pem)]
    code, _ = _print_config(capsys, "--repository", str(tmp_path), *paired)
    assert code == 0


def test_settings_are_written_as_toml_values():
    assert serve._toml(True) == "true" and serve._toml(False) == "false"
    assert serve._toml("0.0.0.0:50051") == '"0.0.0.0:50051"'
    assert serve._toml(Path("models/repo")) == '"models/repo"'
    assert serve._toml(16) == "16" and serve._toml(0.5) == "0.5"
    odd = ('C:\\modelos\\"v2"', Path('/srv/año "nuevo"\tbis'))  # quotes, backslashes, tabs
    for value in (True, "a:1", Path("p"), 16, 0.5, *odd):
        assert tomllib.loads(f"x = {serve._toml(value)}")["x"] == (
            str(value) if isinstance(value, Path) else value
        )


def _version(root: Path, name: str, version: str, passed: bool | None, size: int = 0) -> Path:
    directory = root / name / version
    directory.mkdir(parents=True)
    manifest = {
        "model": {"name": name, "version": version, "kind": name},
        "graphs": {"int8": {}, "fp32": {}},
        "graphs_made": {"fp32": "built"},
    }
    if passed is not None:
        manifest["parity"] = {"passed": passed}
    (directory / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (directory / "weights.bin").write_bytes(b"\0" * size)
    return directory


def test_repository_lists_each_version_with_its_certificate(tmp_path, capsys):
    _version(tmp_path, "captioner", "2", passed=None)
    _version(tmp_path, "translator", "1", passed=True, size=300_000)
    assert main(["repository", "list", "--repository", str(tmp_path), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["model"], r["version"]) for r in rows] == [("captioner", "2"), ("translator", "1")]
    captioner, translator = rows
    assert captioner["certificate"] == "missing or failed"
    assert translator["certificate"] == "passed" and translator["megabytes"] == 0.3
    assert translator["variants"] == ["fp32", "int8"] and translator["kind"] == "translator"
    assert translator["graphs_made"] == {"fp32": "built"}
    assert translator["directory"] == str(tmp_path / "translator" / "1")
    manifest = json.loads((tmp_path / "translator" / "1" / "manifest.json").read_text())
    assert translator["revision"] == revision(manifest) != captioner["revision"]
    assert "verified" not in translator and "problem" not in translator
    assert main(["repository", "list", "--repository", str(tmp_path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{tmp_path / 'captioner' / '2'}: model=captioner version=2 ")
    assert "directory=" not in first


def test_repository_reports_a_problem_per_version_and_exits_1(tmp_path, capsys):
    _version(tmp_path, "translator", "1", passed=True)
    broken = tmp_path / "translator" / "2"
    broken.mkdir()
    (broken / "manifest.json").write_text('{"model": {}}', encoding="utf-8")
    _version(tmp_path, "translator", ".incoming-3", passed=True)  # hidden: not read
    for name, manifest in (("4", "[]"), ("5", '{"model": {}, "parity": [true]}')):
        (tmp_path / "translator" / name).mkdir()
        (tmp_path / "translator" / name / "manifest.json").write_text(manifest)
    for action in ("list", "verify"):
        assert main(["repository", action, "--repository", str(tmp_path), "--json"]) == 1
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert len(rows) == 4 and ("problem" not in rows[0] or action == "verify")
        model = "model: an object with the texts name, version and kind expected"
        assert rows[1] == {"directory": str(broken), "problem": model}
        assert rows[2]["problem"] == "the manifest is not a JSON object"
        assert rows[3]["problem"].endswith(
            "; parity: a certificate with an object per variant's graphs expected"
        )


def test_repository_json_on_a_latin1_stdout_escapes_what_it_cannot_encode(tmp_path, monkeypatch):
    root = tmp_path / "modelos-ωμέγα"
    (root / "translator" / "1").mkdir(parents=True)
    (root / "translator" / "1" / "manifest.json").write_text("[]")
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="latin-1")
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main(["repository", "list", "--repository", str(root), "--json"]) == 1
    stdout.flush()
    (row,) = [json.loads(line) for line in stdout.buffer.getvalue().decode("latin-1").splitlines()]
    assert row["directory"] == str(root / "translator" / "1")


@pytest.mark.parametrize("action", ["list", "verify"])
def test_repository_json_names_a_directory_that_is_not_utf8_in_valid_json(
    tmp_path, monkeypatch, action
):
    """A repository under a name whose bytes are not UTF-8 (Python keeps them as surrogates)
    was written raw into the JSON, its directory and a problem naming it: bytes no JSON
    reader decodes. They are \\xNN escapes now, as an image's name is."""
    root = tmp_path / os.fsdecode(b"modelos-\xff")
    _version(root, "translator", "1", passed=True)
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="surrogateescape")
    monkeypatch.setattr(sys, "stdout", stdout)
    code = main(["repository", action, "--repository", str(root), "--json"])
    stdout.flush()
    (row,) = [json.loads(line) for line in stdout.buffer.getvalue().decode("utf-8").splitlines()]
    shown = str(tmp_path / "modelos-\\xff" / "translator" / "1")
    assert row["directory"] == shown
    if action == "verify":  # the version's files have no hashes to check
        assert code == 1 and shown in row["problem"], row
    else:
        assert code == 0 and "problem" not in row


def test_repository_verify_checks_each_version_against_its_manifest(tmp_path, capsys):
    _version(tmp_path, "translator", "1", passed=True)
    assert main(["repository", "verify", "--repository", str(tmp_path), "--json"]) == 1
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["problem"] and "verified" not in row
    assert row["certificate"] == "passed"  # the summary is read before the files are checked


def test_repository_without_versions_is_an_error(tmp_path, capsys):
    assert main(["repository", "list", "--repository", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err == f"error: no model version under {tmp_path / 'none'}\n"


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path):
    """`attnserve repository list | head -1`: the reader closes the pipe after one line; the
    command stops without a traceback."""
    for version in range(400):  # more lines than the pipe and stdout's buffer hold
        (tmp_path / "translator" / str(version)).mkdir(parents=True)
        (tmp_path / "translator" / str(version) / "manifest.json").write_text("[]")
    command = [sys.executable, "-m", "attnserve.cli", "repository", "list"]
    process = subprocess.Popen(
        [*command, "--repository", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdout.readline().startswith(str(tmp_path).encode())
    process.stdout.close()
    _, err = process.communicate(timeout=60)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
