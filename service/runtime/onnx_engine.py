"""The onnxruntime engine: a model version's encoder and decoder-step graphs.

Two ways to move tensors, one code path per way whatever the device:
- plain: numpy in, numpy out (the cache round-trips through host memory);
- IO binding (default on CUDA, selectable on CPU so tests exercise it): the cache and the
  encoder's keys/values stay `OrtValue`s on the device, rows are reordered, joined and
  narrowed there by the repository's helper graphs (export.ops), and only ids, positions,
  masks, the search's candidates and (when asked for) the cross-attention row cross to the
  host.

The search (log-softmax and top-k over the vocabulary, service.runtime.search) runs as the
repository's `search`/`sample` graph on the logits where the step left them (`device_search`,
the default: on a GPU only (rows, k) numbers leave it, and on one CPU thread the graph is
faster than numpy too, docs/benchmarks.md), or in numpy on the host (`host_search`, the
reference it is proven equal to).

Where a variant ships them, the steps run with their cache written in place (the default on
the CPU; on CUDA, whose GroupQueryAttention kernel is float16 only, when asked for, as this
path is not yet measured there): the keys and values of every row live in a buffer bound as
the step's input and output, each row's positions from 0, written at the row's position and
read up to it, so no step copies the past (a growing cache concatenates it every step); the
engine grows the buffer when a row reaches its capacity. The growing step stays the
reference they are certified against, and the only form that takes several new tokens at
once (the uncached decode).

A step that keeps no alignment runs the version's lean step where it ships one (the same
step without the cross-attention output, export.builder), for a single row its one-row form
where the variant has one (int8: a matrix-vector kernel), else the full step with that
output left unfetched.

The static step (`cache="static"`) is the in-place step at a fixed capacity; a continuous
batch runs it over its row store's buckets of buffers allocated once, so that CUDA graphs can
replay it (service.runtime.rows.static). The engine makes it (`static_step`: its graphs and
what its buffers are sized by) and hands it to the store; it does not run it itself.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from service.runtime.cache_choice import PREFIXES, check_cache, choose_cache, shipped_caches
from service.runtime.choices import AUTO
from service.runtime.errors import ModelRepositoryError
from service.runtime.grammar import Grammar
from service.runtime.graphs import (
    LEAN_STEP,
    ONE_ROW_STEP,
    ModelInterface,
    SpecialTokens,
    check_inputs,
    interface_for,
)
from service.runtime.onnx_runtime import (
    ORT_TYPES,
    PROVIDERS,
    banned_bias,
    providers,
    session_options,
)
from service.runtime.repository import ModelVersion
from service.runtime.search import CANDIDATES, Candidates, SearchRequest, host_search
from service.runtime.session_runner import SessionRunner
from service.runtime.static_step import StepGraph, static_step
from service.runtime.tensor_ops import HELPER_OPS, TensorOps
from service.runtime.tensors import (
    EncoderOutput,
    StepOutput,
    Tensor,
    Tensors,
    grown_capacity,
    shape_of,
)


def model_interface(model: ModelVersion) -> ModelInterface:
    """The interface of a model version's kind; the manifest's own copy must agree."""
    kind = model.manifest["model"].get("kind")
    try:
        interface = interface_for(kind, model.config)
    except ValueError as error:
        raise ModelRepositoryError(f"{model.directory}: {error}") from None
    declared = model.manifest.get("interface")
    if declared is not None and declared != interface.to_dict():
        raise ModelRepositoryError(f"{model.directory}: the manifest's interface is not {kind}'s")
    try:
        interface.check()
    except ValueError as error:
        raise ModelRepositoryError(f"{model.directory}: {error}") from None
    return interface


class OnnxEngine:
    """Runs one variant ("fp32", "int8", "fp16") of a model version on one device."""

    def __init__(
        self,
        model: ModelVersion,
        variant: str = "fp32",
        device: str = "cpu",
        threads: int = 1,
        io_binding: bool | None = None,
        device_search: bool | None = None,
        cache: str | None = None,
        capture: bool | None = None,
    ):
        """`cache`: "in_place", "growing" or "static" (the key/value cache); by default the
        choice of service.runtime.cache_choice (in place on the CPU where the variant ships
        that form). "static": the in-place step with a fixed capacity over buffers allocated
        once per bucket of rows (service.runtime.static_step), through IO binding; `capture`
        (by default on CUDA) replays each bucket's step as a CUDA graph."""
        if device not in PROVIDERS:
            raise ValueError(f"device must be one of {sorted(PROVIDERS)}, got {device!r}")
        if cache is None:
            cache = choose_cache(AUTO, device, shipped_caches(model, variant)).cache
        if capture is None:  # by default the static step is captured on CUDA, nothing else
            capture = device == "cuda" and cache == "static"
        self.io_binding = check_cache(model, variant, device, cache, io_binding, capture)
        self.interface = model_interface(model)
        if cache != "growing":
            self.interface = self.interface.in_place(PREFIXES[cache])
        elif not any(s.time_axis is not None for s in self.interface.states):
            cache = "none"  # no key/value cache (an LSTM's state)
        self.cache = cache  # "in_place", "growing", "static" or "none"
        self.kind = self.interface.kind
        self.special_tokens = SpecialTokens.from_manifest(model.manifest["special_tokens"])
        self.grammar = Grammar.from_manifest(model.manifest.get("grammar"))
        self.float_dtype = np.dtype(np.float16 if variant == "fp16" else np.float32)
        self.encoder_spec, self.decoder_spec = self.interface.encoder, self.interface.decoder
        # names the decode loop reads every step, computed once
        self.memory_names = self.interface.memory_tensors
        self.step_inputs = set(self.decoder_spec.input_names)
        self.states = self.interface.states
        self.in_place = {s.input: s for s in self.states if s.in_place}  # buffers written into
        self._into = {s.output: s.input for s in self.in_place.values()}
        self.init_states = [s for s in self.states if s.init is not None]
        self.variant, self.device, self.capture = variant, device, capture
        self.host_tensors = not self.io_binding
        self.device_search = True if device_search is None else device_search
        self.logits_on_host = () if self.device_search else ("logits",)
        self._bias: dict[tuple, object] = {}
        self.vocab = int(model.config.get("vocab_size", 0))
        self.runner = SessionRunner(device, self.io_binding)
        self._load(model, threads)

    def _load(self, model: ModelVersion, threads: int) -> None:
        """The sessions: encoder, the forms of the step the variant ships, helper graphs,
        and the static step where the cache is static."""
        variant, prefix = self.variant, PREFIXES.get(self.cache, "")
        session = self._session_factory(threads)
        self.encoder = session(model.graph(variant, "encoder"))
        step_session = self._session_factory(threads, True) if self.capture else session
        self.decoder = step_session(model.graph(variant, prefix + "decoder"))
        # the step without the attention output, and its one-row form, where shipped
        self.lean_decoder, self.one_row_decoder = (
            self._lean(model, variant, prefix + name, step_session)
            for name in (LEAN_STEP, ONE_ROW_STEP)
        )
        self.state_shapes = {  # fixed sizes of every state, by input name (None: varies)
            i.name: [d if isinstance(d, int) else None for d in i.shape]
            for i in self.decoder.get_inputs()
            if i.name in {s.input for s in self.states}
        }
        self._empty: dict[tuple[str, int], Tensor] = {}  # empty states by (name, rows): kept
        dtypes = (self.float_dtype.name, "int64")
        self.ops = {  # the helper graphs by op and dtype (rows are numpy without IO binding)
            op: {d: session(model.op(op, d)) for d in dtypes}
            for op in (HELPER_OPS if self.io_binding else ())
        }
        self.tensors = TensorOps(self.runner, self.ops)
        if self.device_search:
            self.search_ops = {
                op: session(model.op(op, self.float_dtype.name)) for op in ("search", "sample")
            }
        self.static_step = None  # the static step's graphs, where the cache is static
        if self.cache == "static":
            graphs = {StepGraph.FULL: self.decoder, StepGraph.LEAN: self.lean_decoder}
            self.static_step = static_step(
                model,
                variant,
                self.float_dtype,
                self.interface,
                graphs,
                self.tensors,
                session,
                self.capture,
            )

    @property
    def rows(self) -> str:
        """How a continuous batch holds rows over this engine: the static step's buckets,
        numpy arrays written in place on the host path, or OrtValues on the device path."""
        if self.cache == "static":
            return "static"
        return "host" if self.host_tensors else "device"

    def _session_factory(self, threads: int, capture: bool = False):
        """Sessions on the engine's device; with `capture` (the static step's sessions
        alone), onnxruntime's CUDA graphs."""
        options, chosen = session_options(threads, self.device), providers(self.device, capture)
        return lambda path: ort.InferenceSession(str(path), options, providers=chosen)

    def _lean(self, model: ModelVersion, variant: str, name: str, session):
        """The session of a lean step `name` if the version ships one (its outputs checked)."""
        if not model.has_graph(variant, name):
            return None
        lean = session(model.graph(variant, name))
        shipped, declared = [o.name for o in lean.get_outputs()], self.interface.lean_decoder
        if shipped != declared.output_names:
            raise ModelRepositoryError(
                f"{model.directory}: {variant} {name} outputs {shipped}, not "
                f"{declared.output_names}"
            )
        return lean

    def encode(self, *inputs: np.ndarray, **named: np.ndarray) -> EncoderOutput:
        """The encoder's inputs, in declared order or by name -> memory, mask and the states
        it starts."""
        feeds = {**dict(zip(self.encoder_spec.input_names, inputs, strict=False)), **named}
        check_inputs(self.encoder_spec, feeds, self.float_dtype)
        outputs = self.runner.run(self.encoder, feeds, on_host=("memory_mask",))
        named = dict(zip(self.encoder_spec.output_names, outputs, strict=True))
        return EncoderOutput(
            memory={n: named[n] for n in self.memory_names},
            memory_mask=named["memory_mask"],
            init={s.input: named[s.init] for s in self.init_states},
        )

    def initial_state(self, encoder: EncoderOutput, batch: int) -> Tensors:
        state = {}
        for spec in self.states:
            if spec.init is not None:
                state[spec.input] = encoder.init[spec.input]
                continue
            empty = self._empty.get((spec.input, batch))
            if empty is None:  # nothing to write into: made once for a number of rows
                shape = list(self.state_shapes[spec.input])
                shape[spec.batch_axis], shape[spec.time_axis] = batch, 0
                empty = np.zeros(shape, dtype=self.float_dtype)
                if self.io_binding:
                    empty = ort.OrtValue.ortvalue_from_numpy(empty, self.device, 0)
                self._empty[(spec.input, batch)] = empty
            state[spec.input] = empty
        return state

    def feeds(self, input_ids, positions, self_mask, state: Tensors, encoder: EncoderOutput):
        """The decoder's feeds by declared name; inputs the step does not declare are left."""
        given = {"input_ids": input_ids, "positions": positions, "self_mask": self_mask}
        feeds = {n: v for n, v in given.items() if n in self.step_inputs}
        feeds.update(state)
        feeds.update(encoder.memory)
        feeds["memory_mask"] = encoder.memory_mask
        return feeds

    def step(
        self,
        input_ids,
        positions,
        self_mask,
        state: Tensors,
        encoder: EncoderOutput,
        attention: bool = True,
        search: SearchRequest | None = None,
    ):
        """A lean step also runs the search `search` asks for (by log-probability: a sampling
        or absent request gets k = 1 and its candidates are dropped) and returns its
        candidates (its logits are then the step's output buffer on the host, which the next
        step writes again). An in-place cache is written where it is (the state returned is
        the buffers given, or larger ones when a row needed more positions than they hold)."""
        if self.cache == "static":
            raise ValueError(
                "the static step runs over a batch's buckets (service.runtime.rows.static)"
            )
        if self.in_place:
            if shape_of(input_ids)[1] != 1:
                raise ValueError("a cache written in place takes one new token per row a step")
            state = self._capacity(state, int(np.max(positions)) + 1)
        feeds = self.feeds(input_ids, positions, self_mask, state, encoder)
        if self_mask.shape[1] == input_ids.shape[1]:  # a first step: check the whole interface
            check_inputs(
                self.decoder_spec, {k: _Described(v) for k, v in feeds.items()}, self.float_dtype
            )
        name = self.interface.attention
        if attention:
            session, on_host, skip = self.decoder, (*self.logits_on_host, name), ()
        elif self.one_row_decoder is not None and shape_of(input_ids)[0] == 1:
            session, on_host, skip = self.one_row_decoder, self.logits_on_host, ()
        elif self.lean_decoder is not None:
            session, on_host, skip = self.lean_decoder, self.logits_on_host, ()
        else:
            session, on_host, skip = self.decoder, self.logits_on_host, (name,)
        lean, ranked = session is not self.decoder, False
        if lean:  # the search folded into the step
            ranked = search is not None and search.temperature is None
            request = search if ranked else SearchRequest()
            feeds.update(self._search_feeds(request, self.vocab))
            on_host = (*on_host, *CANDIDATES)
        shapes = None  # a bound step's host outputs, so that they are written into arrays
        if self.io_binding or self._into:
            rows = shape_of(input_ids)[0]
            shapes = {name: (rows, shape_of(encoder.memory_mask)[1])}
            if self.vocab:
                shapes["logits"] = (rows, self.vocab)
            if lean:
                k = int(feeds["k"][0])
                shapes |= {"ids": (rows, k), "log_probs": (rows, k)}
        # logits whose search the step answered are only matched by `search`, never read
        borrowed = ("logits",) if ranked else ()
        outputs = self.runner.run(session, feeds, on_host, skip, self._into, shapes, borrowed)
        named = dict(zip(self.runner.outputs(session), outputs, strict=True))
        seen = named[name].astype(np.float32, copy=False) if attention else None
        found = Candidates(*(named[n] for n in CANDIDATES)) if ranked else None
        state = {s.input: named[s.output] for s in self.states}
        return StepOutput(named["logits"], state, seen, found)

    def _capacity(self, state: Tensors, needed: int) -> Tensors:
        """`state` whose in-place buffers hold at least `needed` positions: a buffer too small
        is replaced by one twice as large (or `needed`), its rows' positions copied."""
        first = next(iter(self.in_place.values()))  # every buffer has the same capacity
        if shape_of(state[first.input])[first.time_axis] >= needed:
            return state
        grown = dict(state)
        for name, spec in self.in_place.items():
            tensor = state[name]
            shape = list(shape_of(tensor))
            shape[spec.time_axis] = grown_capacity(shape[spec.time_axis], needed)
            grown[name] = self.tensors.pad(tensor, shape)
        return grown

    def host(self, logits) -> np.ndarray:
        if not isinstance(logits, np.ndarray):
            logits = logits.numpy()
            if self.cache == "static":  # a bucket's buffer, written again by the next step
                return np.array(logits, dtype=np.float32)
        return logits.astype(np.float32, copy=False)

    def _bias_for(self, banned: tuple[int, ...], vocab: int):
        """`banned_bias`, kept (on the device with IO binding) for the next steps."""
        key = (banned, vocab)
        if key not in self._bias:
            bias = banned_bias(banned, vocab)
            if self.io_binding:
                bias = ort.OrtValue.ortvalue_from_numpy(bias, self.device, 0)
            self._bias[key] = bias
        return self._bias[key]

    def _search_feeds(self, request: SearchRequest, vocab: int) -> dict:
        """The search's bias (banned tokens) and k, for the search graphs and the lean step."""
        return {
            "bias": self._bias_for(tuple(request.banned), vocab),
            "k": np.array([request.width(vocab)], dtype=np.int64),
        }

    def search(self, logits, request: SearchRequest) -> Candidates:
        """The candidates of every row: by the search graph where the logits are, or in numpy
        on the host without one."""
        if not self.device_search:
            return host_search(self.host(logits), request)
        feeds = {"logits": logits, **self._search_feeds(request, shape_of(logits)[1])}
        names = CANDIDATES
        if request.temperature is None:
            session = self.search_ops["search"]
        else:
            session = self.search_ops["sample"]
            feeds["temperature"] = np.asarray(request.temperature, np.float32).reshape(-1, 1)
            names = (*CANDIDATES, "scores")
        outputs = self.runner.run(session, feeds, on_host=names)
        return Candidates(*outputs)

    def take(self, tensor, index: np.ndarray):
        return self.tensors.take(tensor, index)

    def join(self, a, b):
        return self.tensors.join(a, b)

    def narrow(self, tensor, axis: int, start: int, end: int):
        return self.tensors.narrow(tensor, axis, start, end)


class _Described:
    """Shape and dtype of a numpy array or an OrtValue, for the interface check."""

    def __init__(self, tensor):
        self.shape = shape_of(tensor)
        self.ndim = len(self.shape)
        self.dtype = (
            tensor.dtype
            if isinstance(tensor, np.ndarray)
            else np.dtype(ORT_TYPES[tensor.data_type()])
        )
