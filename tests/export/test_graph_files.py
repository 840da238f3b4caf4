"""A graph's file (export.graph_files): weights past the limit go to one file beside it,
which onnxruntime reads; a graph saved again or copied takes its own file of weights; the
graphs of a folder share one file holding each weight once."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from export.graph_files import (
    ALIGNMENT,
    SHARED,
    copy_graph,
    data_file,
    outside,
    save_graph,
    share_weights,
    weight_bytes,
)
from export.quantize import quantize_int8

WIDTH = 64  # a 64 x 64 float32 weight: 16 KiB


def matmul_graph(seed: int = 0) -> onnx.ModelProto:
    """y = x @ W (W 16 KiB) reshaped by a small shape constant, as traced graphs have."""
    weight = np.random.default_rng(seed).standard_normal((WIDTH, WIDTH)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="matmul"),
        helper.make_node("Reshape", ["h", "shape"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", WIDTH])],
        [numpy_helper.from_array(weight, "W"),
         numpy_helper.from_array(np.array([-1, WIDTH], np.int64), "shape")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def run(path, x):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[
        0
    ]


def test_weights_past_the_limit_live_beside_the_graph_and_compute_the_same(tmp_path):
    x = np.random.default_rng(1).standard_normal((3, WIDTH)).astype(np.float32)
    inline = save_graph(matmul_graph(), tmp_path / "inline.onnx")
    assert not data_file(inline).exists() and not outside(matmul_graph())
    beside = save_graph(matmul_graph(), tmp_path / "beside.onnx", inside=4096)
    data = data_file(beside)
    assert data.name == "beside.onnx.data" and data.stat().st_size == WIDTH * WIDTH * 4
    assert beside.stat().st_size < 1024 < weight_bytes(matmul_graph())  # the shape stays in
    assert np.array_equal(run(beside, x), run(inline, x))
    save_graph(matmul_graph(seed=2), beside, inside=4096)  # again: its own weights, not more
    assert data.stat().st_size == WIDTH * WIDTH * 4
    assert not np.array_equal(run(beside, x), run(inline, x))
    save_graph(matmul_graph(), beside)  # inside again: the old file of weights goes
    assert not data.exists() and np.array_equal(run(beside, x), run(inline, x))


def test_a_copied_or_quantised_graph_takes_its_weights_along(tmp_path, monkeypatch):
    import export.graph_files

    x = np.random.default_rng(1).standard_normal((3, WIDTH)).astype(np.float32)
    source = save_graph(matmul_graph(), tmp_path / "a" / "g.onnx", inside=4096)
    (tmp_path / "b").mkdir()
    copied = copy_graph(source, tmp_path / "b" / "g.onnx")
    assert data_file(copied).exists() and np.array_equal(run(copied, x), run(source, x))
    monkeypatch.setattr(export.graph_files, "WEIGHTS_INSIDE", 4096)
    quantised = quantize_int8(source, tmp_path / "int8" / "g.onnx")
    assert data_file(quantised).exists()  # past the limit before: beside it after
    assert np.abs(run(quantised, x) - run(source, x)).max() < 0.1 * np.abs(run(source, x)).max()
    untouched = quantize_int8(source, tmp_path / "none" / "g.onnx", nodes=lambda model: [])
    assert data_file(untouched).exists() and np.array_equal(run(untouched, x), run(source, x))


def test_shapes_are_inferred_with_the_weights_set_aside_and_the_weights_come_back():
    """Shape inference serialises the graph: past 2 GiB it cannot, so the weights' data is
    set aside meanwhile; their shapes are what it reads, and the data returns after."""
    from export.graph_files import weights_set_aside

    model = matmul_graph()
    before = [t.raw_data for t in model.graph.initializer]
    with weights_set_aside(model) as light:
        assert weight_bytes(light) < 1024  # the 16 KiB weight's data is out, the shape in
        inferred = onnx.shape_inference.infer_shapes(light)
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim[1:]]
            for v in inferred.graph.value_info}  # fmt: skip
    assert dims["h"] == [WIDTH]
    assert [t.raw_data for t in model.graph.initializer] == before


def test_a_variants_graphs_share_one_file_holding_each_weight_once(tmp_path):
    """Three graphs, two with the same weight: one file of weights holds the two distinct
    ones, each at a page's offset, the graphs' own files of weights removed, and every
    graph computes what it did."""
    x = np.random.default_rng(1).standard_normal((3, WIDTH)).astype(np.float32)
    paths, expected = [], []
    for name, seed, inside in (("a", 0, None), ("b", 0, 0), ("c", 1, None)):
        path = save_graph(matmul_graph(seed), tmp_path / f"{name}.onnx", inside=inside)
        paths.append(path)
        expected.append(run(path, x))
    assert data_file(paths[1]).exists()  # b's weights were beside it
    shared = share_weights(paths)
    assert shared == tmp_path / SHARED
    assert shared.stat().st_size == 2 * WIDTH * WIDTH * 4  # W of seed 0, then seed 1's
    assert not data_file(paths[1]).exists()
    for path, before in zip(paths, expected, strict=True):
        assert path.stat().st_size < 1024  # the shape constant inside, W outside
        (weight,) = [t for t in onnx.load(str(path), load_external_data=False).graph.initializer
                     if t.name == "W"]  # fmt: skip
        offset = {e.key: e.value for e in weight.external_data}["offset"]
        assert int(offset) % ALIGNMENT == 0
        assert np.array_equal(run(path, x), before)
    with pytest.raises(ValueError, match="not of 2"):
        share_weights([paths[0], save_graph(matmul_graph(), tmp_path / "d" / "d.onnx")])
