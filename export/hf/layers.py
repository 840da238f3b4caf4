"""What the Hugging Face encoder-decoder models share as the runtime's graphs: heads split
and joined, the masks of a step, and one decoder layer run over explicit keys and values
(BART's family: Marian post-norm, M2M100 and NLLB pre-norm)."""

from __future__ import annotations

import torch
from torch import nn


class Encoder(nn.Module):
    """(src_ids, src_mask) -> (memory_mask, every decoder layer's cross keys and values): the
    model's own encoder, then each layer's projections of its output, once."""

    def __init__(self, model):
        super().__init__()
        self.encoder = model.model.encoder
        self.layers = model.model.decoder.layers
        self.heads = model.config.decoder_attention_heads

    def forward(self, src_ids: torch.Tensor, src_mask: torch.Tensor):
        memory = self.encoder(input_ids=src_ids, attention_mask=src_mask).last_hidden_state
        return (src_mask, *cross_keys(self.layers, memory, self.heads))


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(batch, time, d_model) -> (batch, heads, time, head_dim)"""
    batch, time, width = x.shape
    return x.view(batch, time, heads, width // heads).transpose(1, 2)


def join_heads(x: torch.Tensor) -> torch.Tensor:
    batch, heads, time, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, time, heads * head_dim)


def cross_keys(layers, memory: torch.Tensor, heads: int) -> list[torch.Tensor]:
    """Every layer's cross-attention keys and values of the encoder's output, once."""
    tensors = []
    for layer in layers:
        attention = layer.encoder_attn
        tensors += [split_heads(attention.k_proj(memory), heads)]
        tensors += [split_heads(attention.v_proj(memory), heads)]
    return tensors


def step_masks(self_mask, memory_mask, new: int):
    """(what each new token may see of the past and new positions, of the memory)."""
    total = self_mask.shape[1]
    causal = torch.ones(new, new, dtype=torch.bool, device=self_mask.device).tril()
    seen = torch.cat(
        [torch.ones(new, total - new, dtype=torch.bool, device=self_mask.device), causal], dim=1
    )
    return seen[None, None] & (self_mask[:, None, None, :] > 0), memory_mask[:, None, None, :] > 0


def _attend(attention, h, keys, values, allowed, heads):
    q = split_heads(attention.q_proj(h), heads) * attention.scaling
    scores = (q @ keys.transpose(-1, -2)).masked_fill(~allowed, float("-inf"))
    probs = scores.softmax(-1)
    return attention.out_proj(join_heads(probs @ values)), probs


def decoder_layer(layer, h, past_k, past_v, cross_k, cross_v, masks, heads, pre_norm: bool):
    """One layer over new positions: (its output, present key, present value, cross
    attention probabilities)."""
    self_allowed, cross_allowed = masks
    x = layer.self_attn_layer_norm(h) if pre_norm else h
    attention = layer.self_attn
    k = torch.cat([past_k, split_heads(attention.k_proj(x), heads)], dim=2)
    v = torch.cat([past_v, split_heads(attention.v_proj(x), heads)], dim=2)
    out, _ = _attend(attention, x, k, v, self_allowed, heads)
    h = h + out if pre_norm else layer.self_attn_layer_norm(h + out)
    x = layer.encoder_attn_layer_norm(h) if pre_norm else h
    out, probs = _attend(layer.encoder_attn, x, cross_k, cross_v, cross_allowed, heads)
    h = h + out if pre_norm else layer.encoder_attn_layer_norm(h + out)
    x = layer.final_layer_norm(h) if pre_norm else h
    out = layer.fc2(layer.activation_fn(layer.fc1(x)))
    h = h + out if pre_norm else layer.final_layer_norm(h + out)
    return h, k, v, probs


def run_layers(layers, h, past, encoder, masks, heads, pre_norm):
    """Every layer: (the output, the present keys and values, the last layer's cross
    attention of the last new token averaged over heads)."""
    present, probs = [], None
    for i, layer in enumerate(layers):
        h, k, v, probs = decoder_layer(
            layer, h, past[2 * i], past[2 * i + 1], encoder[2 * i], encoder[2 * i + 1],
            masks, heads, pre_norm,
        )  # fmt: skip
        present += [k, v]
    return h, present, probs[:, :, -1].mean(dim=1)


def run_step(layers, h, self_mask, tensors, heads: int, pre_norm: bool):
    """A step's layers over the embedded new tokens `h`, `tensors` its inputs after the self
    mask (past K/V of each layer, encoder K/V of each layer, memory_mask): (the last
    layer's output, the present keys and values, the cross attention)."""
    count = len(layers)
    past, encoder, memory_mask = tensors[: 2 * count], tensors[2 * count : -1], tensors[-1]
    masks = step_masks(self_mask, memory_mask, h.shape[1])
    return run_layers(layers, h, past, encoder, masks, heads, pre_norm)


@torch.no_grad()
def greedy_decode(encoder, step, config, src_ids, src_mask, max_length, first=()):
    """Greedy decodes through the two graphs' modules, a token a step with the cache carried
    as state, each row ended at `</s>`, after the forced tokens `first`: what the runtime's
    engine computes, in PyTorch."""
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
        if position < len(first):
            tokens[:] = first[position]
        for row in range(batch):
            if not done[row]:
                out[row].append(int(tokens[row]))
        done |= tokens[:, 0] == config.eos_token_id
        if bool(done.all()):
            break
    return out
