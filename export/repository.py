"""Writes a model version into a model repository (layout in service.repository)."""

from __future__ import annotations

import shutil
from importlib.metadata import version
from pathlib import Path

import torch

from export.onnx_export import OPSET, export_transformer
from export.ops import write_ops
from export.quantize import quantize_int8
from models.transformer import Transformer
from service.repository import TOKENIZER, ModelVersion, verify, write_manifest


def _versions() -> dict:
    return {
        "torch": torch.__version__,
        "onnx": version("onnx"),
        "onnxruntime": version("onnxruntime"),
        "opset": OPSET,
    }


def write_version(
    model: Transformer,
    tokenizer_file: Path,
    directory: Path,
    name: str,
    model_version: str,
    variants: tuple[str, ...] = ("fp32", "int8"),
    source: dict | None = None,
) -> ModelVersion:
    """Exports every variant into `directory` and writes the manifest (no parity yet)."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    graphs = {}
    fp32 = export_transformer(model.float(), directory / "fp32", torch.float32)
    graphs["fp32"] = {k: str(p.relative_to(directory)) for k, p in fp32.items()}
    if "int8" in variants:
        graphs["int8"] = {
            k: str(quantize_int8(p, directory / "int8" / p.name).relative_to(directory))
            for k, p in fp32.items()
        }
    if "fp16" in variants:
        fp16 = export_transformer(model.half(), directory / "fp16", torch.float16)
        graphs["fp16"] = {k: str(p.relative_to(directory)) for k, p in fp16.items()}
        model.float()
    shutil.copyfile(tokenizer_file, directory / TOKENIZER)
    ops = write_ops(directory)
    manifest = {
        "model": {
            "name": name,
            "version": model_version,
            "kind": "transformer",
            "config": model.config.to_dict(),
        },
        "graphs": graphs,
        "ops": ops,
        "tokenizer": TOKENIZER,
        "versions": _versions(),
        "source": source or {},
    }
    write_manifest(directory, manifest)
    return verify(directory)
