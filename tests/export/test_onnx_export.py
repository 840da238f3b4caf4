"""PyTorch to ONNX driven by the declaration: example inputs built from it alone, every
declared dynamic axis exported dynamic (a *rest parameter's as a tuple), the graph's dims named
after the declaration, and traced graphs that run in onnxruntime as the model does."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from helpers import tiny_transformer
from onnx import TensorProto, helper
from torch.export import Dim

from export.graphs import DecoderStepGraph, EncoderGraph
from export.onnx_export import (
    EXAMPLE_SIZES,
    OPSET,
    dynamic_shapes,
    example_inputs,
    export_modules,
    interface_of,
    name_dims,
)
from models.config import CAPTIONER_PRESETS, PRESETS
from models.kinds import model_kind
from service.runtime.graphs import GraphSpec, TensorSpec, decoder_spec, encoder_spec


def test_examples_follow_the_declaration_and_no_size_is_0_or_1():
    spec = decoder_spec(2)
    fixed = {"heads": 4, "head_dim": 8}
    inputs = dict(
        zip(spec.input_names, example_inputs(fixed, spec, 100, torch.float32), strict=True)
    )
    sizes = {**EXAMPLE_SIZES, **fixed, "total": EXAMPLE_SIZES["past"] + EXAMPLE_SIZES["new"]}
    for tensor in spec.inputs:
        assert tuple(inputs[tensor.name].shape) == tuple(sizes[a] for a in tensor.axes)
    assert all(size > 1 for name, size in EXAMPLE_SIZES.items() if name != "one")
    assert torch.equal(inputs["self_mask"], torch.ones(2, 5, dtype=torch.long))
    assert inputs["positions"].tolist() == [[3, 4], [3, 4]]  # after the past
    ids = inputs["input_ids"]
    assert ids.dtype == torch.long and int(ids.min()) >= 4 and int(ids.max()) < 100
    past = inputs["past_key_values.0.key"]
    assert past.dtype == torch.float32 and past.shape == (2, 4, 3, 8)
    again = example_inputs(fixed, spec, 100, torch.float32)  # seeded: the same every time
    assert all(torch.equal(a, b) for a, b in zip(inputs.values(), again, strict=True))


def test_pixels_are_in_the_unit_range_and_take_the_dtype():
    spec = GraphSpec(
        "encoder", (TensorSpec("pixels", "float", ("batch", "channels", "height", "width")),), ()
    )
    (pixels,) = example_inputs({"channels": 3, "height": 8, "width": 8}, spec, 10, torch.float16)
    assert pixels.dtype == torch.float16 and pixels.shape == (2, 3, 8, 8)
    assert float(pixels.min()) >= 0 and float(pixels.max()) <= 1


def test_every_dynamic_axis_is_dynamic_and_a_rest_parameter_gets_a_tuple():
    model = tiny_transformer()
    interface = interface_of(model)
    encoder = dynamic_shapes(EncoderGraph(model), interface.encoder)
    assert encoder == {
        "src_ids": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC},
        "src_mask": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC},
    }
    step = dynamic_shapes(DecoderStepGraph(model), interface.decoder)
    assert list(step) == ["input_ids", "positions", "self_mask", "rest"]
    rest = step["rest"]
    assert isinstance(rest, tuple) and len(rest) == len(interface.decoder.inputs) - 3
    assert rest[0] == {0: Dim.DYNAMIC, 2: Dim.DYNAMIC}  # a past key: batch and past, not heads
    assert rest[-1] == {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}  # memory_mask


def test_dims_are_named_after_the_declaration_and_fixed_sizes_kept():
    spec = encoder_spec(1)
    proto = helper.make_model(
        helper.make_graph(
            [],
            "g",
            [
                helper.make_tensor_value_info("src_ids", TensorProto.INT64, ["s0", "s1"]),
                helper.make_tensor_value_info("src_mask", TensorProto.INT64, [None, None]),
            ],
            [
                helper.make_tensor_value_info("memory_mask", TensorProto.INT64, ["s0", "s1"]),
                helper.make_tensor_value_info(
                    "encoder.0.key", TensorProto.FLOAT, ["s0", 4, "s1", 8]
                ),
                helper.make_tensor_value_info(
                    "encoder.0.value", TensorProto.FLOAT, ["s0", 4, "s1", 8]
                ),
            ],
        )
    )
    name_dims(proto, spec)
    dims = {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in (*proto.graph.input, *proto.graph.output)
    }
    assert dims["src_ids"] == dims["src_mask"] == ["batch", "memory"]  # the source is the memory
    assert dims["memory_mask"] == ["batch", "memory"]
    assert dims["encoder.0.key"] == ["batch", 4, "memory", 8]


def test_the_interface_of_a_model_is_its_kind_s():
    model = tiny_transformer()
    assert interface_of(model) == model_kind(model).interface(PRESETS["tiny"])
    assert interface_of(model).decoder.name == "decoder"


@pytest.mark.slow
def test_traced_captioner_graphs_are_declared_named_and_run_as_the_model(tmp_path):
    import onnxruntime

    from export.graphs import CaptionEncoderGraph, CaptionStepGraph
    from export.kinds import export_kind
    from models.captioner import Captioner

    torch.manual_seed(0)
    model = Captioner(CAPTIONER_PRESETS["tiny"]).eval()
    fixed = export_kind(model).fixed_sizes(model)
    modules = (CaptionEncoderGraph(model), CaptionStepGraph(model))
    paths = export_modules(model, modules, fixed, tmp_path, torch.float32)
    assert paths == {"encoder": tmp_path / "encoder.onnx", "decoder": tmp_path / "decoder.onnx"}
    interface = interface_of(model)
    for spec in (interface.encoder, interface.decoder):
        proto = onnx.load(str(paths[spec.name]))
        assert proto.opset_import[0].version >= OPSET
        assert [i.name for i in proto.graph.input] == spec.input_names
        assert [o.name for o in proto.graph.output] == spec.output_names
        assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    pixels = np.random.default_rng(1).random((3, 3, 96, 96), dtype=np.float32)
    encoder = onnxruntime.InferenceSession(str(paths["encoder"]))
    got = encoder.run(None, {"pixels": pixels})  # 3 rows, not the example's 2
    with torch.no_grad():
        grid, projection, mask, (h, c) = model.encode(torch.from_numpy(pixels))
    for array, tensor in zip(got, (mask, grid, projection, h, c), strict=True):
        np.testing.assert_allclose(array, tensor.numpy(), rtol=1e-4, atol=1e-5)
