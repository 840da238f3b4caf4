"""The parity suite on the shipped translator: every graph, every variant, whole decodes."""

from __future__ import annotations

import numpy as np
import pytest

from export.certify import INT8_CLAIMS, MIN_SENTENCES
from export.comparison import TOLERANCES
from export.translator_parity import MAX_INT8_LOSS

# (variant, graph) pairs this suite checks; the meta-test below holds the repository to it.
CHECKED_GRAPHS = [(v, g) for v in ("fp32", "int8") for g in ("encoder", "decoder", "lean_decoder")]
CHECKED_GRAPHS.append(("int8", "lean_decoder_one_row"))  # run for steps of one row
# the same steps with their cache written in place (what the server runs on the CPU)
CHECKED_GRAPHS += [(v, "in_place_" + g) for v, g in CHECKED_GRAPHS if g != "encoder"]
# and in place at a fixed capacity, the steps CUDA graphs replay (float variants)
CHECKED_GRAPHS += [("fp32", "static_" + g) for g in ("decoder", "lean_decoder")]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variant", "graph"), CHECKED_GRAPHS, ids=[f"{v}-{g}" for v, g in CHECKED_GRAPHS]
)
def test_graph_outputs_within_tolerance(exported_translator, variant, graph):
    _, certificate = exported_translator
    summary = certificate["graphs"][variant]
    assert summary["failures"] == [], summary["failures"][:5]
    tolerance = TOLERANCES[("transformer", variant)]
    outputs = {k: v for k, v in summary["max_abs"].items() if k.startswith(graph + ".")}
    assert len(outputs) >= 2  # the graph's outputs were really compared
    for name, max_abs in outputs.items():
        assert max_abs <= tolerance.atol or summary["max_rel"][name] <= tolerance.rtol, name


@pytest.mark.slow
def test_every_exported_graph_has_a_parity_test(exported_translator):
    model_version, _ = exported_translator
    exported = {(v, g) for v, graphs in model_version.manifest["graphs"].items() for g in graphs}
    assert exported == set(CHECKED_GRAPHS)


@pytest.mark.slow
def test_whole_decodes_are_token_identical(exported_translator):
    _, certificate = exported_translator
    assert certificate["sentences"] >= MIN_SENTENCES
    settings = {d["setting"]: d for d in certificate["decodes"]}
    assert set(settings) == {
        "onnxruntime fp32 greedy vs pytorch",
        "onnxruntime fp32 beam4 vs pytorch",
        "onnxruntime cached vs uncached",
        "onnxruntime padded batch vs alone",
        "onnxruntime cache in place vs growing",
        "onnxruntime static step vs cache in place",
    }
    for name, report in settings.items():
        assert report["divergence_count"] == 0, (name, report["divergences"])
        assert report["identical"] + len(report["near_ties"]) == report["sentences"], name
        for tie in report["near_ties"]:
            assert tie["margin"] < 1e-4 or tie["score_difference"] < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("claim", INT8_CLAIMS)
def test_int8_loses_at_most_half_a_point(exported_translator, claim):
    """Decoded in batches, and one sentence at a time (the one-row step)."""
    _, certificate = exported_translator
    loss = certificate[claim]
    for part in (loss, *loss.get("parts", {}).values()):
        assert part["bleu_loss"] <= MAX_INT8_LOSS and part["chrf_loss"] <= MAX_INT8_LOSS
    assert loss["baseline"]["bleu"] > 10  # a trained model, not a degenerate one
    assert 0.0 < loss["identical_share"] <= 1.0


@pytest.mark.slow
def test_certificate_and_golden_set_are_in_the_manifest(exported_translator):
    model_version, certificate = exported_translator
    assert model_version.manifest["parity"]["passed"] is certificate["passed"] is True
    golden = model_version.golden()
    assert {g["variant"] for g in golden} == {"fp32", "int8"}
    # per variant, made with each way of carrying the cache the version ships
    assert {(g["variant"], g["cache"]) for g in golden} == {
        (v, c) for v in ("fp32", "int8") for c in ("growing", "in_place")
    }
    assert all(g["expected_ids"] for g in golden)
    assert model_version.manifest["versions"]["opset"] >= 18
    assert "golden.json" in model_version.manifest["files"]


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["growing", "in_place"])
def test_the_start_up_check_passes_with_either_cache(exported_translator, cache):
    """A server may carry the cache either way (the `cache` setting): each variant's workers
    reproduce the golden tokens made that way, int8 included."""
    from service.runtime.onnx_engine import OnnxEngine
    from service.worker.scheduler import Scheduler
    from service.worker.startup import golden_check

    model_version, _ = exported_translator
    for variant in ("fp32", "int8"):
        engine = OnnxEngine(model_version, variant, cache=cache)
        assert golden_check(Scheduler(engine), model_version, variant) == 4


@pytest.mark.slow
def test_a_perturbed_graph_fails_the_suite(exported_translator, tmp_path):
    import json
    import shutil

    from helpers import SHIPPED_TRANSLATOR, perturb_near_logits

    from export.comparison import ParityError
    from export.parity import assert_graph_parity
    from models.checkpoint import load_checkpoint
    from service.runtime.onnx_engine import OnnxEngine
    from service.runtime.repository import verify, write_manifest

    model_version, _ = exported_translator
    copy = tmp_path / "translator" / "1"
    shutil.copytree(model_version.directory, copy)
    steps = ("decoder", "in_place_decoder")  # the growing cache's step, and the in-place one
    for step in steps:
        perturb_near_logits(copy / "fp32" / f"{step}.onnx")  # small, on a few channels only
    manifest = json.loads((copy / "manifest.json").read_text())
    write_manifest(
        copy, {k: v for k, v in manifest.items() if k not in ("files", "format_version")}
    )
    model, _ = load_checkpoint(SHIPPED_TRANSLATOR)
    version = verify(copy)
    engines = [OnnxEngine(version, "fp32", cache=cache) for cache in ("growing", "in_place")]
    with pytest.raises(ParityError, match=r"decoder\.logits") as failure:
        assert_graph_parity(model, *engines)
    outputs = {f.output for f in failure.value.failures}
    assert "logits" in outputs and not any(o.startswith("encoder.") for o in outputs)
    logits = {f.graph for f in failure.value.failures if f.output == "logits"}
    assert logits == set(steps)  # each perturbed step caught, the lean ones untouched
    assert np.isfinite([f.max_abs for f in failure.value.failures]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["traced", "built"])
def test_fp16_graphs_on_cuda(tmp_path, method):
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("no CUDA execution provider")
    from helpers import SHIPPED_TRANSLATOR

    from export.parity import assert_graph_parity
    from export.repository import write_version
    from models.checkpoint import load_checkpoint
    from service.runtime.onnx_engine import OnnxEngine

    model, tokenizer = load_checkpoint(SHIPPED_TRANSLATOR)
    version = write_version(
        model,
        tokenizer.model_file,
        tmp_path / "t" / "1",
        "t",
        "1",
        ("fp32", "fp16"),
        method=method,
    )
    engines = [OnnxEngine(version, "fp16", device="cuda")]
    if method == "built":  # its steps with the cache written in place (GQA, fp16 on CUDA)
        engines.append(OnnxEngine(version, "fp16", device="cuda", cache="in_place"))
    assert engines[0].cache == "growing"  # the CUDA default until the in-place path is measured
    summary = assert_graph_parity(model, *engines)
    if method == "built":
        assert summary["max_abs"]["in_place_decoder.logits"] > 0
        from helpers import TRANSLATOR_DATA

        from models.corpus import read_split
        from service.runtime.decoding import DecodingOptions
        from service.runtime.translation import translate_ids

        spanish, _ = read_split(TRANSLATOR_DATA, "test")
        sources = tokenizer.encode_batch(spanish[:32])
        options = DecodingOptions(beam_size=4, max_length=64)
        growing, in_place = (translate_ids(e, sources, options, 512) for e in engines)
        same = sum(g[0].tokens == i[0].tokens for g, i in zip(growing, in_place, strict=True))
        assert same >= 30  # fp16: a near tie may go either way


def test_scores_equal_the_pytorch_teacher_forced_log_probs(
    exported_translator, shipped_translator, translator_data
):
    """Score's forced decode over the exported graphs gives, for every target token and its
    `</s>`, the log-probability of PyTorch's teacher-forced pass over the whole target."""
    import torch

    from models.corpus import read_split
    from service.runtime.batching import source_batch
    from service.runtime.onnx_engine import OnnxEngine
    from service.runtime.search import log_softmax
    from service.runtime.tokenizer import BOS_ID, EOS_ID
    from service.runtime.translation import score_ids

    model, tokenizer = shipped_translator
    sources, targets = read_split(translator_data, "test")
    source_ids = tokenizer.encode_batch(list(sources[:16]))
    target_ids = tokenizer.encode_batch(list(targets[:16]))
    engine = OnnxEngine(exported_translator[0], "fp32")
    scored = score_ids(engine, source_ids, target_ids, 512)
    for source, target, got in zip(source_ids, target_ids, scored, strict=True):
        src, mask = (torch.from_numpy(a) for a in source_batch([source], 512))
        tgt_in = torch.tensor([[BOS_ID, *target]])
        with torch.no_grad():
            logits = model(src, mask, tgt_in, torch.ones_like(tgt_in)).float().numpy()[0]
        expected = log_softmax(logits)[np.arange(len(target) + 1), [*target, EOS_ID]]
        assert len(got) == len(target) + 1
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-3)
