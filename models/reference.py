"""The PyTorch reference engine: the Transformer behind the runtime's `Engine` interface.

It runs the very decoding strategies the server runs (service.decoding), so a PyTorch decode
and an onnxruntime decode differ only in the engine.
"""

from __future__ import annotations

import numpy as np
import torch

from models.captioner import Captioner
from models.transformer import Transformer
from service.inference import EncoderOutput, KeyValues


class TorchEngine:
    """Encoder and decode step of a Transformer, in eval mode, without gradients."""

    kind = "transformer"

    def __init__(self, model: Transformer | Captioner, device: str = "cpu"):
        self.model = model.to(device).eval()
        self.device = torch.device(device)
        self.config = model.config

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.require(array, requirements=["C", "W"])).to(self.device)

    @torch.inference_mode()
    def encode(self, src_ids: np.ndarray, src_mask: np.ndarray) -> EncoderOutput:
        """src_ids, src_mask (B, S) int64."""
        mask = self._tensor(src_mask)
        _, cross = self.model.encode(self._tensor(src_ids), mask)
        return EncoderOutput(cross=cross, memory_mask=mask)

    def empty_past(self, batch: int) -> KeyValues:
        return self.model.empty_cache(batch)

    def initial_state(self, encoder: EncoderOutput, batch: int) -> KeyValues:
        return self.empty_past(batch)

    @torch.inference_mode()
    def step(self, input_ids, positions, self_mask, past, encoder: EncoderOutput):
        logits, present, cross = self.model.decode_step(
            self._tensor(input_ids),
            self._tensor(positions),
            self._tensor(self_mask),
            past,
            encoder.cross,
            encoder.memory_mask,
        )
        return logits.float().cpu().numpy(), present, cross.float().cpu().numpy()

    def take(self, tensor: torch.Tensor, index: np.ndarray) -> torch.Tensor:
        return tensor.index_select(0, self._tensor(np.asarray(index, dtype=np.int64)))


class CaptionTorchEngine(TorchEngine):
    """Encoder and decode step of a Captioner: the grid and its projection are the memory,
    (h, c) the state; positions and the self mask mean nothing to an LSTM."""

    kind = "captioner"

    @torch.inference_mode()
    def encode(self, pixels: np.ndarray) -> EncoderOutput:
        """pixels (B, 3, H, W) float32 in [0, 1]."""
        grid, projection, mask, state = self.model.encode(self._tensor(pixels))
        return EncoderOutput(cross=[(grid, projection)], memory_mask=mask, state=[state])

    def initial_state(self, encoder: EncoderOutput, batch: int) -> KeyValues:
        return list(encoder.state)

    @torch.inference_mode()
    def step(self, input_ids, positions, self_mask, past, encoder: EncoderOutput):
        if input_ids.shape[1] != 1:
            raise ValueError(f"the captioner steps one token at a time, got {input_ids.shape}")
        ((grid, projection),) = encoder.cross
        logits, state, attention = self.model.decode_step(
            self._tensor(input_ids), past[0], grid, projection, encoder.memory_mask
        )
        return logits.float().cpu().numpy(), [state], attention.float().cpu().numpy()


def reference_engine(model, device: str = "cpu") -> TorchEngine:
    """The PyTorch engine of a Transformer or a Captioner."""
    return (
        CaptionTorchEngine(model, device)
        if isinstance(model, Captioner)
        else TorchEngine(model, device)
    )
