"""Writes a model version into a model repository (layout in service.runtime.repository)."""

from __future__ import annotations

import copy
import shutil
from functools import partial
from importlib.metadata import version
from pathlib import Path

import onnxruntime
import torch

from export.builder import REVISION
from export.graph_files import share_weights
from export.kinds import ExportKind, export_kind
from export.onnx_export import OPSET, interface_of
from export.ops import write_ops
from export.quantize import quantize_int8, quantize_int8_one_row
from service.runtime.graphs import IN_PLACE, LEAN_STEP, ONE_ROW_STEP, STATIC
from service.runtime.repository import TOKENIZER, ModelVersion, verify, write_manifest
from service.runtime.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_PIECES, UNK_ID

METHODS = ("traced", "built")
INT8_SCALES = ("per-channel", "per-tensor")  # the first is the default


def _versions() -> dict:
    return {
        "torch": torch.__version__,
        "onnx": version("onnx"),
        "onnxruntime": onnxruntime.__version__,  # the onnxruntime or onnxruntime-gpu package
        "opset": OPSET,
    }


def special_tokens() -> dict:
    ids = {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID}
    return {name: {"id": i, "piece": SPECIAL_PIECES[i]} for name, i in ids.items()}


def float_graphs(
    kind: ExportKind, model, directory: Path, dtype: torch.dtype, method: str
) -> dict[str, Path]:
    """The graphs of `model` in `dtype` (torch.float32 or torch.float16), made by `method`
    into the variant's folder of `directory`; the caller's model keeps its float32 weights."""
    out = directory / ("fp16" if dtype == torch.float16 else "fp32")
    if method == "built":
        return kind.built(model, out, dtype)
    if dtype == torch.float16:
        return kind.traced(copy.deepcopy(model).half(), out, dtype)
    return kind.traced(model.float(), out, dtype)


def int8_graphs(
    kind: ExportKind, fp32: dict[str, Path], directory: Path, per_channel: bool
) -> dict[str, Path]:
    """Every fp32 graph but the static steps (those are for CUDA graphs) quantised into
    `directory`/int8 where the kind says (`int8_nodes`), and every lean step's one-row form."""
    int8 = {
        k: quantize_int8(p, directory / "int8" / p.name, per_channel, partial(kind.int8_nodes, k))
        for k, p in fp32.items()
        if not k.startswith(STATIC)
    }
    for prefix in ("", IN_PLACE):
        if prefix + LEAN_STEP in fp32:
            one_row = directory / "int8" / f"{prefix}{ONE_ROW_STEP}.onnx"
            quantize_int8_one_row(fp32[prefix + LEAN_STEP], one_row)
            int8[prefix + ONE_ROW_STEP] = one_row
    return int8


def share_each_variant(made: dict[str, dict[str, Path]]) -> None:
    """Each variant's graphs of `made` (by name, a folder a variant) made to read their
    weights from one file in its folder, each weight once (export.graph_files.share_weights)."""
    for graphs in made.values():
        share_weights(graphs.values())


def staging(directory: Path) -> Path:
    """Where the version bound for `directory` is written and certified: a hidden name beside
    it, which a server watching the repository does not read (manifests in
    service.runtime.repository)."""
    return directory.parent / f".incoming-{directory.name}"


def publish(staged: Path, directory: Path) -> Path:
    """Renames a version written and certified at `staged` into place, replacing the version
    there: a watching server sees it whole, its certificate included, or not at all."""
    if directory.exists():
        replaced = directory.parent / f".replaced-{directory.name}"
        shutil.rmtree(replaced, ignore_errors=True)
        directory.rename(replaced)
        staged.rename(directory)
        shutil.rmtree(replaced)
    else:
        staged.rename(directory)
    return directory


def write_version(
    model,
    tokenizer_file: Path,
    directory: Path,
    name: str,
    model_version: str,
    variants: tuple[str, ...] = ("fp32", "int8"),
    source: dict | None = None,
    method: str = "built",
    int8_scales: str = INT8_SCALES[0],
    grammar: dict | None = None,
) -> ModelVersion:
    """Exports every variant into `directory` and writes the manifest (no parity yet).
    `method`: how the float graphs (and the int8 ones quantised from the fp32 ones) are made,
    "traced" (torch.export) or "built" (op by op where export.builder writes them);
    `int8_scales`: one int8 scale per output channel (the default: with the norms smoothed,
    the closer to fp32 on every test part of the translator), or one per weight (a few per
    cent faster); `grammar`: the model's output grammar in token ids
    (models.checkpoint.checkpoint_grammar), enforced by every engine that serves the version."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    if method not in METHODS:
        raise ValueError(f"method {method!r}: one of {METHODS}")
    if int8_scales not in INT8_SCALES:
        raise ValueError(f"int8_scales {int8_scales!r}: one of {INT8_SCALES}")
    kind = export_kind(model)
    made = {"fp32": float_graphs(kind, model, directory, torch.float32, method)}
    if "int8" in variants:
        made["int8"] = int8_graphs(kind, made["fp32"], directory, int8_scales == "per-channel")
    if "fp16" in variants:
        made["fp16"] = float_graphs(kind, model, directory, torch.float16, method)
    share_each_variant(made)
    graphs = {v: {k: str(p.relative_to(directory)) for k, p in g.items()} for v, g in made.items()}
    shutil.copyfile(tokenizer_file, directory / TOKENIZER)
    ops = write_ops(directory, len(interface_of(model).memory_tensors))
    manifest = {
        "model": {
            "name": name,
            "version": model_version,
            "kind": kind.name,
            "config": model.config.to_dict(),
        },
        "interface": interface_of(model).to_dict(),
        "special_tokens": special_tokens(),
        "limits": kind.limits(model),
        "languages": kind.languages(model),
        "preprocessor": kind.preprocessor(model),
        **({"grammar": grammar} if grammar else {}),
        "graphs": graphs,
        "graphs_made": dict.fromkeys(graphs, method),
        **({"graphs_revision": REVISION} if method == "built" else {}),
        **({"int8_scales": int8_scales} if "int8" in graphs else {}),
        "ops": ops,
        "tokenizer": TOKENIZER,
        "versions": _versions(),
        "source": source or {},
    }
    write_manifest(directory, manifest)
    return verify(directory)
