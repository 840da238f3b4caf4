"""The parity suite on the shipped captioner: both graphs, every variant, whole decodes,
attention maps, and a perturbed graph that must fail with its tensor named."""

from __future__ import annotations

import json

import onnx
import pytest

from export.caption_parity import MAX_ATTENTION_DIFFERENCE, MAX_CAPTION_INT8_LOSS
from export.certify import MIN_SENTENCES
from export.comparison import TOLERANCES, ParityError
from export.parity import assert_graph_parity
from service.runtime.graphs import captioner_interface
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.repository import FORMAT_VERSION, verify, write_manifest

CHECKED_GRAPHS = [(v, g) for v in ("fp32", "int8") for g in ("encoder", "decoder")]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variant", "graph"), CHECKED_GRAPHS, ids=[f"{v}-{g}" for v, g in CHECKED_GRAPHS]
)
def test_graph_outputs_within_tolerance(exported_captioner, variant, graph):
    _, certificate = exported_captioner
    summary = certificate["graphs"][variant]
    assert summary["failures"] == [], summary["failures"][:5]
    tolerance = TOLERANCES[("captioner", variant)]
    outputs = {k: v for k, v in summary["max_abs"].items() if k.startswith(graph + ".")}
    expected = {  # layers and parts folded: present.h and present.c are "present"
        "encoder": {"memory_mask", "grid", "grid_projection", "init"},
        "decoder": {"logits", "present", "cross_attention"},
    }[graph]
    assert {k.split(".", 1)[1] for k in outputs} == expected  # every output was compared
    for name, max_abs in outputs.items():
        assert max_abs <= tolerance.atol or summary["max_rel"][name] <= tolerance.rtol, name


@pytest.mark.slow
def test_every_exported_graph_has_a_parity_test(exported_captioner):
    model_version, _ = exported_captioner
    exported = {(v, g) for v, graphs in model_version.manifest["graphs"].items() for g in graphs}
    assert exported == set(CHECKED_GRAPHS)


@pytest.mark.slow
def test_whole_decodes_are_token_identical_and_attention_within_bound(exported_captioner):
    _, certificate = exported_captioner
    assert certificate["sentences"] >= MIN_SENTENCES
    settings = {d["setting"]: d for d in certificate["decodes"]}
    assert set(settings) == {
        "onnxruntime fp32 greedy vs pytorch",
        "onnxruntime fp32 beam4 vs pytorch",
        "onnxruntime batch vs alone",
    }
    for name, report in settings.items():
        assert report["divergence_count"] == 0, (name, report["divergences"])
        assert report["identical"] + len(report["near_ties"]) == report["sentences"], name
    attention = certificate["attention"]
    assert attention["compared"] >= 0.99 * MIN_SENTENCES
    assert attention["max_abs"] <= MAX_ATTENTION_DIFFERENCE


@pytest.mark.slow
def test_int8_quantises_the_lstm_gates_alone_each_input_with_its_own_scale(exported_captioner):
    model_version, _ = exported_captioner
    encoders = [model_version.graph(v, "encoder").read_bytes() for v in ("fp32", "int8")]
    assert encoders[0] == encoders[1]  # run once an image: kept float
    nodes = onnx.load(str(model_version.graph("int8", "decoder"))).graph.node
    integer = sorted(n.name for n in nodes if n.op_type == "MatMulInteger")
    hidden = model_version.config["hidden_dim"]
    gates = {
        i.name: i for i in onnx.load(str(model_version.graph("fp32", "decoder"))).graph.initializer
    }
    assert len(integer) == 3  # [word; context; h]: one activation scale each
    assert all(".part" in name for name in integer)
    assert sum(g.dims[-1] == 4 * hidden for g in gates.values() if len(g.dims) == 2) == 1


@pytest.mark.slow
def test_int8_loses_at_most_one_point(exported_captioner, captioner_data):
    _, certificate = exported_captioner
    loss = certificate["int8_vs_fp32"]
    test_split = sum(1 for _ in (captioner_data / "test.jsonl").open())
    assert loss["baseline"]["images"] == loss["variant"]["images"] == test_split
    assert loss["exact_match_loss"] <= MAX_CAPTION_INT8_LOSS
    assert loss["cider_loss"] <= MAX_CAPTION_INT8_LOSS
    # a trained model, not a degenerate one: its captions' words in order (BLEU-4 is 30-37 on
    # every test part even for a model of one artwork family, and near 0 for an untrained one)
    assert loss["baseline"]["bleu4"] > 20
    assert certificate["passed"]


@pytest.mark.slow
def test_the_manifest_declares_the_captioner(exported_captioner):
    model_version, _ = exported_captioner
    manifest = model_version.manifest
    assert manifest["format_version"] == FORMAT_VERSION and manifest["model"]["kind"] == "captioner"
    assert manifest["interface"] == captioner_interface().to_dict()
    states = {s["input"]: s for s in manifest["interface"]["states"]}
    assert states["past.h"]["time_axis"] is None and states["past.h"]["init"] == "init.h"
    assert manifest["preprocessor"]["type"] == "image"
    assert manifest["preprocessor"]["size"] == [96, 96]
    assert manifest["special_tokens"]["eos"] == {"id": 2, "piece": "</s>"}
    golden = model_version.golden()
    assert {g["variant"] for g in golden} == {"fp32", "int8"}
    assert all((model_version.directory / g["image"]).is_file() for g in golden)
    assert all(g["image"] in manifest["files"] for g in golden)  # hashed like the graphs


@pytest.mark.slow
def test_the_exported_step_has_no_hidden_state_or_control_flow(exported_captioner):
    model_version, _ = exported_captioner
    graph = onnx.load(str(model_version.graph("fp32", "decoder"))).graph
    assert {n.op_type for n in graph.node}.isdisjoint({"If", "Loop", "Scan"})
    assert [i.name for i in graph.input] == captioner_interface().decoder.input_names
    assert [o.name for o in graph.output] == captioner_interface().decoder.output_names


@pytest.mark.slow
def test_a_perturbed_graph_fails_with_its_tensor_named(exported_captioner, tmp_path):
    import shutil

    from helpers import perturb_near_logits

    from models.checkpoint import load_checkpoint

    model_version, _ = exported_captioner
    copy = tmp_path / "copy"
    shutil.copytree(model_version.directory, copy)
    perturb_near_logits(copy / "fp32" / "decoder.onnx")
    manifest = json.loads((copy / "manifest.json").read_text())
    write_manifest(
        copy, {k: v for k, v in manifest.items() if k not in ("files", "format_version")}
    )
    model, _ = load_checkpoint(model_version.manifest["source"]["checkpoint"])
    with pytest.raises(ParityError, match=r"decoder\.logits"):
        assert_graph_parity(model, OnnxEngine(verify(copy), "fp32"))


def test_captioner_tolerances_are_declared():
    assert {("captioner", v) for v in ("fp32", "fp16", "int8")} <= set(TOLERANCES)
    assert TOLERANCES[("captioner", "fp32")].atol <= 1e-4


@pytest.mark.gpu
def test_fp16_graphs_on_cuda(tmp_path):
    from helpers import SHIPPED_CAPTIONER

    from export.repository import write_version
    from models.checkpoint import load_checkpoint

    model, tokenizer = load_checkpoint(SHIPPED_CAPTIONER)
    version = write_version(
        model,
        tokenizer.model_file,
        tmp_path / "captioner" / "1",
        "captioner",
        "1",
        ("fp32", "fp16"),
    )
    assert_graph_parity(model, OnnxEngine(version, "fp16", device="cuda"))
