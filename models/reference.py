"""The PyTorch reference engine: the Transformer behind the runtime's `Engine` interface.

It runs the very decoding strategies the server runs (service.decoding), so a PyTorch decode
and an onnxruntime decode differ only in the engine.
"""

from __future__ import annotations

import numpy as np
import torch

from models.transformer import Transformer
from service.inference import EncoderOutput, KeyValues


class TorchEngine:
    """Encoder and decode step of a Transformer, in eval mode, without gradients."""

    def __init__(self, model: Transformer, device: str = "cpu"):
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
