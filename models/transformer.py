"""The Transformer encoder-decoder, with its cache as explicit inputs and outputs.

`encode` runs once per request; `decode_step` runs once per generated token and takes and
returns every key/value it needs, so the same function is what the ONNX decoder graph holds.
Shapes: B batch, S source length, P past length, N new tokens, H heads, Dh head width.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from models.config import TransformerConfig

KeyValue = tuple[Tensor, Tensor]  # (key, value), each (B, H, length, Dh)


def sinusoids(positions: Tensor, dim: int, offset: int) -> Tensor:
    """(..., ) int positions -> (..., dim) encodings; [sin | cos] halves, CTranslate2's layout."""
    half = dim // 2
    step = math.log(10000.0) / (half - 1)
    inv_timescales = torch.exp(torch.arange(half, device=positions.device) * -step)  # (half,)
    scaled = (positions + offset).to(torch.float32).unsqueeze(-1) * inv_timescales  # (..., half)
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=-1)


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over H heads; keys and values may come from a cache."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.n_heads, self.head_dim = config.n_heads, config.head_dim
        self.query = nn.Linear(config.d_model, config.d_model)
        self.key = nn.Linear(config.d_model, config.d_model)
        self.value = nn.Linear(config.d_model, config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)
        self.dropout = nn.Dropout(config.dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)  # (B,H,L,Dh)

    def project_kv(self, x: Tensor) -> KeyValue:
        """(B, L, D) -> keys and values, each (B, H, L, Dh)."""
        return self.split_heads(self.key(x)), self.split_heads(self.value(x))

    def forward(self, x: Tensor, kv: KeyValue, allowed: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, L, D) attends over kv; allowed (B, 1|H, L, K) bool.

        Returns the output (B, L, D) and the attention weights (B, H, L, K).
        """
        q = self.split_heads(self.query(x))  # (B, H, L, Dh)
        key, value = kv
        scores = q @ key.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, H, L, K)
        # A finite minimum, not -inf: a fully masked row (padding) then gives uniform weights
        # rather than NaN, and stays finite in fp16.
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1)
        context = self.dropout(weights) @ value  # (B, H, L, Dh)
        batch, _, length, _ = context.shape
        context = context.transpose(1, 2).reshape(batch, length, -1)  # (B, L, D)
        return self.out(context), weights


class FeedForward(nn.Sequential):
    def __init__(self, config: TransformerConfig):
        super().__init__(
            nn.Linear(config.d_model, config.d_ff),
            nn.ReLU(),
            nn.Dropout(config.dropout),
            nn.Linear(config.d_ff, config.d_model),
        )


class EncoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attn_norm = nn.LayerNorm(config.d_model)
        self.self_attn = MultiHeadAttention(config)
        self.ff_norm = nn.LayerNorm(config.d_model)
        self.ff = FeedForward(config)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, allowed: Tensor) -> Tensor:
        h = self.self_attn_norm(x)
        x = x + self.dropout(self.self_attn(h, self.self_attn.project_kv(h), allowed)[0])
        return x + self.dropout(self.ff(self.ff_norm(x)))


class DecoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attn_norm = nn.LayerNorm(config.d_model)
        self.self_attn = MultiHeadAttention(config)
        self.cross_attn_norm = nn.LayerNorm(config.d_model)
        self.cross_attn = MultiHeadAttention(config)
        self.ff_norm = nn.LayerNorm(config.d_model)
        self.ff = FeedForward(config)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        past: KeyValue,
        cross: KeyValue,
        self_allowed: Tensor,
        cross_allowed: Tensor,
    ) -> tuple[Tensor, KeyValue, Tensor]:
        """x (B, N, D) -> x, present (past + new keys/values), cross weights (B, H, N, S)."""
        h = self.self_attn_norm(x)
        new_key, new_value = self.self_attn.project_kv(h)
        present = (torch.cat([past[0], new_key], dim=2), torch.cat([past[1], new_value], dim=2))
        x = x + self.dropout(self.self_attn(h, present, self_allowed)[0])
        attended, cross_weights = self.cross_attn(self.cross_attn_norm(x), cross, cross_allowed)
        x = x + self.dropout(attended)
        x = x + self.dropout(self.ff(self.ff_norm(x)))
        return x, present, cross_weights


class Transformer(nn.Module):
    """Encoder-decoder with a shared embedding and a tied output projection (by default)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        self.source_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.target_embedding = (
            self.source_embedding
            if config.share_embeddings
            else nn.Embedding(config.vocab_size, config.d_model)
        )
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(config) for _ in range(config.encoder_layers)
        )
        self.encoder_norm = nn.LayerNorm(config.d_model)
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(config) for _ in range(config.decoder_layers)
        )
        self.decoder_norm = nn.LayerNorm(config.d_model)
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_output:
            self.output.weight = self.target_embedding.weight
        self.dropout = nn.Dropout(config.dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for name, parameter in self.named_parameters():
            if parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)
            elif name.endswith("bias"):
                nn.init.zeros_(parameter)
        nn.init.normal_(self.source_embedding.weight, std=self.config.d_model**-0.5)
        nn.init.normal_(self.target_embedding.weight, std=self.config.d_model**-0.5)

    def embed(self, embedding: nn.Embedding, ids: Tensor, positions: Tensor) -> Tensor:
        """ids, positions (B, L) -> (B, L, D): scaled token embedding plus sinusoid."""
        d = self.config.d_model
        x = embedding(ids) * math.sqrt(d)
        x = x + sinusoids(positions, d, self.config.position_offset).to(x.dtype)
        return self.dropout(x)

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> tuple[Tensor, list[KeyValue]]:
        """src_ids (B, S) int64, src_mask (B, S) 1 for real tokens.

        Returns the memory (B, S, D) and every decoder layer's cross keys and values.
        """
        positions = torch.arange(src_ids.shape[1], device=src_ids.device).expand_as(src_ids)
        x = self.embed(self.source_embedding, src_ids, positions)
        allowed = src_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
        for layer in self.encoder_layers:
            x = layer(x, allowed)
        memory = self.encoder_norm(x)
        cross = [layer.cross_attn.project_kv(memory) for layer in self.decoder_layers]
        return memory, cross

    def decode(
        self,
        input_ids: Tensor,
        positions: Tensor,
        self_mask: Tensor,
        past: list[KeyValue],
        cross: list[KeyValue],
        memory_mask: Tensor,
    ) -> tuple[Tensor, list[KeyValue], Tensor]:
        """Decoder states of every new position.

        input_ids, positions (B, N); self_mask (B, P + N) 1 for real positions; past P may be 0.
        Returns hidden states (B, N, D), present keys/values (B, H, P + N, Dh) per layer, and
        the configured layer's cross-attention averaged over heads (B, N, S).
        """
        x = self.embed(self.target_embedding, input_ids, positions)
        new = input_ids.shape[1]
        total = self_mask.shape[1]
        # New token j sits at column P + j and may see columns 0 .. P + j that are real.
        columns = torch.arange(total, device=x.device)  # (P + N,)
        rows = torch.arange(new, device=x.device) + (total - new)  # (N,)
        causal = columns[None, :] <= rows[:, None]  # (N, P + N)
        self_allowed = causal[None, None] & self_mask.bool()[:, None, None, :]  # (B, 1, N, P+N)
        cross_allowed = memory_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
        presents, chosen = [], self.config.cross_attention_layer % len(self.decoder_layers)
        for i, layer in enumerate(self.decoder_layers):
            x, present, weights = layer(x, past[i], cross[i], self_allowed, cross_allowed)
            presents.append(present)
            if i == chosen:
                cross_attention = weights.mean(dim=1)  # (B, N, S)
        return self.decoder_norm(x), presents, cross_attention

    def decode_step(
        self,
        input_ids: Tensor,
        positions: Tensor,
        self_mask: Tensor,
        past: list[KeyValue],
        cross: list[KeyValue],
        memory_mask: Tensor,
    ) -> tuple[Tensor, list[KeyValue], Tensor]:
        """One decoding step: logits (B, V) and cross-attention (B, S) of the last new position,
        and the present keys/values (B, H, P + N, Dh) per layer."""
        hidden, presents, cross_attention = self.decode(
            input_ids, positions, self_mask, past, cross, memory_mask
        )
        return self.output(hidden[:, -1]), presents, cross_attention[:, -1]

    def empty_cache(self, batch: int) -> list[KeyValue]:
        """Past keys/values of length 0, for the first step."""
        c = self.config
        empty = self.output.weight.new_zeros(batch, c.n_heads, 0, c.head_dim)
        return [(empty, empty) for _ in range(c.decoder_layers)]

    def forward(
        self, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor, tgt_mask: Tensor
    ) -> Tensor:
        """Teacher-forced training pass: logits (B, T, V) for every target position."""
        _, cross = self.encode(src_ids, src_mask)
        positions = torch.arange(tgt_in.shape[1], device=tgt_in.device).expand_as(tgt_in)
        past = self.empty_cache(tgt_in.shape[0])
        hidden, _, _ = self.decode(tgt_in, positions, tgt_mask, past, cross, src_mask)
        return self.output(hidden)
