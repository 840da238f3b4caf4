"""The parity suite of one model version, and the certificate it writes into the manifest.

graph parity     every output of both graphs, per variant, on many shapes
decode parity    whole decodes of the test split: ORT fp32 greedy and beam 4 equal PyTorch;
                 cached equals uncached; a row alone equals the row in a padded batch;
                 int8 loses at most MAX_INT8_LOSS BLEU and chrF against fp32
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from export.decode_parity import NEAR_TIE, compare_decodes, decode_all, quality_loss
from export.parity import graph_parity
from models.checkpoint import load_checkpoint
from models.reference import TorchEngine
from service.decoding import DecodingOptions
from service.inference import UncachedInference
from service.onnx_engine import OnnxEngine
from service.repository import GOLDEN, ModelVersion, verify, write_manifest

MAX_INT8_LOSS = 0.5  # BLEU and chrF points
MIN_SENTENCES = 200
GOLDEN_SENTENCES = 4
GREEDY = DecodingOptions(beam_size=1, max_length=160)
BEAM = DecodingOptions(beam_size=4, max_length=160)


def cpu_variants(model_version: ModelVersion) -> list[str]:
    """fp16 graphs are checked only where a GPU runs them (tests marked gpu)."""
    return [v for v in model_version.manifest["graphs"] if v != "fp16"]


def graph_certificate(model, model_version: ModelVersion, variants: list[str]) -> dict:
    return {v: graph_parity(model, OnnxEngine(model_version, v)) for v in variants}


def decode_certificate(model, tokenizer, model_version, sources, references) -> dict:
    """Every whole-decode claim on `sources` (token ids) with their reference texts. ORT fp32
    greedy is decoded once and serves every claim that compares against it."""
    max_source = model.config.max_length
    torch_engine, fp32 = TorchEngine(model), OnnxEngine(model_version, "fp32")
    fp32_greedy = decode_all(fp32, sources, GREEDY, max_source)

    def self_check(setting: str, **candidate_args):  # ORT fp32 greedy decoded another way
        return compare_decodes(
            fp32, fp32, sources, GREEDY, max_source, setting, expected=fp32_greedy, **candidate_args
        )

    reports = [
        compare_decodes(
            torch_engine,
            fp32,
            sources,
            GREEDY,
            max_source,
            "onnxruntime fp32 greedy vs pytorch",
            actual=fp32_greedy,
        ),
        compare_decodes(
            torch_engine, fp32, sources, BEAM, max_source, "onnxruntime fp32 beam4 vs pytorch"
        ),
        self_check("onnxruntime cached vs uncached", inference_type=UncachedInference),
        self_check("onnxruntime padded batch vs alone", batch=1),
    ]
    certificate = {"decodes": [r.to_dict() for r in reports]}
    if "int8" in model_version.manifest["graphs"]:
        int8 = decode_all(OnnxEngine(model_version, "int8"), sources, GREEDY, max_source)
        loss = quality_loss(tokenizer, references, fp32_greedy, int8)
        loss["passed"] = loss["bleu_loss"] <= MAX_INT8_LOSS and loss["chrf_loss"] <= MAX_INT8_LOSS
        certificate["int8_vs_fp32"] = loss
    return certificate


def golden_set(model_version: ModelVersion, sources: list[list[int]]) -> list[dict]:
    """Greedy tokens of a few sources per variant, for the runtime's start-up check."""
    golden = []
    for variant in cpu_variants(model_version):
        engine = OnnxEngine(model_version, variant)
        hypotheses = decode_all(engine, sources, GREEDY, model_version.config["max_length"])
        golden += [
            {
                "variant": variant,
                "source_ids": s,
                "expected_ids": h.tokens,
                "max_length": GREEDY.max_length,
            }
            for s, h in zip(sources, hypotheses, strict=True)
        ]
    return golden


def run_suite(model_version: ModelVersion, checkpoint: Path, sources, references) -> dict:
    """Every parity claim of one model version against its PyTorch checkpoint."""
    if len(sources) < MIN_SENTENCES:
        raise ValueError(f"parity needs at least {MIN_SENTENCES} sentences, got {len(sources)}")
    start = time.perf_counter()
    model, tokenizer = load_checkpoint(checkpoint)
    certificate = {
        "graphs": graph_certificate(model, model_version, cpu_variants(model_version)),
        **decode_certificate(model, tokenizer, model_version, sources, references),
        "sentences": len(sources),
        "near_tie": NEAR_TIE,
        "max_int8_loss": MAX_INT8_LOSS,
    }
    checks = [g["passed"] for g in certificate["graphs"].values()]
    checks += [d["passed"] for d in certificate["decodes"]]
    checks += [certificate["int8_vs_fp32"]["passed"]] if "int8_vs_fp32" in certificate else []
    certificate["passed"] = all(checks)
    certificate["seconds"] = round(time.perf_counter() - start, 1)
    return certificate


def certify(model_version: ModelVersion, checkpoint: Path, sources, references) -> dict:
    """Runs the suite, writes the golden set and the certificate, re-hashes; returns it."""
    certificate = run_suite(model_version, checkpoint, sources, references)
    directory = model_version.directory
    golden = golden_set(model_version, sources[:GOLDEN_SENTENCES])
    (directory / GOLDEN).write_text(json.dumps(golden) + "\n")
    kept = {k: v for k, v in model_version.manifest.items() if k not in ("files", "format_version")}
    write_manifest(directory, {**kept, "parity": certificate})
    verify(directory)
    return certificate
