"""The parity suite of one model version, and the certificate it writes into the manifest.

graph parity     every output of both graphs, per variant, on many shapes
decode parity    whole decodes of the test parts: ORT fp32 greedy and beam 4 equal PyTorch;
                 a row alone equals the row in a padded batch;
  translator     cached equals uncached; the cache written in place (as served) equals the
                 growing cache; int8 loses at most MAX_INT8_LOSS BLEU and chrF, over
                 all the sentences and on each test part, decoded in batches and, where the
                 variant has a one-row step, one sentence at a time
  captioner      the attention maps of identical decodes within MAX_ATTENTION_DIFFERENCE;
                 int8 loses at most MAX_CAPTION_INT8_LOSS exact-match and CIDEr points
                 (an LSTM's state is its own recurrence: there is no uncached form)
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from export.decode_parity import (
    NEAR_TIE,
    attention_difference,
    caption_quality_loss,
    compare_decodes,
    decode_all,
    quality_loss,
)
from export.parity import graph_parity
from models.checkpoint import load_checkpoint
from models.reference import reference_engine
from service.runtime.batch import joined
from service.runtime.decoding import DecodingOptions
from service.runtime.graphs import IN_PLACE, STATIC
from service.runtime.inference import UncachedInference
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.repository import GOLDEN, ModelVersion, verify, write_manifest

MAX_INT8_LOSS = 0.5  # BLEU and chrF points
MAX_CAPTION_INT8_LOSS = 1.0  # exact-match and CIDEr points
MAX_ATTENTION_DIFFERENCE = 1e-4  # fp32, any weight of any step
MIN_SENTENCES = 200
GOLDEN_SENTENCES = 4
GREEDY = DecodingOptions(beam_size=1, max_length=160)
INT8_CLAIMS = ("int8_vs_fp32", "int8_one_row_vs_fp32")  # as batched, and one row at a time
BEAM = DecodingOptions(beam_size=4, max_length=160)


def cpu_variants(model_version: ModelVersion) -> list[str]:
    """The variants the golden set holds (decoded on the CPU): all but fp16, which a server
    checks against fp32's golden tokens (service.worker.process.golden_check)."""
    return [v for v in model_version.manifest["graphs"] if v != "fp16"]


def parity_devices(model_version: ModelVersion) -> dict[str, str]:
    """Where each variant's graph parity is checked: fp32 and int8 on the CPU; fp16 on CUDA
    where onnxruntime has it, else on the CPU when its graphs are built op by op (float16
    kernels onnxruntime's CPU provider has), else not at all (traced fp16 graphs need a GPU)."""
    import onnxruntime

    devices = dict.fromkeys(cpu_variants(model_version), "cpu")
    if "fp16" in model_version.manifest["graphs"]:
        made = model_version.manifest.get("graphs_made", {}).get("fp16", "traced")
        if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
            devices["fp16"] = "cuda"
        elif made == "built":
            devices["fp16"] = "cpu"
    return devices


def graph_certificate(model, model_version: ModelVersion, devices: dict[str, str]) -> dict:
    """Per variant: its graphs against PyTorch, the growing steps and, where shipped, the
    steps whose cache is written in place, and those at a fixed capacity (static)."""
    certificate = {}
    for v, device in devices.items():
        engines = [OnnxEngine(model_version, v, device, cache="growing")]
        if model_version.has_graph(v, IN_PLACE + "decoder"):
            engines.append(OnnxEngine(model_version, v, device, cache="in_place"))
        if model_version.has_graph(v, STATIC + "decoder"):  # uncaptured: every shape case
            engines.append(OnnxEngine(model_version, v, device, cache="static", capture=False))
        certificate[v] = {**graph_parity(model, *engines), "device": device}
    return certificate


def decode_certificate(
    model, tokenizer, model_version, sources, references, parts: dict | None = None
) -> dict:
    """Every whole-decode claim on `sources` (token ids) with their reference texts. ORT fp32
    greedy is decoded once and serves every claim that compares against it. `parts` (name:
    count, in the order of `sources`): int8 must keep within the loss bound on each part as
    well as over all of them."""
    max_source = model.config.max_length
    # as served: the cache written in place where the version ships that step
    torch_engine, fp32 = reference_engine(model), OnnxEngine(model_version, "fp32")
    growing = fp32 if fp32.cache == "growing" else OnnxEngine(model_version, "fp32",
                                                                  cache="growing")  # fmt: skip
    fp32_greedy = decode_all(fp32, sources, GREEDY, max_source)

    def self_check(setting: str, candidate=fp32, **candidate_args):  # fp32 greedy another way
        return compare_decodes(fp32, candidate, sources, GREEDY, max_source, setting,
                               expected=fp32_greedy, **candidate_args)  # fmt: skip

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
        # only the growing step takes every position at once
        self_check("onnxruntime cached vs uncached", growing, inference_type=UncachedInference),
        self_check("onnxruntime padded batch vs alone", batch=1),
    ]
    if growing is not fp32:
        reports.append(self_check("onnxruntime cache in place vs growing", growing))
    if model_version.has_graph("fp32", STATIC + "decoder"):  # buckets of the continuous batch
        static = OnnxEngine(model_version, "fp32", cache="static")
        reports.append(self_check("onnxruntime static step vs cache in place", static,
                                  inference_type=joined))  # fmt: skip
    certificate = {"decodes": [r.to_dict() for r in reports]}
    if "int8" in model_version.manifest["graphs"]:
        int8 = OnnxEngine(model_version, "int8")
        decoded = decode_all(int8, sources, GREEDY, max_source)
        certificate["int8_vs_fp32"] = _int8_loss(tokenizer, references, fp32_greedy, decoded,
                                                 parts)  # fmt: skip
        if int8.one_row_decoder is not None:  # every step of one row: the one-row graph
            decoded = decode_all(int8, sources, GREEDY, max_source, batch=1)
            certificate["int8_one_row_vs_fp32"] = _int8_loss(
                tokenizer, references, fp32_greedy, decoded, parts
            )
    return certificate


def _int8_loss(tokenizer, references, fp32_greedy, int8_greedy, parts: dict | None) -> dict:
    """int8's BLEU and chrF loss against fp32 over all the sentences and on every part;
    passed if each is within MAX_INT8_LOSS."""
    loss = quality_loss(tokenizer, references, fp32_greedy, int8_greedy)
    checked = [loss]
    if parts and len(parts) > 1:
        loss["parts"], start = {}, 0
        for name, count in parts.items():
            window = slice(start, start + count)
            loss["parts"][name] = quality_loss(
                tokenizer, references[window], fp32_greedy[window], int8_greedy[window]
            )
            checked.append(loss["parts"][name])
            start += count
    loss["passed"] = all(
        part["bleu_loss"] <= MAX_INT8_LOSS and part["chrf_loss"] <= MAX_INT8_LOSS
        for part in checked
    )
    return loss


def caption_decode_certificate(model, tokenizer, model_version, images, references) -> dict:
    """The captioner's whole-decode claims on uint8 `images` with their reference captions."""
    torch_engine, fp32 = reference_engine(model), OnnxEngine(model_version, "fp32")
    greedy = DecodingOptions(beam_size=1, max_length=model.config.max_length)
    beam = DecodingOptions(beam_size=4, max_length=model.config.max_length)
    torch_greedy = decode_all(torch_engine, images, greedy, 0)
    fp32_greedy = decode_all(fp32, images, greedy, 0)
    reports = [
        compare_decodes(
            torch_engine, fp32, images, greedy, 0, "onnxruntime fp32 greedy vs pytorch",
            expected=torch_greedy, actual=fp32_greedy,
        ),
        compare_decodes(torch_engine, fp32, images, beam, 0, "onnxruntime fp32 beam4 vs pytorch"),
        compare_decodes(
            fp32, fp32, images, greedy, 0, "onnxruntime batch vs alone",
            expected=fp32_greedy, batch=1,
        ),
    ]  # fmt: skip
    attention = attention_difference(torch_greedy, fp32_greedy)
    attention["bound"] = MAX_ATTENTION_DIFFERENCE
    attention["passed"] = attention["max_abs"] <= MAX_ATTENTION_DIFFERENCE
    certificate = {"decodes": [r.to_dict() for r in reports], "attention": attention}
    if "int8" in model_version.manifest["graphs"]:
        int8 = decode_all(OnnxEngine(model_version, "int8"), images, greedy, 0)
        loss = caption_quality_loss(tokenizer, references, fp32_greedy, int8)
        loss["passed"] = (
            loss["exact_match_loss"] <= MAX_CAPTION_INT8_LOSS
            and loss["cider_loss"] <= MAX_CAPTION_INT8_LOSS
        )
        certificate["int8_vs_fp32"] = loss
    return certificate


def golden_sources(model_version: ModelVersion, sources) -> list:
    """How each golden source is written: token ids inline, or an image as a lossless PNG
    beside the manifest (golden/<i>.png), so the runtime reads back the very same pixels."""
    if model_version.manifest["model"]["kind"] != "captioner":
        return [{"source_ids": s} for s in sources]
    from PIL import Image

    (model_version.directory / "golden").mkdir(exist_ok=True)
    written = []
    for i, image in enumerate(sources):
        relative = f"golden/{i}.png"
        Image.fromarray(np.asarray(image, dtype=np.uint8)).save(model_version.directory / relative)
        written.append({"image": relative})
    return written


def golden_set(model_version: ModelVersion, sources) -> list[dict]:
    """Greedy tokens of a few sources per variant and per way of carrying the cache (a server
    may run either; int8 quantises each step's activations, so its tokens may differ between
    the two), for the runtime's start-up check: each source decoded alone, as the check
    decodes it (int8's dynamic activation scales, and its one-row step, make a row's tokens
    depend on the rows beside it)."""
    golden, inputs = [], golden_sources(model_version, sources)
    options = replace(GREEDY, max_length=min(GREEDY.max_length, model_version.config["max_length"]))
    for variant in cpu_variants(model_version):
        in_place = model_version.has_graph(variant, IN_PLACE + "decoder")
        caches = ["growing", "in_place"] if in_place else ["growing"]
        for cache in caches:
            engine = OnnxEngine(model_version, variant, cache=cache)
            max_source = model_version.config["max_length"]
            hypotheses = decode_all(engine, sources, options, max_source, batch=1)
            golden += [
                {
                    "variant": variant,
                    "cache": engine.cache,
                    **source,
                    "expected_ids": h.tokens,
                    "max_length": options.max_length,
                }
                for source, h in zip(inputs, hypotheses, strict=True)
            ]
    return golden


def run_suite(
    model_version: ModelVersion, checkpoint: Path, sources, references, parts: dict | None = None
) -> dict:
    """Every parity claim of one model version against its PyTorch checkpoint; `parts` says how
    many inputs come from each test part (recorded as given)."""
    if len(sources) < MIN_SENTENCES:
        raise ValueError(f"parity needs at least {MIN_SENTENCES} sentences, got {len(sources)}")
    start = time.perf_counter()
    model, tokenizer = load_checkpoint(checkpoint)
    captioner = model_version.manifest["model"]["kind"] == "captioner"
    if captioner:
        decodes = caption_decode_certificate(model, tokenizer, model_version, sources, references)
    else:
        decodes = decode_certificate(model, tokenizer, model_version, sources, references, parts)
    certificate = {
        "graphs": graph_certificate(model, model_version, parity_devices(model_version)),
        **decodes,
        "sentences": len(sources),
        "parts": parts or {"test": len(sources)},
        "near_tie": NEAR_TIE,
        "max_int8_loss": MAX_CAPTION_INT8_LOSS if captioner else MAX_INT8_LOSS,
    }
    checks = [g["passed"] for g in certificate["graphs"].values()]
    checks += [d["passed"] for d in certificate["decodes"]]
    checks += [certificate["attention"]["passed"]] if "attention" in certificate else []
    checks += [certificate[k]["passed"] for k in INT8_CLAIMS if k in certificate]
    certificate["passed"] = all(checks)
    certificate["seconds"] = round(time.perf_counter() - start, 1)
    return certificate


def certify(
    model_version: ModelVersion, checkpoint: Path, sources, references, parts: dict | None = None
) -> dict:
    """Runs the suite, writes the golden set and the certificate, re-hashes; returns it."""
    certificate = run_suite(model_version, checkpoint, sources, references, parts)
    directory = model_version.directory
    golden = golden_set(model_version, sources[:GOLDEN_SENTENCES])
    (directory / GOLDEN).write_text(json.dumps(golden) + "\n")
    kept = {k: v for k, v in model_version.manifest.items() if k not in ("files", "format_version")}
    write_manifest(directory, {**kept, "parity": certificate})
    verify(directory)
    return certificate
