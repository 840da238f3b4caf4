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
replay it (service.runtime.rows.static). The engine holds its sessions, helper graphs and place op.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnxruntime as ort

from service.runtime.batching import concat_padded
from service.runtime.choices import CACHES
from service.runtime.errors import ModelRepositoryError
from service.runtime.graphs import (
    IN_PLACE,
    LEAN_STEP,
    ONE_ROW_STEP,
    STATIC,
    ModelInterface,
    SpecialTokens,
    check_inputs,
    interface_for,
)
from service.runtime.onnx_runtime import (
    ORT_TYPES,
    PROVIDERS,
    banned_bias,
    bind_output,
    providers,
    session_options,
)
from service.runtime.repository import ModelVersion
from service.runtime.search import Candidates, SearchRequest, host_search
from service.runtime.tensors import EncoderOutput, StepOutput, Tensor, Tensors, shape_of

CANDIDATES = ("ids", "log_probs")  # a lean step's search outputs
OUT = "->"  # prefix of an output's entry among a binding's bound tensors
MIN_CAPACITY = 32  # positions of an in-place buffer when it is first grown


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
        """`cache`: "in_place", "growing" or "static" (the key/value cache); by default in
        place on the CPU where the variant ships that form. "static": the in-place step with
        a fixed capacity over buffers allocated once per bucket of rows
        (service.runtime.rows.static), through IO binding; `capture` (by default on CUDA)
        replays each bucket's step as a CUDA graph."""
        if device not in PROVIDERS:
            raise ValueError(f"device must be one of {sorted(PROVIDERS)}, got {device!r}")
        if cache == "static":
            if io_binding is False:
                raise ValueError("a static cache is bound to its buffers: it needs IO binding")
            io_binding = True
            if not model.has_graph(variant, STATIC + "decoder"):
                raise ModelRepositoryError(f"{model.directory}: {variant} has no static step")
        if capture is None:  # by default the static step is captured on CUDA, nothing else
            capture = device == "cuda" and cache == "static"
        if capture and cache != "static":
            raise ValueError("CUDA graphs replay the static step: capture needs cache='static'")
        if capture and device != "cuda":
            raise ValueError("CUDA graphs need device cuda")
        self.io_binding = device != "cpu" if io_binding is None else io_binding
        shipped = model.has_graph(variant, IN_PLACE + "decoder")
        # where an in-place buffer can be bound: host memory on the CPU, an OrtValue anywhere
        bindable = device == "cpu" or self.io_binding
        if cache is None:  # on CUDA (GQA: float16 only) in place only when asked, until measured
            cache = "in_place" if shipped and device == "cpu" else "growing"
        if cache not in CACHES:
            raise ValueError(f"cache must be one of {CACHES}, got {cache!r}")
        if cache == "in_place" and not shipped:
            raise ModelRepositoryError(f"{model.directory}: {variant} has no in-place step")
        if cache == "in_place" and not bindable:
            raise ValueError(f"an in-place cache on {device} needs IO binding")
        prefix = {"in_place": IN_PLACE, "static": STATIC}.get(cache, "")
        self.interface = model_interface(model)
        if prefix:
            self.interface = self.interface.in_place(prefix)
        elif not any(s.time_axis is not None for s in self.interface.states):
            cache = "none"  # no key/value cache (an LSTM's state)
        self.cache = cache  # "in_place", "growing", "static" or "none"
        self.kind = self.interface.kind
        self.special_tokens = SpecialTokens.from_manifest(model.manifest["special_tokens"])
        self.float_dtype = np.dtype(np.float16 if variant == "fp16" else np.float32)
        self.encoder_spec, self.decoder_spec = self.interface.encoder, self.interface.decoder
        # names the decode loop reads every step, computed once
        self.memory_names = self.interface.memory_tensors
        self.step_inputs = set(self.decoder_spec.input_names)
        self.states = self.interface.states
        self.in_place = {s.input: s for s in self.states if s.in_place}  # buffers written into
        self._into = {s.output: s.input for s in self.in_place.values()}
        self.init_states = [s for s in self.states if s.init is not None]
        self.variant, self.device = variant, device
        self.host_tensors = not self.io_binding
        self.device_search = True if device_search is None else device_search
        self.logits_on_host = () if self.device_search else ("logits",)
        self._bias: dict[tuple, object] = {}
        self.vocab = int(model.config.get("vocab_size", 0))
        self._output_names: dict[ort.InferenceSession, list[str]] = {}
        self._bindings: dict[ort.InferenceSession, tuple] = {}  # (binding, bound inputs)
        self._types: dict[ort.InferenceSession, dict] = {}  # output dtypes
        session = self._session_factory(threads)
        self.encoder = session(model.graph(variant, "encoder"))
        step_session = self._session_factory(threads, capture) if capture else session
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
        if self.io_binding:
            dtypes = (self.float_dtype.name, "int64")
            self.ops = {
                op: {d: session(model.op(op, d)) for d in dtypes}
                for op in ("gather", "join", "narrow")
            }
        if self.device_search:
            self.search_ops = {
                op: session(model.op(op, self.float_dtype.name)) for op in ("search", "sample")
            }
        self.capture, self.graph_ids = capture, itertools.count()  # CUDA graphs, their ids
        self.place_op = self.static_memory = self.static_capacity = None
        if cache == "static":
            limits = model.manifest.get("limits", {})
            self.static_memory = int(limits.get("max_source_tokens", 0)) or int(
                model.config["max_length"]
            )
            self.static_capacity = self._fixed_capacity()
            self.place_op = self._place_op(model, session)

    @property
    def rows(self) -> str:
        """How a continuous batch holds rows over this engine: the static step's buckets,
        numpy arrays written in place on the host path, or OrtValues on the device path."""
        if self.cache == "static":
            return "static"
        return "host" if self.host_tensors else "device"

    def _fixed_capacity(self) -> int:
        """The static step's cache capacity (positions), fixed in its graph."""
        inputs = {i.name: i for i in self.decoder.get_inputs()}
        first = self.states[0]
        capacity = inputs[first.input].shape[first.time_axis]
        if not isinstance(capacity, int):
            raise ModelRepositoryError(f"{self.variant} static step: its capacity is not fixed")
        return capacity

    def _place_op(self, model: ModelVersion, session):
        """The version's `place` op (every memory tensor's rows into slots in one run), where
        it ships one; None where not (rows are then placed a tensor at a time)."""
        dtype = self.float_dtype.name
        if not model.has_op("place", dtype):
            return None
        place = session(model.op("place", dtype))
        if len(place.get_outputs()) != len(self.memory_names):
            raise ModelRepositoryError(
                f"{model.directory}: its {dtype} place op writes {len(place.get_outputs())} "
                f"tensors, the model has {len(self.memory_names)} memory tensors"
            )
        return place

    def _session_factory(self, threads: int, capture: bool = False):
        """Sessions on the engine's device; with `capture` (the static step's sessions
        alone), onnxruntime's CUDA graphs."""
        options, chosen = session_options(threads), providers(self.device, capture)
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

    def _outputs(self, session: ort.InferenceSession) -> list[str]:
        """A session's output names, read once (every step runs this)."""
        names = self._output_names.get(session)
        if names is None:
            names = self._output_names[session] = [o.name for o in session.get_outputs()]
        return names

    def _run(
        self,
        session: ort.InferenceSession,
        feeds: dict,
        on_host=(),
        skip=(),
        into=None,
        shapes=None,
        borrowed=(),
    ) -> list:
        """Runs a session; with IO binding, outputs stay on the device except `on_host`.
        Outputs named in `skip` are not fetched (None in their place). `into` (output name:
        input name): outputs written into the buffer fed as that input, returned as that
        feed (a numpy array too: bound by its memory, so on the host path as well).
        `shapes` (output name: shape): host outputs written into numpy arrays kept bound
        from run to run while their shape holds (binding an output costs more than copying
        a step's logits), returned as copies, so no OrtValue is made or read for them; those
        named in `borrowed` as the kept array itself, valid until the next run (logits that
        no one reads: copying (rows, vocab) floats was 4% of a 1,024-row CPU step)."""
        names = self._outputs(session)
        into, shapes = into or {}, shapes or {}
        if not self.io_binding and not into:
            if not skip:
                return session.run(None, feeds)
            wanted = [n for n in names if n not in skip]
            values = dict(zip(wanted, session.run(wanted, feeds), strict=True))
            return [values.get(n) for n in names]
        binding, bound = self._bind_inputs(session, feeds)
        host, types = not self.io_binding, self._output_types(session)
        given, order = {}, []  # arrays kept bound; outputs onnxruntime allocates
        for name in names:
            if name in into:  # bound again only when the buffer changes
                buffer = feeds[into[name]]
                if bound.get(OUT + name) is not buffer:
                    bind_output(binding, name, buffer)
                    bound[OUT + name] = buffer
            elif name in shapes and (host or name in on_host):
                buffer = bound.get(OUT + name)
                if buffer is None or buffer.shape != shapes[name]:
                    buffer = bound[OUT + name] = np.empty(shapes[name], dtype=types[name])
                    bind_output(binding, name, buffer)
                given[name] = buffer
            else:
                bound.pop(OUT + name, None)
                binding.bind_output(name, "cpu" if host or name in on_host else self.device)
                order.append(name)
        session.run_with_iobinding(binding)
        values = {}
        if order:  # every output is bound at every run, in the same order
            values = dict(zip(names, binding.get_outputs(), strict=True))
        result = []
        for name in names:
            if name in into:
                result.append(feeds[into[name]])
            elif name in given:
                kept = given[name]
                result.append(None if name in skip else kept if name in borrowed else kept.copy())
            elif name in skip and host:
                result.append(None)
            else:
                value = values[name]
                result.append(value.numpy() if host or name in on_host else value)
        return result

    def _output_types(self, session: ort.InferenceSession) -> dict[str, np.dtype]:
        types = self._types.get(session)
        if types is None:
            types = self._types[session] = {
                o.name: np.dtype(ORT_TYPES[o.type]) for o in session.get_outputs()
            }
        return types

    def _bind_inputs(self, session: ort.InferenceSession, feeds: dict):
        """The session's IO binding with `feeds` bound, and what each input is bound to (by
        name). A binding is kept per session and an input is bound again only when another
        tensor is fed (a step's cache and memory stay bound from step to step). A numpy
        array is bound by its own memory (onnxruntime copies it to another device at every
        run), so rows written into it in place are read; one that is not contiguous is
        copied when bound, so it is bound again at the next run."""
        binding, bound = self._bindings.get(session) or self._bindings.setdefault(
            session, (session.io_binding(), {})
        )
        for name, value in feeds.items():
            if bound.get(name) is value:
                continue
            if isinstance(value, np.ndarray):
                binding.bind_cpu_input(name, value)
                bound[name] = value if value.flags.c_contiguous else None
            else:
                binding.bind_ortvalue_input(name, value)
                bound[name] = value
        return binding, bound

    def encode(self, *inputs: np.ndarray, **named: np.ndarray) -> EncoderOutput:
        """The encoder's inputs, in declared order or by name -> memory, mask and the states
        it starts."""
        feeds = {**dict(zip(self.encoder_spec.input_names, inputs, strict=False)), **named}
        check_inputs(self.encoder_spec, feeds, self.float_dtype)
        outputs = self._run(self.encoder, feeds, on_host=("memory_mask",))
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
        outputs = self._run(session, feeds, on_host, skip, self._into, shapes, borrowed)
        named = dict(zip(self._outputs(session), outputs, strict=True))
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
            shape[spec.time_axis] = max(needed, 2 * shape[spec.time_axis], MIN_CAPACITY)
            grown[name] = self.pad(tensor, shape)
        return grown

    def pad(self, tensor, shape):
        """`tensor` right-padded with zeros to `shape` (rows on axis 0 unchanged), where it
        lives."""
        if tuple(shape_of(tensor)) == tuple(shape):
            return tensor
        if isinstance(tensor, np.ndarray):
            padded = np.zeros(shape, dtype=tensor.dtype)
            padded[tuple(map(slice, tensor.shape))] = tensor
            return padded
        # joined with no rows of the larger size: padded to it, on the device
        empty = np.zeros([0, *shape[1:]], dtype=ORT_TYPES[tensor.data_type()])
        return self.join(tensor, ort.OrtValue.ortvalue_from_numpy(empty, self.device, 0))

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
        outputs = self._run(session, feeds, on_host=names)
        return Candidates(*outputs)

    def _op(self, name: str, tensor):
        return self.ops[name][ORT_TYPES[tensor.data_type()]]

    def take(self, tensor, index: np.ndarray):
        """Rows `index` of `tensor`; on the device where it lives."""
        index = np.asarray(index, dtype=np.int64)
        if isinstance(tensor, np.ndarray):
            return np.take(tensor, index, axis=0)
        return self._run(self._op("gather", tensor), {"data": tensor, "indices": index})[0]

    def join(self, a, b):
        """Rows of `a`, then rows of `b`, every other axis of the shorter right-padded with
        zeros."""
        if isinstance(a, np.ndarray):
            return concat_padded([a, b])
        a_pads, b_pads = join_pads(shape_of(a), shape_of(b))
        feeds = {"a": a, "b": b, "a_pads": a_pads, "b_pads": b_pads}
        return self._run(self._op("join", a), feeds)[0]

    def narrow(self, tensor, axis: int, start: int, end: int):
        """Positions start..end of `axis`."""
        if isinstance(tensor, np.ndarray):
            index = [slice(None)] * tensor.ndim
            index[axis] = slice(start, end)
            return np.ascontiguousarray(tensor[tuple(index)])
        feeds = {
            "data": tensor,
            "start": np.array([start]),
            "end": np.array([end]),
            "axis": np.array([axis]),
        }
        return self._run(self._op("narrow", tensor), feeds)[0]


def join_pads(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The join graph's pads (2 x rank,) int64 for tensors of shapes `a` and `b`: nothing
    before, and after every axis but the first up to the longer of the two."""
    if len(a) != len(b):
        raise ValueError(f"joined tensors have one rank, got shapes {a} and {b}")
    longest = np.maximum(a, b)
    longest[0] = 0  # rows are concatenated, not padded

    def pads(shape) -> np.ndarray:
        ends = np.maximum(longest - np.asarray(shape, np.int64), 0)
        return np.concatenate([np.zeros(len(shape), np.int64), ends])

    return pads(a), pads(b)


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
