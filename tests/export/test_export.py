"""Export of a tiny random model with untied weights, and the manifest's checks."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from helpers import random_sources

from export.parity import assert_graph_parity
from export.repository import write_version
from models.config import PRESETS
from models.reference import TorchEngine
from models.transformer import Transformer
from service.runtime.decoding import DecodingOptions
from service.runtime.errors import ModelRepositoryError
from service.runtime.graphs import check_inputs, decoder_spec
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.repository import FORMAT_VERSION, verify
from service.runtime.translation import translate_ids


@pytest.fixture(scope="module")
def untied(tmp_path_factory, shipped_translator):
    """A tiny model with separate source/target embeddings and output projection, exported."""
    from dataclasses import replace

    config = replace(
        PRESETS["tiny"],
        share_embeddings=False,
        tie_output=False,
        vocab_size=shipped_translator[1].vocab_size,
    )
    torch.manual_seed(0)
    model = Transformer(config).eval()
    directory = tmp_path_factory.mktemp("repo") / "tiny" / "1"
    version = write_version(
        model, shipped_translator[1].model_file, directory, "tiny", "1", method="traced"
    )
    return model, version


@pytest.mark.slow
def test_untied_export_has_no_control_flow_and_names_every_axis(untied):
    _, version = untied
    for variant in ("fp32", "int8"):
        for name in ("encoder", "decoder"):
            graph = onnx.load(str(version.graph(variant, name)))
            assert not {"If", "Loop", "Scan"} & {n.op_type for n in graph.graph.node}
            assert graph.opset_import[0].version >= 18
    decoder = onnx.load(str(version.graph("fp32", "decoder")))
    dims = {
        i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
        for i in decoder.graph.input
    }
    assert dims["past_key_values.0.key"] == ["batch", 4, "past", 8]
    assert dims["self_mask"] == ["batch", "total"]


def test_untied_export_matches_pytorch(untied):
    model, version = untied
    summary = assert_graph_parity(model, OnnxEngine(version, "fp32"))
    assert summary["comparisons"] > 100
    sources = random_sources(model.config.vocab_size, [1, 4, 9, 30])
    for beam in (1, 3):
        options = DecodingOptions(beam_size=beam, max_length=20)
        expected = translate_ids(TorchEngine(model), sources, options, 512)
        actual = translate_ids(OnnxEngine(version, "fp32"), sources, options, 512)
        for e, a in zip(expected, actual, strict=True):
            assert e[0].tokens == a[0].tokens
            assert e[0].score == pytest.approx(a[0].score, abs=1e-4)


def test_a_changed_byte_is_detected(untied, tmp_path):
    import shutil

    _, version = untied
    copy = tmp_path / "copy"
    shutil.copytree(version.directory, copy)
    verify(copy)
    path = copy / "int8" / "decoder.onnx"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ModelRepositoryError, match=r"int8/decoder.onnx: sha256 does not match"):
        verify(copy)
    path.unlink()
    with pytest.raises(ModelRepositoryError, match=r"int8/decoder.onnx: missing"):
        verify(copy)


def test_an_unknown_format_version_is_refused(untied, tmp_path):
    import shutil

    _, version = untied
    copy = tmp_path / "copy"
    shutil.copytree(version.directory, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["format_version"] = FORMAT_VERSION + 1
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        ModelRepositoryError,
        match=f"format version {FORMAT_VERSION + 1}, this runtime reads {FORMAT_VERSION}",
    ):
        verify(copy)
    (copy / "manifest.json").write_text("{not json")
    with pytest.raises(ModelRepositoryError, match="unreadable manifest"):
        verify(copy)


def test_runtime_input_checks_name_every_problem():
    spec = decoder_spec(1)
    feeds = {
        "input_ids": np.zeros((2, 1), np.int64),
        "positions": np.zeros((3, 1), np.int64),
        "self_mask": np.ones((2, 4), np.int64),
        "past_key_values.0.key": np.zeros((2, 4, 2, 8), np.float32),
        "past_key_values.0.value": np.zeros((2, 4, 2, 8), np.float64),
        "encoder.0.key": np.zeros((2, 4, 5, 8), np.float32),
        "encoder.0.value": np.zeros((2, 4, 5, 8), np.float32),
    }
    with pytest.raises(ValueError) as error:
        check_inputs(spec, feeds, np.float32)
    message = str(error.value)
    assert "positions: batch=3" in message
    assert "past_key_values.0.value: dtype float64" in message
    assert "memory_mask: missing" in message
    assert "total must equal past + new" in message


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_io_binding_path_decodes_like_the_plain_path(untied, variant):
    """The device-resident path (cache as OrtValues, reordered by the gather graph) on CPU."""
    model, version = untied
    sources = random_sources(model.config.vocab_size, [2, 6, 11])
    options = DecodingOptions(beam_size=3, num_hypotheses=2, max_length=16)
    plain = translate_ids(OnnxEngine(version, variant), sources, options, 512)
    bound_engine = OnnxEngine(version, variant, io_binding=True)
    bound = translate_ids(bound_engine, sources, options, 512)
    assert bound_engine.io_binding and set(bound_engine.ops["gather"]) == {"float32", "int64"}
    for p, b in zip(plain, bound, strict=True):
        assert [h.tokens for h in p] == [h.tokens for h in b]
        assert [h.score for h in p] == pytest.approx([h.score for h in b], abs=1e-6)


def test_translator_parity_takes_every_test_part(tmp_path, shipped_translator):
    from export.commands import parity_inputs
    from models.catalogs import read_everyday

    model, tokenizer = shipped_translator
    for split, count in (("test", 5), ("test-modern", 2)):
        for language in ("es", "en"):
            lines = "".join(f"{split} {language} {i}\n" for i in range(count))
            (tmp_path / f"{split}.{language}").write_text(lines)
    inputs = parity_inputs(model, tmp_path, tokenizer, 3)
    assert inputs.parts == {"bible": 3, "modern": 2, "everyday": 3}  # everyday: the committed
    assert inputs.int8 is None  # the int8 claim on the same sentences, part by part
    assert inputs.references == [
        "test en 0",
        "test en 1",
        "test en 2",
        "test-modern en 0",
        "test-modern en 1",
        *read_everyday()[1][:3],
    ]
    assert inputs.sources[0] == tokenizer.encode("test es 0")


def test_the_export_command_publishes_a_version_once_certified(tmp_path, monkeypatch, capsys):
    """`attnserve export` writes and certifies a version under a hidden name, which a watching
    server does not read, then renames it into place, replacing the version there."""
    from argparse import Namespace

    from helpers import TRANSLATOR_DATA, tiny_translator_checkpoint

    from export import commands
    from service.runtime.repository import manifests, write_manifest

    seen = []

    def certify(model_version, checkpoint, inputs):  # what a server sees while it runs
        root = tmp_path / "repo"
        seen.append({str(m.relative_to(root)): json.loads(m.read_text()) for m in manifests(root)})
        kept = {k: v for k, v in model_version.manifest.items() if k != "files"}
        write_manifest(model_version.directory, {**kept, "parity": {"passed": True}})
        graphs = {"fp32": {"passed": True, "max_abs": {}}}
        return {"passed": True, "sentences": 200, "graphs": graphs, "decodes": [], "seconds": 1}

    monkeypatch.setattr(commands, "certify", certify)
    checkpoint = tiny_translator_checkpoint(tmp_path / "checkpoint")
    args = Namespace(
        checkpoint=checkpoint, data=TRANSLATOR_DATA, sentences=200, out=tmp_path / "repo",
        name="tiny", version="2", variants="fp32", graphs="built", int8_scales="per-channel",
    )  # fmt: skip
    (tmp_path / "repo" / "tiny" / "2").mkdir(parents=True)  # a version there: replaced
    (tmp_path / "repo" / "tiny" / "2" / "manifest.json").write_text("{}")
    assert commands.export(args) == 0
    assert seen == [{"tiny/2/manifest.json": {}}]  # the old one alone, not the new uncertified
    assert sorted(p.name for p in (tmp_path / "repo" / "tiny").iterdir()) == ["2"]
    version = verify(tmp_path / "repo" / "tiny" / "2")
    assert version.manifest["parity"] == {"passed": True} and version.has_graph("fp32", "decoder")
    out = capsys.readouterr().out  # the exporter's progress lines, then the summary
    summary = json.loads(out[out.rindex('{\n  "model_version"') :])
    assert summary["model_version"] == str(tmp_path / "repo" / "tiny" / "2")
