"""The attention captioner of "Show, Attend and Tell" (Xu et al. 2015), soft attention.

`encode` turns an image into a grid of feature vectors (the memory), their attention
projection (computed once per image, not once per step) and the LSTM's initial state from the
mean feature. `decode_step` takes the previous token and the state (h, c) and returns the
logits, the new state and the attention weights over the grid: the state is explicit input
and output, so the same function is what the ONNX decoder-step graph holds.
Shapes: B batch, L = grid * grid locations, D feature width, A attention width, Hd LSTM width.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from models.config import CaptionerConfig

State = tuple[Tensor, Tensor]  # (h, c), each (B, Hd)


class GridEncoder(nn.Module):
    """A CNN trained from scratch: each stage halves the side (a stride-2 convolution; stride
    1 keeps it, for a finer grid) and refines (a 3x3 convolution), with batch norm and ReLU."""

    def __init__(self, config: CaptionerConfig):
        super().__init__()
        layers, width = [], 3
        for channels, stride in zip(config.channels, config.strides, strict=True):
            layers += [
                nn.Conv2d(width, channels, 3, stride=stride, padding=1, bias=False),
                nn.BatchNorm2d(channels),
                nn.ReLU(inplace=True),
                nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                nn.BatchNorm2d(channels),
                nn.ReLU(inplace=True),
            ]
            width = channels
        self.layers = nn.Sequential(*layers)
        # where each location is: the captions say where things are
        self.position = nn.Parameter(torch.zeros(config.grid * config.grid, width))
        self.register_buffer("mean", torch.tensor(config.pixel_mean).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(config.pixel_std).view(1, 3, 1, 1))

    def forward(self, pixels: Tensor) -> Tensor:
        """pixels (B, 3, H, W) in [0, 1] -> grid features (B, L, D)."""
        x = self.layers((pixels - self.mean) / self.std)  # (B, D, G, G)
        return x.flatten(2).transpose(1, 2) + self.position  # (B, L, D)


class Captioner(nn.Module):
    def __init__(self, config: CaptionerConfig):
        super().__init__()
        self.config = config
        d, a, h, e = config.feature_dim, config.attention_dim, config.hidden_dim, config.embed_dim
        self.encoder = GridEncoder(config)
        self.init_h, self.init_c = nn.Linear(d, h), nn.Linear(d, h)
        self.grid_attention = nn.Linear(d, a)  # U a_i, once per image
        self.state_attention = nn.Linear(h, a)  # W h, once per step
        self.attention_score = nn.Linear(a, 1)  # w^T tanh(U a_i + W h)
        self.gate = nn.Linear(h, 1)  # beta = sigmoid(f_beta(h))
        self.embedding = nn.Embedding(config.vocab_size, e)
        self.lstm = nn.LSTMCell(e + d, h)
        # deep output: logits = L_o(E y + L_h h + L_z z)
        self.output_state, self.output_context = nn.Linear(h, e), nn.Linear(d, e)
        self.output = nn.Linear(e, config.vocab_size)
        self.dropout = nn.Dropout(config.dropout)

    def encode(self, pixels: Tensor) -> tuple[Tensor, Tensor, Tensor, State]:
        """pixels (B, 3, H, W) in [0, 1] -> grid (B, L, D), its projection (B, L, A), memory
        mask (B, L) int64 (all ones: every location is real) and the initial state (h, c)."""
        grid = self.encoder(pixels)
        mean = grid.mean(dim=1)  # (B, D)
        state = (torch.tanh(self.init_h(mean)), torch.tanh(self.init_c(mean)))
        mask = torch.ones(grid.shape[:2], dtype=torch.long, device=grid.device)
        return grid, self.grid_attention(grid), mask, state

    def attend(self, h: Tensor, grid: Tensor, projection: Tensor, mask: Tensor):
        """Soft attention of state h (B, Hd) -> gated context (B, D), weights (B, L)."""
        scores = self.attention_score(
            torch.tanh(projection + self.state_attention(h)[:, None])
        ).squeeze(-1)  # (B, L)
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1)
        context = (weights[:, :, None] * grid).sum(dim=1)  # (B, D)
        return torch.sigmoid(self.gate(h)) * context, weights

    def decode_step(
        self, input_ids: Tensor, state: State, grid: Tensor, projection: Tensor, mask: Tensor
    ) -> tuple[Tensor, State, Tensor]:
        """input_ids (B,) or (B, 1) previous tokens -> logits (B, V), state (h, c), attention
        (B, L). The attention is what produced this step's word: it is read from the state
        before the step, as in the paper."""
        h, c = state
        embedded = self.embedding(input_ids.reshape(-1))  # (B, E)
        context, weights = self.attend(h, grid, projection, mask)
        h, c = self.lstm(torch.cat([embedded, context], dim=-1), (h, c))
        deep = embedded + self.output_state(h) + self.output_context(context)
        return self.output(self.dropout(deep)), (h, c), weights

    def forward(self, pixels: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing: tgt_in (B, T) -> logits (B, T, V) and attention (B, T, L)."""
        return self.teacher_forced(self.encode(pixels), tgt_in)

    def teacher_forced(self, encoded, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """`encode`'s output and tgt_in (B, T) -> logits (B, T, V), attention (B, T, L)."""
        grid, projection, mask, state = encoded
        logits, attention = [], []
        for t in range(tgt_in.shape[1]):
            step_logits, state, weights = self.decode_step(
                tgt_in[:, t], state, grid, projection, mask
            )
            logits.append(step_logits)
            attention.append(weights)
        return torch.stack(logits, dim=1), torch.stack(attention, dim=1)


def attention_penalty(attention: Tensor, tgt_mask: Tensor) -> Tensor:
    """The doubly stochastic regularisation: (1 - sum over real steps of the attention)^2,
    averaged over locations and the batch. attention (B, T, L), tgt_mask (B, T).

    The paper sums over locations beside a caption-summed cross-entropy; beside the per-token
    cross-entropy used here, a sum (over 36 locations of a 6 x 6 grid) outweighed it about
    fifteen times and held attention uniform, so the penalty is a mean, as the cross-entropy
    is."""
    total = (attention * tgt_mask[:, :, None]).sum(dim=1)  # (B, L)
    return ((1.0 - total) ** 2).mean()
