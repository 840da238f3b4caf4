"""`serve`: the gRPC server on a model repository; `repository`: its versions listed or
verified. Both torch-free."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from dataclasses import fields
from pathlib import Path

from attnserve.cli.render import encodes_all
from attnserve.cli.subcommand import Subcommand

SECRET_SETTINGS = ("auth_tokens",)
FLAG_HELP = {
    "tls_cert": "PEM certificate chain: serve gRPC over TLS (with --tls-key)",
    "tls_key": "PEM private key of --tls-cert",
    "tls_client_ca": "PEM CA bundle: mutual TLS, clients show a certificate it signed",
    "auth_tokens": "bearer tokens 'TOKEN [SERVICE,...]' separated by ';' (prefer the "
    "environment or a file: flags are visible to other users)",
    "auth_tokens_file": "file of bearer tokens, one 'TOKEN [SERVICE,...]' a line",
    "listen": "gRPC HOST:PORT (port 0: the OS chooses)",
    "metrics_listen": "Prometheus HOST:PORT",
    "http_listen": "HTTP/JSON API, LibreTranslate's API and the page on HOST:PORT ('': off)",
    "http_files": "folder where files translated over HTTP wait for their download (default: "
    "a temporary folder)",
    "http_root_path": "path a reverse proxy serves the HTTP API at, e.g. /attnserve, stripped "
    "by the proxy: the page, /docs and the server's links carry it ('': the root)",
    "http_trusted_proxies": "addresses and networks, comma-separated ('*': any, '': none), whose "
    "X-Forwarded-Proto the HTTP API believes: https links behind a proxy ending TLS "
    "(default: 127.0.0.1,::1)",
    "repository": "model repository root",
    "workers": "worker processes (0: one per usable core, or per GPU)",
    "fronts": "gRPC front processes sharing the port and every worker (0: one per 4 usable "
    "cores, at most 4)",
    "batching": "continuous or request",
    "steps_ahead": "greedy steps run back to back on the device between two looks of the host "
    "(the static step; 1: every step)",
    "ahead_wait_ms": "the longest a run of steps ahead lasts, at the last run's pace",
    "ready_file": "write the ports (JSON) here once serving",
    "ray": "Ray's address (auto, HOST:PORT, ray://HOST:PORT): the workers as Ray Serve replicas "
    "on that cluster (the ray extra)",
    "max_replicas": "Ray Serve autoscales the replicas up to this (0: min_replicas)",
}


class Serve(Subcommand):
    name = "serve"
    help = "serve the model repository over gRPC (and HTTP with --http-listen)"
    description = (
        "Settings: embedded defaults, then --config FILE (TOML), then ATTNSERVE_* environment "
        "variables, then these flags."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from service.front.config import ServerConfig

        parser.add_argument("--config", type=Path, help="TOML file of settings")
        parser.add_argument("--print-config", action="store_true", help="print the settings, exit")
        for field in fields(ServerConfig):  # a flag per setting
            flag = "--" + field.name.replace("_", "-")
            parser.add_argument(flag, dest=field.name, default=None, help=FLAG_HELP.get(field.name))

    def run(self, args: argparse.Namespace) -> int:
        from service.front.config import ServerConfig, load_config
        from service.front.server import serve
        from service.runtime.errors import ServiceError

        logging.basicConfig(format="attnserve: %(message)s", level=logging.INFO, stream=sys.stderr)
        overrides = {f.name: getattr(args, f.name) for f in fields(ServerConfig)}
        try:
            config = load_config(args.config, overrides=overrides)
            if args.print_config:
                _print_config(config)
                return 0
            return asyncio.run(serve(config))
        except ServiceError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2


def _print_config(config) -> None:
    """The settings as TOML (secrets named, not shown), then what auto chose, as comments so
    that the output stays a configuration file."""
    for field in fields(config):
        value = getattr(config, field.name)
        if field.name in SECRET_SETTINGS and value:
            print(f"# {field.name} is set (not shown)")
        elif value is not None:
            print(f"{field.name} = {_toml(value)}")
    for line in _choices(config):
        print(f"# {line}")


def _choices(config) -> list[str]:
    """The device, the front and worker processes, how the cache is carried, and the variant
    of each model version in the repository, with why: what the server logs at start-up (its
    manifests are read here, not verified)."""
    from service.front.config import choice_lines
    from service.runtime.repository import manifests

    device, why = config.device_choice()
    variants, problems = {}, []
    for path in manifests(Path(config.repository)):
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
            key = f"{manifest['model']['name']}/{manifest['model']['version']}"
        except (OSError, ValueError, KeyError, TypeError) as error:
            problems.append(f"{path}: unreadable manifest ({error})")
            continue
        variants[key] = config.variant_choice(device, manifest)
    if not variants and not problems:
        problems.append(f"no model version under {config.repository}: no variant chosen")
    fronts, workers = config.front_choice(), config.worker_choice(device)
    return choice_lines(device, why, variants, config, fronts, workers) + problems


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | Path):  # a TOML basic string: JSON's escapes
        return json.dumps(str(value), ensure_ascii=False)
    return str(value)


class Repository(Subcommand):
    name = "repository"
    help = "list or verify the model versions of a repository"
    description = (
        "list: every version with its kind, variants and certificate; verify: also checks "
        "every file against its manifest hash (exit status 1 on any problem). A server checks "
        "a new version the same way, then decodes its golden set."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from service.front.config import DEFAULT_REPOSITORY

        parser.add_argument("action", choices=("list", "verify"))
        parser.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY)
        parser.add_argument("--json", action="store_true", help="one JSON object a version")

    def run(self, args: argparse.Namespace) -> int:
        from service.runtime.repository import manifests

        found = manifests(Path(args.repository))
        if not found:
            print(f"error: no model version under {args.repository}", file=sys.stderr)
            return 1
        failed = 0
        for path in found:
            row = _version_row(path, args.action == "verify")
            failed += "problem" in row
            if args.json:
                print(json.dumps(row, ensure_ascii=not encodes_all(sys.stdout)))
            else:
                shown = [f"{k}={v}" for k, v in row.items() if k != "directory"]
                print(f"{row['directory']}: " + " ".join(shown))
        return 1 if failed else 0


def _version_row(manifest_path: Path, verify: bool) -> dict:
    """What `repository` shows of one version: its manifest's summary, or its problem."""
    from service.front.versions import certified
    from service.paths import file_name
    from service.runtime.errors import ModelRepositoryError
    from service.runtime.repository import layout_problems, revision
    from service.runtime.repository import verify as verified

    row = {"directory": file_name(manifest_path.parent)}
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        if not isinstance(manifest, dict):
            raise ModelRepositoryError("the manifest is not a JSON object")
        if problems := layout_problems(manifest):
            raise ModelRepositoryError("; ".join(problems))
        model = manifest["model"]
        parity = manifest.get("parity") or {}
        row |= {
            "model": model["name"],
            "version": model["version"],
            "revision": revision(manifest),  # as the server's workers name the version
            "kind": model["kind"],
            "variants": sorted(manifest.get("graphs", {})),
            "graphs_made": manifest.get("graphs_made", {}),
            "certificate": "passed" if parity.get("passed") is True else "missing or failed",
            "megabytes": round(_size(manifest_path.parent) / 1e6, 1),
        }
        if verify:
            certified(verified(manifest_path.parent))
            row["verified"] = "hashes and certificate"
    except (ModelRepositoryError, OSError, ValueError, KeyError, TypeError) as error:
        row["problem"] = file_name(str(error))  # it may name the version's files
    return row


def _size(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


COMMANDS = (Serve, Repository)
