"""mBART-50 as the runtime's two graphs, as export.hf.m2m100 does for M2M100: pre-norm layers
with a final layer norm, embeddings scaled inside their module, learned positions two rows
on (the table's first two rows are never read), a layer norm over the embeddings, and the
final logits bias. Like M2M100, the source starts with its language's token and the target
language is the decoder's first token after `</s>`, forced as `generate` does."""

from __future__ import annotations

import torch
from torch import nn

from export.hf.layers import run_step


def position_table(table) -> torch.Tensor:
    """mBART's learned positions from position 0: two rows on (the first two never read)."""
    return table.weight[table.offset :]


class MBartStep(nn.Module):
    """(input_ids, positions, self_mask, past K/V, encoder K/V, memory_mask) -> (logits of the
    last new token, present K/V, cross attention)."""

    def __init__(self, model):
        super().__init__()
        config = model.config
        decoder = model.model.decoder
        self.embed_tokens = decoder.embed_tokens  # scales by sqrt(d_model) itself
        table = decoder.embed_positions
        self.register_buffer("position_table", position_table(table).detach().clone())
        self.layernorm_embedding = decoder.layernorm_embedding
        self.layers = decoder.layers
        self.layer_norm = decoder.layer_norm
        self.heads = config.decoder_attention_heads
        self.lm_head = model.lm_head
        self.register_buffer("final_logits_bias", model.final_logits_bias.clone())

    def forward(self, input_ids, positions, self_mask, *tensors):
        h = self.embed_tokens(input_ids) + self.position_table[positions]
        h = self.layernorm_embedding(h)
        h, present, attention = run_step(self.layers, h, self_mask, tensors, self.heads, True)
        logits = self.lm_head(self.layer_norm(h[:, -1])) + self.final_logits_bias
        return (logits, *present, attention)
