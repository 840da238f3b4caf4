"""The model versions a benchmark runs: the newest of each kind in a repository (the load
benchmark), or the translator exported from a checkpoint with `attnserve export`'s own
function and certified, or a given version of it (the GPU benchmark)."""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
from pathlib import Path

from bench.lib.gpu_plan import Plan
from bench.lib.paths import TRANSLATOR_DATA
from service.runtime.errors import ModelRepositoryError
from service.runtime.repository import GOLDEN, manifests, sha256, verify

KINDS = {"transformer": "translator", "captioner": "captioner"}  # manifest kind: bench model


def model_versions(repository: Path, wanted: list[str]) -> dict:
    """{translator, captioner: the newest version of that kind in the repository}."""
    versions = {}
    for manifest in manifests(repository):
        kind = json.loads(manifest.read_text()).get("model", {}).get("kind")
        if KINDS.get(kind) in wanted:
            versions[KINDS[kind]] = manifest.parent
    for model in wanted:
        if model not in versions:
            raise SystemExit(
                f"no {model} in the model repository {repository}; build one with: attnserve "
                f"export {model} --out {repository} --variants fp32,int8"
            )
    return {model: verify(directory) for model, directory in versions.items()}


def _usable(
    directory: Path, variants: tuple[str, ...], checkpoint: Path, graphs: str
) -> dict | None:
    """The manifest of a verified version exported from `checkpoint` with every variant made
    by `graphs` and a golden set, else None."""
    from models.checkpoint import WEIGHTS

    try:
        version = verify(directory)
    except ModelRepositoryError:
        return None
    source = version.manifest.get("source", {}).get("sha256")
    if source != sha256(checkpoint / WEIGHTS) or not (directory / GOLDEN).is_file():
        return None
    made = version.manifest.get("graphs_made", {})
    if any(made.get(v, "traced") != graphs for v in variants):
        return None
    return version.manifest if set(variants) <= set(version.manifest["graphs"]) else None


def export_repository(
    root: Path, variants: tuple[str, ...], sentences: int, checkpoint: Path, graphs: str
) -> dict:
    """Exports the translator `checkpoint` into root/translator/1 with `attnserve export`'s
    own function (graphs, parity certificate over `sentences` test sentences, golden set)."""
    from export import certify, commands

    arguments = argparse.Namespace(
        checkpoint=checkpoint,
        out=root,
        name="translator",
        version="1",
        variants=",".join(variants),
        data=TRANSLATOR_DATA,
        sentences=sentences,
        graphs=graphs,
    )
    start = time.perf_counter()
    floor = min(certify.MIN_SENTENCES, sentences)
    with (  # the floor the export and its certificate read
        contextlib.redirect_stdout(sys.stderr),
        _attribute(certify, "MIN_SENTENCES", floor),
    ):
        status = commands.export(arguments)
    seconds = time.perf_counter() - start
    return {"export_status": status, "export_seconds": seconds}


@contextlib.contextmanager
def _attribute(owner, name: str, value):
    """`owner.name` set to `value` inside the block."""
    previous = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, previous)


def _given(args, variants: tuple[str, ...], served: Path) -> dict:
    """--repository: a version exported from --checkpoint with every variant, copied under a
    repository root of its own (`served`) for the server."""
    from models.checkpoint import WEIGHTS

    version = verify(args.repository)
    missing = set(variants) - set(version.manifest["graphs"])
    if missing:
        raise SystemExit(f"{args.repository}: no {sorted(missing)} graphs")
    recorded = version.manifest.get("source", {}).get("sha256")
    if recorded not in (None, sha256(args.checkpoint / WEIGHTS)):
        raise SystemExit(f"{args.repository} was not exported from {args.checkpoint}")
    shutil.rmtree(served, ignore_errors=True)
    shutil.copytree(args.repository, served / "translator" / "1")
    return {"directory": str(args.repository), "exported": False}


def _certificate(parity: dict) -> dict:
    """The export's parity certificate, as the report shows it."""
    return {
        "passed": parity.get("passed"),
        "sentences": parity.get("sentences"),
        "parts": parity.get("parts"),
        "seconds": parity.get("seconds"),
        "decodes": {
            d["setting"]: f"{d['identical']}/{d['sentences']} identical"
            for d in parity.get("decodes", [])
        },
    }


def repository_section(args, plan: Plan, workdir: Path, variants: tuple[str, ...]) -> dict:
    """The version the benchmark runs (given, reused from --workdir, or exported), and a
    repository root holding only it, for the server."""
    served = workdir / "served"
    if args.repository is not None:
        part = _given(args, variants, served)
    else:
        directory = workdir / "repository" / "translator" / "1"
        part = {"directory": str(directory), "exported": False}
        if _usable(directory, variants, args.checkpoint, args.graphs) is None:
            print(f"exporting {args.checkpoint} ({', '.join(variants)})", file=sys.stderr)
            exported = export_repository(
                directory.parents[1], variants, plan.export_sentences, args.checkpoint, args.graphs
            )
            part |= {"exported": True} | exported
        served = directory.parents[1]
    version = verify(Path(part["directory"]))
    return part | {
        "checkpoint": str(args.checkpoint),
        "served_root": str(served),
        "variants": sorted(version.manifest["graphs"]),
        "graphs_made": version.manifest.get("graphs_made", {}),
        "config": version.config,
        "certificate": _certificate(version.manifest.get("parity", {})),
        "versions": version.manifest.get("versions", {}),
    }
