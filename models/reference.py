"""The PyTorch reference engines: the Transformer and the Captioner behind the runtime's
`Engine` interface.

They run the very decoding strategies, continuous batch and scheduler the server runs
(service/), following the same interface declaration (service.runtime.graphs), so a PyTorch
decode and an onnxruntime decode differ only in the engine.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from models.captioner import Captioner
from models.kinds import CaptionerKind, ModelKind, TranslatorKind, model_kind
from models.transformer import Transformer
from service.runtime.grammar import Grammar
from service.runtime.search import Candidates, SearchRequest, host_search
from service.runtime.tensors import EncoderOutput, StepOutput, Tensors
from service.runtime.tokenizer import SPECIAL_TOKENS

_ENGINES: dict[str, type[TorchEngine]] = {}  # kind name -> the reference engine of that kind


def _engine_of(kind: type[ModelKind]):
    """Class decorator: registers the engine class as the reference engine of `kind`."""

    def register(engine: type[TorchEngine]) -> type[TorchEngine]:
        _ENGINES[kind.name] = engine
        return engine

    return register


@_engine_of(TranslatorKind)
class TorchEngine:
    """Encoder and decode step of a Transformer, in eval mode, without gradients."""

    def __init__(
        self,
        model: Transformer | Captioner,
        device: str = "cpu",
        device_search: bool = False,
        grammar: Grammar | None = None,
    ):
        """`device_search`: log-softmax and top-k by torch where the logits are (a fair
        baseline on a GPU; equal values may come in another order than `host_search`'s, so
        the reference for parity keeps it off). `grammar`: the output grammar the model's
        version ships (service.runtime.grammar), enforced as the served engines do."""
        self.model = model.to(device).eval()
        self.device = torch.device(device)
        self.device_search = device_search
        self.config = model.config
        kind = model_kind(model)
        self.kind = kind.name
        self.interface = kind.interface(model.config)
        self.special_tokens = SPECIAL_TOKENS
        self.grammar = grammar
        self.memory_names = self.interface.memory_tensors
        self.state_names = [s.input for s in self.interface.states]
        # the past concatenated every step; an LSTM's state is no cache
        growing = any(s.time_axis is not None for s in self.interface.states)
        self.cache = "growing" if growing else "none"

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.require(array, requirements=["C", "W"])).to(self.device)

    def _pairs(self, tensors: Tensors, names) -> list[tuple[torch.Tensor, torch.Tensor]]:
        flat = [tensors[n] for n in names]
        return list(zip(flat[::2], flat[1::2], strict=True))

    def _named(self, pairs, names) -> Tensors:
        return dict(zip(names, [t for pair in pairs for t in pair], strict=True))

    @staticmethod
    def _attention(attention: torch.Tensor, wanted: bool) -> np.ndarray | None:
        return attention.float().cpu().numpy() if wanted else None

    def host(self, logits: torch.Tensor) -> np.ndarray:
        return logits.float().cpu().numpy()

    rows = "device"  # torch tensors, moved by the engine's own operations
    static_step = None  # no static step: onnxruntime's

    @torch.inference_mode()
    def search(self, logits: torch.Tensor, request: SearchRequest) -> Candidates:
        if not self.device_search:
            return host_search(self.host(logits), request)
        logits = logits.float()
        if request.banned:
            logits = logits.index_fill(1, self._tensor(np.array(request.banned)), -torch.inf)
        log_probs = torch.log_softmax(logits, dim=-1)
        k = min(request.k or logits.shape[1], logits.shape[1])
        if request.temperature is None:
            values, ids = log_probs.topk(k, dim=-1)
            return Candidates(ids.cpu().numpy(), values.cpu().numpy())
        temperature = self._tensor(np.asarray(request.temperature, np.float32))[:, None]
        scores, ids = torch.log_softmax(log_probs / temperature, dim=-1).topk(k, dim=-1)
        chosen = log_probs.gather(1, ids)
        return Candidates(ids.cpu().numpy(), chosen.cpu().numpy(), scores.cpu().numpy())

    @torch.inference_mode()
    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> EncoderOutput:
        """src_ids, src_mask (B, S) int64."""
        _, cross = self.model.encode(self._tensor(src_ids), self._tensor(src_mask))
        return EncoderOutput(self._named(cross, self.memory_names), np.asarray(src_mask))

    def initial_state(self, encoder: EncoderOutput, batch: int) -> Tensors:
        return self._named(self.model.empty_cache(batch), self.state_names)

    @torch.inference_mode()
    def step(
        self,
        input_ids,
        positions,
        self_mask,
        state: Tensors,
        encoder: EncoderOutput,
        attention: bool = True,
        search=None,
    ):
        logits, present, cross = self.model.decode_step(
            self._tensor(input_ids),
            self._tensor(positions),
            self._tensor(self_mask),
            self._pairs(state, self.state_names),
            self._pairs(encoder.memory, self.memory_names),
            self._tensor(encoder.memory_mask),
        )
        state = self._named(present, self.state_names)
        return StepOutput(logits, state, self._attention(cross, attention))

    def take(self, tensor, index: np.ndarray):
        if isinstance(tensor, np.ndarray):
            return np.take(tensor, index, axis=0)
        return tensor.index_select(0, self._tensor(np.asarray(index, dtype=np.int64)))

    def join(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Rows of `a` then `b`, every other axis right-padded with zeros to the longer."""
        if isinstance(a, np.ndarray):
            from service.runtime.batching import concat_padded

            return concat_padded([a, b])
        shape = [max(x, y) for x, y in zip(a.shape[1:], b.shape[1:], strict=True)]

        def padded(t: torch.Tensor) -> torch.Tensor:
            pads = [
                p for size, full in zip(t.shape[1:], shape, strict=True) for p in (full - size, 0)
            ][::-1]
            return F.pad(t, pads) if any(pads) else t

        return torch.cat([padded(a), padded(b)])

    def narrow(self, tensor, axis: int, start: int, end: int):
        if isinstance(tensor, np.ndarray):
            index = [slice(None)] * tensor.ndim
            index[axis] = slice(start, end)
            return np.ascontiguousarray(tensor[tuple(index)])
        return tensor.narrow(axis, start, end - start).contiguous()


@_engine_of(CaptionerKind)
class CaptionTorchEngine(TorchEngine):
    """Encoder and decode step of a Captioner: the grid and its projection are the memory,
    (h, c) the state the encoder starts; positions and the self mask mean nothing to an
    LSTM."""

    @torch.inference_mode()
    def encode(self, pixels: np.ndarray) -> EncoderOutput:
        """pixels (B, 3, H, W) float32 in [0, 1]."""
        grid, projection, mask, (h, c) = self.model.encode(self._tensor(pixels))
        memory = dict(zip(self.memory_names, (grid, projection), strict=True))
        init = dict(zip(self.state_names, (h, c), strict=True))
        return EncoderOutput(memory, mask.cpu().numpy(), init)

    def initial_state(self, encoder: EncoderOutput, batch: int) -> Tensors:
        return dict(encoder.init)

    @torch.inference_mode()
    def step(
        self,
        input_ids,
        positions,
        self_mask,
        state: Tensors,
        encoder: EncoderOutput,
        attention: bool = True,
        search=None,
    ):
        if input_ids.shape[1] != 1:
            raise ValueError(f"the captioner steps one token at a time, got {input_ids.shape}")
        grid, projection = (encoder.memory[n] for n in self.memory_names)
        logits, (h, c), weights = self.model.decode_step(
            self._tensor(input_ids),
            tuple(state[n] for n in self.state_names),
            grid,
            projection,
            self._tensor(encoder.memory_mask),
        )
        state = dict(zip(self.state_names, (h, c), strict=True))
        return StepOutput(logits, state, self._attention(weights, attention))


def reference_engine(
    model, device: str = "cpu", device_search: bool = False, grammar: Grammar | None = None
) -> TorchEngine:
    """The PyTorch engine registered for the kind of `model` (`grammar`: its version's output
    grammar)."""
    return _ENGINES[model_kind(model).name](model, device, device_search, grammar)
