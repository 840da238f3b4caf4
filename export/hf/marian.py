"""Marian (OPUS-MT) as the runtime's two graphs: the encoder returns the memory mask and every
decoder layer's cross keys and values once; the step reads new tokens at explicit positions,
the past keys and values of every layer as explicit state, and returns the last token's
logits, the present keys and values, and the last layer's cross attention averaged over
heads (the alignment). The weights are `transformers`' own modules, used as they compute:
post-norm layers, sinusoidal positions looked up by position, logits plus the final bias."""

from __future__ import annotations

import math

from torch import nn

from export.hf.layers import run_step


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
        h = self.embed_tokens(input_ids) * self.scale + self.positions.weight[positions]
        h, present, attention = run_step(self.layers, h, self_mask, tensors, self.heads, False)
        logits = self.lm_head(h[:, -1]) + self.final_logits_bias
        return (logits, *present, attention)
