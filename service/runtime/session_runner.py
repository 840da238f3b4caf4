"""Runs an engine's onnxruntime sessions: plain (numpy in, numpy out), or through IO binding,
outputs left on the device but those asked for on the host.

With IO binding each session keeps one binding a thread, and an input is bound again only
when another tensor is fed, so a step's cache and memory stay bound from step to step. A
binding is never shared between threads: the scheduler's thread and the encoder thread run
the same helper graphs at once, and a shared binding would hand one run the other's inputs
and outputs.
"""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort

from service.runtime.onnx_runtime import ORT_TYPES, bind_output

OUT = "->"  # prefix of an output's entry among a binding's bound tensors


class SessionRunner:
    """Runs sessions on one device, plain or through IO binding."""

    def __init__(self, device: str, io_binding: bool):
        self.device, self.io_binding = device, io_binding
        self._output_names: dict[ort.InferenceSession, list[str]] = {}
        # this thread's (binding, bound inputs) of each session, in `bindings`
        self._threads = threading.local()
        self._types: dict[ort.InferenceSession, dict] = {}  # output dtypes

    def outputs(self, session: ort.InferenceSession) -> list[str]:
        """A session's output names, read once (every step runs this)."""
        names = self._output_names.get(session)
        if names is None:
            names = self._output_names[session] = [o.name for o in session.get_outputs()]
        return names

    def run(
        self,
        session: ort.InferenceSession,
        feeds: dict,
        on_host=(),
        skip=(),
        into=None,
        shapes=None,
        borrowed=(),
    ) -> list:
        """Runs a session -> its outputs in order; with IO binding, outputs stay on the
        device except `on_host`. Outputs named in `skip` are not fetched (None in their
        place). `into` (output name: input name): outputs written into the buffer fed as
        that input, returned as that feed (a numpy array too: bound by its memory, so on the
        host path as well). `shapes` (output name: shape): host outputs written into numpy
        arrays kept bound from run to run while their shape holds (binding an output costs
        more than copying a step's logits), returned as copies, so no OrtValue is made or
        read for them; those named in `borrowed` as the kept array itself, valid until the
        next run (logits that no one reads: copying (rows, vocab) floats was 4% of a
        1,024-row CPU step)."""
        names = self.outputs(session)
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
        """This thread's IO binding of the session with `feeds` bound, and what each input is
        bound to (by name). A numpy array is bound by its own memory (onnxruntime copies it to
        another device at every run), so rows written into it in place are read; one that is
        not contiguous is copied when bound, so it is bound again at the next run."""
        bindings = getattr(self._threads, "bindings", None)
        if bindings is None:
            bindings = self._threads.bindings = {}
        binding, bound = bindings.get(session) or bindings.setdefault(
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
