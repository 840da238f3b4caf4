"""PyTorch to ONNX with the torch.export-based exporter, driven by `service.runtime.graphs`.

Every dynamic axis is exported as `Dim.DYNAMIC` (the exporter works out relations such as
total = past + new itself), then the graph's input and output dims are renamed after the
declaration so that the file documents its own interface.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import onnx
import torch
from torch import nn
from torch.export import Dim

from export.graph_files import save_graph
from models.kinds import model_kind
from service.runtime.graphs import GraphSpec, ModelInterface

OPSET = 18
CONTROL_FLOW = {"If", "Loop", "Scan"}


# Example sizes no test uses, none 0 or 1 (the exporter would specialise those).
EXAMPLE_SIZES = {
    "batch": 2,
    "memory": 5,
    "past": 3,
    "new": 2,
    "one": 1,
}


def example_inputs(sizes: dict[str, int], spec: GraphSpec, vocab: int, dtype: torch.dtype) -> tuple:
    """Inputs built from the declaration alone: masks are ones, `positions` follow the past,
    other integers are token ids, floats are random."""
    sizes = {**EXAMPLE_SIZES, **sizes}
    sizes["total"] = sizes["past"] + sizes["new"]
    generator = torch.Generator().manual_seed(0)
    inputs = []
    for tensor in spec.inputs:
        shape = tuple(sizes[axis] for axis in tensor.axes)
        if tensor.name.endswith("_mask"):
            inputs.append(torch.ones(shape, dtype=torch.long))
        elif tensor.name == "positions":
            inputs.append(torch.arange(sizes["past"], sizes["total"]).expand(shape).contiguous())
        elif tensor.dtype == "int64":
            inputs.append(torch.randint(4, vocab, shape, generator=generator))
        elif tensor.name == "pixels":
            inputs.append(torch.rand(shape, generator=generator, dtype=dtype))
        else:
            inputs.append(torch.randn(shape, generator=generator, dtype=dtype))
    return tuple(inputs)


def dynamic_shapes(module: nn.Module, spec: GraphSpec) -> dict:
    """Per forward parameter, {axis: Dim.DYNAMIC}; a *rest parameter gets a tuple."""
    axes = spec.dynamic_axes()
    per_input = [{i: Dim.DYNAMIC for i in axes[name]} for name in spec.input_names]
    shapes = {}
    for position, parameter in enumerate(inspect.signature(module.forward).parameters.values()):
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            shapes[parameter.name] = tuple(per_input[position:])
            break
        shapes[parameter.name] = per_input[position]
    return shapes


def name_dims(model: onnx.ModelProto, spec: GraphSpec) -> None:
    """Gives every graph input and output dim the axis name of the declaration."""
    declared = {t.name: t for t in (*spec.inputs, *spec.outputs)}
    for value in (*model.graph.input, *model.graph.output):
        for dim, axis in zip(
            value.type.tensor_type.shape.dim, declared[value.name].axes, strict=True
        ):
            if not dim.HasField("dim_value"):
                dim.dim_param = axis


def export_graph(module: nn.Module, spec: GraphSpec, args: tuple, path: Path) -> Path:
    """`module` traced to ONNX under `spec`, checked and written to `path` (its weights
    beside it where they are too many: export.graph_files)."""
    program = torch.onnx.export(
        module,
        args,
        None,
        input_names=spec.input_names,
        output_names=spec.output_names,
        dynamic_shapes=dynamic_shapes(module, spec),
        opset_version=OPSET,
        dynamo=True,
    )
    proto = program.model_proto
    name_dims(proto, spec)
    flow = sorted({node.op_type for node in proto.graph.node} & CONTROL_FLOW)
    if flow:
        raise RuntimeError(f"{spec.name} graph has control-flow nodes {flow}")
    if [i.name for i in proto.graph.input] != spec.input_names:
        raise RuntimeError(f"{spec.name} graph inputs differ from the declaration")
    return save_graph(proto, path)


def interface_of(model) -> ModelInterface:
    """The declared interface of a model of any kind (models.kinds)."""
    return model_kind(model).interface(model.config)


def export_modules(
    model, modules: tuple[nn.Module, nn.Module], fixed: dict[str, int], out_dir: Path, dtype
) -> dict[str, Path]:
    """Writes encoder.onnx and decoder.onnx traced from `modules`, the (encoder, decoder step)
    graph modules of `model` (in `dtype`, eval mode); `fixed`: the sizes of the axes that the
    model fixes, by axis name. Returns their paths."""
    interface = interface_of(model)
    paths = {}
    with torch.no_grad():
        specs = (interface.encoder, interface.decoder)
        for spec, module in zip(specs, modules, strict=True):
            args = example_inputs(fixed, spec, model.config.vocab_size, dtype)
            paths[spec.name] = export_graph(
                module.eval(), spec, args, out_dir / f"{spec.name}.onnx"
            )
    return paths
