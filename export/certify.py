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

The manifest's kind (export.kinds) says which cases and claims apply: each kind's are in its
module, export.translator_parity and export.caption_parity, with their bounds."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from export.decode_parity import GREEDY, NEAR_TIE, ParityInputs, decode_all
from export.kinds import export_kind_named
from export.parity import graph_parity
from models.checkpoint import load_checkpoint
from service.runtime.graphs import IN_PLACE, STATIC
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.repository import GOLDEN, ModelVersion, verify, write_manifest

MIN_SENTENCES = 200
GOLDEN_SENTENCES = 4
INT8_CLAIMS = ("int8_vs_fp32", "int8_one_row_vs_fp32")  # as batched, and one row at a time


def cpu_variants(model_version: ModelVersion) -> list[str]:
    """The variants the golden set holds (decoded on the CPU): all but fp16, which a server
    checks against fp32's golden tokens (service.worker.startup.golden_check)."""
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


def golden_set(model_version: ModelVersion, sources) -> list[dict]:
    """Greedy tokens of a few sources per variant and per way of carrying the cache (a server
    may run either; int8 quantises each step's activations, so its tokens may differ between
    the two), for the runtime's start-up check: each source decoded alone, as the check
    decodes it (int8's dynamic activation scales, and its one-row step, make a row's tokens
    depend on the rows beside it)."""
    kind = export_kind_named(model_version.manifest["model"]["kind"])
    golden, inputs = [], kind.golden_sources(model_version, sources)
    options = replace(GREEDY, max_length=min(GREEDY.max_length, model_version.config["max_length"]))
    for variant in cpu_variants(model_version):
        in_place = model_version.has_graph(variant, IN_PLACE + "decoder")
        caches = ["growing", "in_place"] if in_place else ["growing"]
        for cache in caches:
            engine = OnnxEngine(model_version, variant, cache=cache)
            max_source = model_version.config["max_length"]
            # as the server's start-up check decodes: no alignment kept
            hypotheses = decode_all(engine, sources, options, max_source, batch=1, attention=False)
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


def run_suite(model_version: ModelVersion, checkpoint: Path, inputs: ParityInputs) -> dict:
    """Every parity claim of one model version against its PyTorch checkpoint on `inputs`
    (their parts recorded as given)."""
    sources = inputs.sources
    if len(sources) < MIN_SENTENCES:
        raise ValueError(f"parity needs at least {MIN_SENTENCES} sentences, got {len(sources)}")
    start = time.perf_counter()
    model, tokenizer = load_checkpoint(checkpoint)
    kind = export_kind_named(model_version.manifest["model"]["kind"])
    decodes = kind.decode_certificate(model, tokenizer, model_version, inputs)
    certificate = {
        "graphs": graph_certificate(model, model_version, parity_devices(model_version)),
        **decodes,
        "sentences": len(sources),
        "parts": inputs.parts or {"test": len(sources)},
        "near_tie": NEAR_TIE,
        "max_int8_loss": kind.max_int8_loss,
    }
    checks = [g["passed"] for g in certificate["graphs"].values()]
    checks += [d["passed"] for d in certificate["decodes"]]
    checks += [certificate["attention"]["passed"]] if "attention" in certificate else []
    checks += [certificate[k]["passed"] for k in INT8_CLAIMS if k in certificate]
    certificate["passed"] = all(checks)
    certificate["seconds"] = round(time.perf_counter() - start, 1)
    return certificate


def certify(model_version: ModelVersion, checkpoint: Path, inputs: ParityInputs) -> dict:
    """Runs the suite (`run_suite`), writes the golden set and the certificate, re-hashes;
    returns it."""
    certificate = run_suite(model_version, checkpoint, inputs)
    directory = model_version.directory
    golden = golden_set(model_version, inputs.sources[:GOLDEN_SENTENCES])
    (directory / GOLDEN).write_text(json.dumps(golden) + "\n")
    kept = {k: v for k, v in model_version.manifest.items() if k not in ("files", "format_version")}
    write_manifest(directory, {**kept, "parity": certificate})
    verify(directory)
    return certificate
