"""Writes a model version into a model repository (layout in service.runtime.repository)."""

from __future__ import annotations

import copy
import shutil
from importlib.metadata import version
from pathlib import Path

import onnxruntime
import torch

from export.builder import build_model
from export.onnx_export import OPSET, export_model, interface_of
from export.ops import write_ops
from export.quantize import quantize_int8, quantize_int8_one_row
from models.captioner import Captioner
from models.checkpoint import kind_of
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


def preprocessor(model) -> dict:
    """How a request's input becomes the encoder's input."""
    if isinstance(model, Captioner):
        c = model.config
        return {
            "type": "image",
            "input": "pixels",
            "size": [c.image_size, c.image_size],
            "channels": "RGB",
            "layout": "NCHW",
            "resize": "bilinear, the whole image to the square (no crop)",
            "scale": "x / 255, float32 in [0, 1]",
            "normalisation": {"mean": list(c.pixel_mean), "std": list(c.pixel_std),
                              "where": "inside the encoder graph"},
            "grid": [c.grid, c.grid],
        }  # fmt: skip
    return {"type": "sentencepiece", "file": TOKENIZER, "appends": "</s>"}


def limits(model) -> dict:
    if isinstance(model, Captioner):
        return {"max_output_tokens": model.config.max_length}
    return {
        "max_source_tokens": model.config.max_length,
        "max_output_tokens": model.config.max_length,
    }


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
) -> ModelVersion:
    """Exports every variant into `directory` and writes the manifest (no parity yet).
    `method`: how the float graphs (and the int8 ones quantised from the fp32 ones) are made,
    "traced" (torch.export) or "built" (op by op where export.builder writes them);
    `int8_scales`: one int8 scale per output channel (the default: with the norms smoothed,
    the closer to fp32 on every test part of the translator), or one per weight (a few per
    cent faster)."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    graphs = {}
    if method not in METHODS:
        raise ValueError(f"method {method!r}: one of {METHODS}")
    if int8_scales not in INT8_SCALES:
        raise ValueError(f"int8_scales {int8_scales!r}: one of {INT8_SCALES}")
    if method == "built":
        fp32 = build_model(model.float(), directory / "fp32")
    else:
        fp32 = export_model(model.float(), directory / "fp32", torch.float32)
    graphs["fp32"] = {k: str(p.relative_to(directory)) for k, p in fp32.items()}
    if "int8" in variants:
        per_channel = int8_scales == "per-channel"
        graphs["int8"] = {
            k: str(
                quantize_int8(p, directory / "int8" / p.name, per_channel).relative_to(directory)
            )
            for k, p in fp32.items()
            if not k.startswith(STATIC)  # the static steps are for CUDA graphs
        }
        for prefix in ("", IN_PLACE):  # every lean step's one-row form
            if prefix + LEAN_STEP in fp32:
                one_row = directory / "int8" / f"{prefix}{ONE_ROW_STEP}.onnx"
                quantize_int8_one_row(fp32[prefix + LEAN_STEP], one_row)
                graphs["int8"][prefix + ONE_ROW_STEP] = str(one_row.relative_to(directory))
    if "fp16" in variants:
        if method == "built":
            fp16 = build_model(model, directory / "fp16", torch.float16)
        else:
            half = copy.deepcopy(model).half()  # the caller's model keeps its fp32 weights
            fp16 = export_model(half, directory / "fp16", torch.float16)
        graphs["fp16"] = {k: str(p.relative_to(directory)) for k, p in fp16.items()}
    shutil.copyfile(tokenizer_file, directory / TOKENIZER)
    ops = write_ops(directory, len(interface_of(model).memory_tensors))
    manifest = {
        "model": {
            "name": name,
            "version": model_version,
            "kind": kind_of(model),
            "config": model.config.to_dict(),
        },
        "interface": interface_of(model).to_dict(),
        "special_tokens": special_tokens(),
        "limits": limits(model),
        "preprocessor": preprocessor(model),
        "graphs": graphs,
        "graphs_made": dict.fromkeys(graphs, method),
        **({"int8_scales": int8_scales} if "int8" in graphs else {}),
        "ops": ops,
        "tokenizer": TOKENIZER,
        "versions": _versions(),
        "source": source or {},
    }
    write_manifest(directory, manifest)
    return verify(directory)
