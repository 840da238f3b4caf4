"""The two graphs of every model, declared once as data.

The declaration drives the exporter (names, dynamic axes), the parity validator (what to
compare) and the runtime's input checks. Axis names are shared: the same name means the same
size within one call. Shapes use the names below; `total` is `past + new`.

A `ModelInterface` says, beside the two graphs, what the decoder step carries: memory tensors
(what the encoder returns once and every step reads), state tensors (what a step reads and
returns; each declares its batch axis and whether it has a growing time axis: the KV cache
grows and is masked, an LSTM's (h, c) is only gathered and joined) and where the initial state
comes from (the encoder's `init.*` outputs, or empty on the time axis).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

FLOAT = "float"  # float32, or float16 in an fp16 variant


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # "int64", FLOAT, or "float32" whatever the variant
    axes: tuple[str, ...]  # a name per axis; fixed sizes are names too ("heads", "head_dim")

    def numpy_dtype(self, float_dtype: np.dtype) -> np.dtype:
        if self.dtype in ("int64", "float32"):
            return np.dtype(self.dtype)
        return np.dtype(float_dtype)


IN_PLACE = "in_place_"  # the prefix of a graph's in-place form (`ModelInterface.in_place`)
# the prefix of the in-place form with a fixed capacity (the model's longest output): every
# shape fixed but the rows, nothing the host must read, so a CUDA graph can replay it
STATIC = "static_"
LEAN_STEP = "lean_decoder"  # the optional graph `lean` declares, by its name in the manifest
# an optional form of the lean step for steps of one row (the same declaration; an int8
# variant's weights in a matrix-vector kernel, export.quantize.quantize_int8_one_row)
ONE_ROW_STEP = "lean_decoder_one_row"


@dataclass(frozen=True)
class GraphSpec:
    name: str  # file stem: "encoder" or "decoder"
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    def dynamic_axes(self) -> dict[str, dict[int, str]]:
        """Every axis whose size varies between calls, by tensor name."""
        fixed = {
            "heads",
            "head_dim",
            "vocab",
            "d_model",
            "channels",
            "height",
            "width",
            "features",
            "attention",
            "hidden",
            "one",
        }
        return {
            t.name: {i: axis for i, axis in enumerate(t.axes) if axis not in fixed}
            for t in (*self.inputs, *self.outputs)
        }


# the search of export.ops folded into the lean step: the logits + bias, log-softmax, top k
SEARCH_INPUTS = (
    TensorSpec("bias", "float32", ("one", "vocab")),  # -inf bans a token
    TensorSpec("k", "int64", ("one",)),
)
SEARCH_OUTPUTS = (
    TensorSpec("ids", "int64", ("batch", "k")),
    TensorSpec("log_probs", "float32", ("batch", "k")),
)


def lean(step: GraphSpec, attention: str) -> GraphSpec:
    """`step` without its attention output, and with the search folded in: the lean step a
    model version may also ship, run when no row of a batch keeps its alignment. Its inputs
    are the step's and the search's (bias, k), its outputs the step's less the attention and
    the search's candidates (ids, log_probs, as the `search` graph gives them from these
    logits), so a step and its search are one run. onnxruntime runs every node of a graph
    whatever outputs are fetched: only a graph without the attention spares its work."""
    outputs = tuple(t for t in step.outputs if t.name != attention)
    name = step.name.removesuffix("decoder") + LEAN_STEP  # an in-place step's: in place too
    return GraphSpec(name, (*step.inputs, *SEARCH_INPUTS), (*outputs, *SEARCH_OUTPUTS))


def _kv(prefix: str, layers: int, length_axis: str) -> tuple[TensorSpec, ...]:
    axes = ("batch", "heads", length_axis, "head_dim")
    return tuple(
        TensorSpec(f"{prefix}.{i}.{part}", FLOAT, axes)
        for i in range(layers)
        for part in ("key", "value")
    )


# What an encoder takes differs by model; what it returns does not.
TEXT_ENCODER_INPUTS = (
    TensorSpec("src_ids", "int64", ("batch", "memory")),
    TensorSpec("src_mask", "int64", ("batch", "memory")),
)
IMAGE_ENCODER_INPUTS = (TensorSpec("pixels", FLOAT, ("batch", "channels", "height", "width")),)


def encoder_spec(layers: int, inputs: tuple[TensorSpec, ...] = TEXT_ENCODER_INPUTS) -> GraphSpec:
    """Input -> memory mask (batch, memory) and the cross keys/values of every decoder layer."""
    outputs = (
        TensorSpec("memory_mask", "int64", ("batch", "memory")),
        *_kv("encoder", layers, "memory"),
    )
    return GraphSpec("encoder", inputs, outputs)


def decoder_spec(
    layers: int, fixed_cache: bool = False, in_place: bool = False, attention: bool = True
) -> GraphSpec:
    """One decoding step over new tokens, with the cache in and out. With `fixed_cache` the
    cache has a fixed capacity (`past` positions, the newest last): a step attends over the
    cache and its new token (`total` = past + 1, masked by self_mask) and returns the cache
    shifted by one, the oldest position dropped, so every step has the same shapes.

    With `in_place` the cache is a buffer of `capacity` positions per row, each row's own
    positions from 0: one new token per row, written at the row's position (its past length,
    `positions`), attending over that row's positions up to it; no self mask. The present is
    the same buffer: bound as both input and output, the step writes into it in place."""
    axis = "capacity" if in_place else "past"
    mask = () if in_place else (TensorSpec("self_mask", "int64", ("batch", "total")),)
    inputs = (
        TensorSpec("input_ids", "int64", ("batch", "new")),
        TensorSpec("positions", "int64", ("batch", "new")),
        *mask,
        *_kv("past_key_values", layers, axis),
        *_kv("encoder", layers, "memory"),
        TensorSpec("memory_mask", "int64", ("batch", "memory")),
    )
    outputs = (
        TensorSpec("logits", FLOAT, ("batch", "vocab")),
        *_kv("present", layers, axis if in_place or fixed_cache else "total"),
    )
    spec = GraphSpec(
        "decoder", inputs, (*outputs, TensorSpec("cross_attention", FLOAT, ("batch", "memory")))
    )
    return spec if attention else lean(spec, "cross_attention")


@dataclass(frozen=True)
class SpecialTokens:
    """Token ids the decoding needs, from the manifest (CTranslate2 keeps them in its model
    config the same way)."""

    pad: int
    bos: int
    eos: int
    unk: int

    @classmethod
    def from_manifest(cls, entry: dict) -> SpecialTokens:
        """From the manifest's `special_tokens`: {"bos": {"id": 1, "piece": "<s>"}, ...}."""
        return cls(**{name: int(entry[name]["id"]) for name in ("pad", "bos", "eos", "unk")})


@dataclass(frozen=True)
class StateSpec:
    """A tensor a step reads (`input`) and returns (`output`) for the next step."""

    input: str
    output: str
    batch_axis: int = 0
    time_axis: int | None = None  # grows by `new` every step (padded, masked, narrowed)
    init: str | None = None  # the encoder output that starts it; None: empty on time_axis
    # a buffer the step writes into (bound as its input and its output): every row's own
    # positions from 0 on time_axis, which is its capacity (grown by the engine, right-padded
    # when rows join, only its end ever cut); no shared time axis, so no self mask, no padding
    in_place: bool = False


@dataclass(frozen=True)
class ModelInterface:
    """Everything the runtime needs to know about a model's two graphs."""

    kind: str  # "transformer", "captioner"
    encoder: GraphSpec
    decoder: GraphSpec
    memory: tuple[str, ...]  # encoder outputs fed to every step under the same name
    states: tuple[StateSpec, ...]
    attention: str = "cross_attention"  # the step output (batch, memory) shown to users

    @property
    def lean_decoder(self) -> GraphSpec:
        return lean(self.decoder, self.attention)

    @property
    def memory_tensors(self) -> tuple[str, ...]:
        """The memory every step reads, but its mask (which the runtime keeps on the host)."""
        return tuple(n for n in self.memory if n != "memory_mask")

    def growing_axes(self) -> dict[str, int | None]:
        """Per memory tensor and state (by decoder input name), the axis that differs between
        rows and is right-padded when rows of different lengths meet: a memory's "memory"
        axis, a state's time axis; None for a fixed-size state."""
        outputs = {t.name: t for t in self.encoder.outputs}
        axes: dict[str, int | None] = {
            name: outputs[name].axes.index("memory") for name in self.memory_tensors
        }
        axes.update({s.input: None if s.in_place else s.time_axis for s in self.states})
        return axes

    def in_place(self, prefix: str = IN_PLACE) -> ModelInterface:
        """The same model with its growing cache written in place (`decoder_spec(in_place=
        True)`, graphs named `prefix` + the growing form's name: IN_PLACE, or STATIC for
        its fixed-capacity form): ValueError for a model without a growing state."""
        if not any(s.time_axis is not None for s in self.states):
            raise ValueError(f"{self.kind}: no growing state to write in place")
        layers = sum(1 for s in self.states if s.time_axis is not None) // 2
        decoder = decoder_spec(layers, in_place=True)
        decoder = GraphSpec(prefix + decoder.name, decoder.inputs, decoder.outputs)
        states = tuple(replace(s, in_place=s.time_axis is not None) for s in self.states)
        return replace(self, decoder=decoder, states=states)

    def check(self) -> None:
        """ValueError unless the runtime can serve this declaration: rows on axis 0, every
        memory and state name declared by the graphs."""
        problems = [
            f"{s.input}: batch axis {s.batch_axis}, not 0" for s in self.states if s.batch_axis != 0
        ]
        encoder_out, step_in = set(self.encoder.output_names), set(self.decoder.input_names)
        step_out = set(self.decoder.output_names)
        problems += [
            f"memory {n}: not an encoder output"
            for n in self.memory
            if n not in encoder_out or n not in step_in
        ]
        for s in self.states:
            if s.input not in step_in or s.output not in step_out:
                problems.append(f"state {s.input} -> {s.output}: not a step input and output")
            if s.init is not None and s.init not in encoder_out:
                problems.append(f"state {s.input}: init {s.init} is not an encoder output")
        if "memory_mask" not in self.memory or self.attention not in step_out:
            problems.append("memory_mask and the attention output are required")
        if problems:
            raise ValueError(f"{self.kind} interface: " + "; ".join(problems))

    def to_dict(self) -> dict:
        """The declaration as the manifest stores it."""

        def graph(spec: GraphSpec) -> dict:
            return {
                direction: [
                    {"name": t.name, "dtype": t.dtype, "axes": list(t.axes)} for t in tensors
                ]
                for direction, tensors in (("inputs", spec.inputs), ("outputs", spec.outputs))
            }

        return {
            "kind": self.kind,
            "encoder": graph(self.encoder),
            "decoder": graph(self.decoder),
            "memory": list(self.memory),
            "states": [
                {
                    "input": s.input,
                    "output": s.output,
                    "batch_axis": s.batch_axis,
                    "time_axis": s.time_axis,
                    "init": s.init,
                    **({"in_place": True} if s.in_place else {}),
                }
                for s in self.states
            ],
            "attention": self.attention,
        }


def transformer_interface(layers: int) -> ModelInterface:
    """The translator: cross keys/values as memory, a growing key/value cache as state."""
    encoder, decoder = encoder_spec(layers), decoder_spec(layers)
    memory = tuple(n for n in encoder.output_names if n != "memory_mask") + ("memory_mask",)
    states = tuple(
        StateSpec(f"past_key_values.{i}.{part}", f"present.{i}.{part}", 0, 2)
        for i in range(layers)
        for part in ("key", "value")
    )
    return ModelInterface("transformer", encoder, decoder, memory, states)


def captioner_interface() -> ModelInterface:
    """The captioner: the image grid and its attention projection as memory, the LSTM's
    (h, c) as fixed-size state started by the encoder."""
    encoder = GraphSpec(
        "encoder",
        IMAGE_ENCODER_INPUTS,
        (
            TensorSpec("memory_mask", "int64", ("batch", "memory")),
            TensorSpec("grid", FLOAT, ("batch", "memory", "features")),
            TensorSpec("grid_projection", FLOAT, ("batch", "memory", "attention")),
            TensorSpec("init.h", FLOAT, ("batch", "hidden")),
            TensorSpec("init.c", FLOAT, ("batch", "hidden")),
        ),
    )
    decoder = GraphSpec(
        "decoder",
        (
            TensorSpec("input_ids", "int64", ("batch", "one")),
            TensorSpec("past.h", FLOAT, ("batch", "hidden")),
            TensorSpec("past.c", FLOAT, ("batch", "hidden")),
            TensorSpec("grid", FLOAT, ("batch", "memory", "features")),
            TensorSpec("grid_projection", FLOAT, ("batch", "memory", "attention")),
            TensorSpec("memory_mask", "int64", ("batch", "memory")),
        ),
        (
            TensorSpec("logits", FLOAT, ("batch", "vocab")),
            TensorSpec("present.h", FLOAT, ("batch", "hidden")),
            TensorSpec("present.c", FLOAT, ("batch", "hidden")),
            TensorSpec("cross_attention", FLOAT, ("batch", "memory")),
        ),
    )
    states = (
        StateSpec("past.h", "present.h", 0, None, "init.h"),
        StateSpec("past.c", "present.c", 0, None, "init.c"),
    )
    return ModelInterface(
        "captioner", encoder, decoder, ("grid", "grid_projection", "memory_mask"), states
    )


def interface_for(kind: str, config: dict) -> ModelInterface:
    """The interface of a model kind with this config; ValueError for an unknown kind."""
    if kind == "transformer":
        return transformer_interface(config["decoder_layers"])
    if kind == "captioner":
        return captioner_interface()
    raise ValueError(f"unknown model kind {kind!r}")


def check_inputs(spec: GraphSpec, feeds: dict[str, np.ndarray], float_dtype: np.dtype) -> None:
    """Raises ValueError naming every missing, mistyped or inconsistently sized input."""
    problems, sizes = [], {}
    for tensor in spec.inputs:
        array = feeds.get(tensor.name)
        if array is None:
            problems.append(f"{tensor.name}: missing")
            continue
        expected = tensor.numpy_dtype(float_dtype)
        if array.dtype != expected:
            problems.append(f"{tensor.name}: dtype {array.dtype}, expected {expected}")
        if array.ndim != len(tensor.axes):
            problems.append(f"{tensor.name}: {array.ndim} axes, expected {tensor.axes}")
            continue
        for axis, size in zip(tensor.axes, array.shape, strict=True):
            if sizes.setdefault(axis, (size, tensor.name))[0] != size:
                other_size, other = sizes[axis]
                problems.append(
                    f"{tensor.name}: {axis}={size}, but {other} has {axis}={other_size}"
                )
    lengths = [sizes[axis][0] for axis in ("total", "past", "new") if axis in sizes]
    if len(lengths) == 3 and lengths[0] != lengths[1] + lengths[2]:
        problems.append("self_mask: total must equal past + new")
    if problems:
        raise ValueError(f"{spec.name} inputs: " + "; ".join(problems))
