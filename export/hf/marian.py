"""Marian (OPUS-MT) as the runtime's two graphs: the encoder returns the memory mask and every
decoder layer's cross keys and values once; the step reads new tokens at explicit positions,
the past keys and values of every layer as explicit state, and returns the last token's
logits, the present keys and values, and the last layer's cross attention averaged over
heads (the alignment). The weights are `transformers`' own modules, used as they compute:
post-norm layers, sinusoidal positions looked up by position, logits plus the final bias."""

from __future__ import annotations

import math

import torch
from torch import nn


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(batch, time, d_model) -> (batch, heads, time, head_dim)"""
    batch, time, width = x.shape
    return x.view(batch, time, heads, width // heads).transpose(1, 2)


def _join_heads(x: torch.Tensor) -> torch.Tensor:
    batch, heads, time, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, time, heads * head_dim)


class MarianEncoder(nn.Module):
    """(src_ids, src_mask) -> (memory_mask, encoder.{i}.key, encoder.{i}.value for each
    decoder layer)."""

    def __init__(self, model):
        super().__init__()
        self.encoder = model.model.encoder
        self.layers = model.model.decoder.layers
        self.heads = model.config.decoder_attention_heads

    def forward(self, src_ids: torch.Tensor, src_mask: torch.Tensor):
        memory = self.encoder(input_ids=src_ids, attention_mask=src_mask).last_hidden_state
        cross = []
        for layer in self.layers:
            attention = layer.encoder_attn
            cross += [_heads(attention.k_proj(memory), self.heads)]
            cross += [_heads(attention.v_proj(memory), self.heads)]
        return (src_mask, *cross)


class MarianStep(nn.Module):
    """(input_ids, positions, self_mask, past K/V of each layer, encoder K/V of each layer,
    memory_mask) -> (logits of the last new token, present K/V, cross attention)."""

    def __init__(self, model):
        super().__init__()
        config = model.config
        decoder = model.model.decoder
        self.embed_tokens = decoder.embed_tokens
        self.positions = decoder.embed_positions
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.layers = decoder.layers
        self.heads = config.decoder_attention_heads
        self.lm_head = model.lm_head
        self.register_buffer("final_logits_bias", model.final_logits_bias.clone())

    def forward(self, input_ids, positions, self_mask, *tensors):
        count = len(self.layers)
        past, encoder, memory_mask = (
            tensors[: 2 * count],
            tensors[2 * count : 4 * count],
            tensors[-1],
        )
        h = self.embed_tokens(input_ids) * self.scale + self.positions.weight[positions]
        new = input_ids.shape[1]
        total = self_mask.shape[1]
        # a new token sees every past position the row has and the new ones up to itself
        causal = torch.ones(new, new, dtype=torch.bool, device=h.device).tril()
        seen = torch.cat(
            [torch.ones(new, total - new, dtype=torch.bool, device=h.device), causal], dim=1
        )
        self_allowed = seen[None, None] & (self_mask[:, None, None, :] > 0)
        cross_allowed = memory_mask[:, None, None, :] > 0
        present, cross_attention = [], None
        for i, layer in enumerate(self.layers):
            attention = layer.self_attn
            q = _heads(attention.q_proj(h), self.heads) * attention.scaling
            k = torch.cat([past[2 * i], _heads(attention.k_proj(h), self.heads)], dim=2)
            v = torch.cat([past[2 * i + 1], _heads(attention.v_proj(h), self.heads)], dim=2)
            present += [k, v]
            scores = (q @ k.transpose(-1, -2)).masked_fill(~self_allowed, float("-inf"))
            h = layer.self_attn_layer_norm(
                h + attention.out_proj(_join_heads(scores.softmax(-1) @ v))
            )
            attention = layer.encoder_attn
            q = _heads(attention.q_proj(h), self.heads) * attention.scaling
            scores = (q @ encoder[2 * i].transpose(-1, -2)).masked_fill(
                ~cross_allowed, float("-inf")
            )
            probs = scores.softmax(-1)
            h = layer.encoder_attn_layer_norm(
                h + attention.out_proj(_join_heads(probs @ encoder[2 * i + 1]))
            )
            cross_attention = probs
            h = layer.final_layer_norm(h + layer.fc2(layer.activation_fn(layer.fc1(h))))
        logits = self.lm_head(h[:, -1]) + self.final_logits_bias
        return (logits, *present, cross_attention[:, :, -1].mean(dim=1))


@torch.no_grad()
def greedy(
    model, src_ids: torch.Tensor, src_mask: torch.Tensor, max_length: int
) -> list[list[int]]:
    """Greedy decodes through the two graphs' modules, a step a token with the cache carried
    as state, each row ended at `</s>`: what the runtime's engine computes, in PyTorch."""
    config = model.config
    encoder, step = MarianEncoder(model).eval(), MarianStep(model).eval()
    memory_mask, *cross = encoder(src_ids, src_mask)
    batch, heads = src_ids.shape[0], config.decoder_attention_heads
    head_dim = config.d_model // heads
    past = [torch.zeros(batch, heads, 0, head_dim) for _ in range(2 * config.decoder_layers)]
    tokens = torch.full((batch, 1), config.decoder_start_token_id, dtype=torch.long)
    out: list[list[int]] = [[] for _ in range(batch)]
    done = torch.zeros(batch, dtype=torch.bool)
    for position in range(max_length):
        self_mask = torch.ones(batch, position + 1, dtype=torch.long)
        positions = torch.full((batch, 1), position, dtype=torch.long)
        logits, *state = step(tokens, positions, self_mask, *past, *cross, memory_mask)
        past = state[:-1]
        logits[:, config.pad_token_id] = float("-inf")  # generate never writes the pad
        tokens = logits.argmax(-1, keepdim=True)
        for row in range(batch):
            if not done[row]:
                out[row].append(int(tokens[row]))
        done |= tokens[:, 0] == config.eos_token_id
        if bool(done.all()):
            break
    return out
