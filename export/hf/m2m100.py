"""M2M100 and NLLB as the runtime's two graphs, as export.hf.marian does for Marian: pre-norm
layers with a final layer norm, embeddings scaled inside their module, sinusoidal positions
counted from the padding id plus one (a padding token fed takes the padding id's row, zeros,
as the model's own step gives it), no final logits bias. The target language is the
decoder's first token after `</s>`, forced as `generate`'s `forced_bos_token_id` does."""

from __future__ import annotations

import torch
from torch import nn

from export.hf.layers import run_step


def position_table(table, rows: int) -> torch.Tensor:
    """The sinusoids of M2M100's position module from position 0 (the row after the padding
    id's: a padding token takes the padding row, zeros), made longer where the model's hold
    fewer than `rows`."""
    start = table.padding_idx + 1
    if table.weights.shape[0] < start + rows:
        table.make_weights(start + rows + table.offset, table.embedding_dim, table.padding_idx)
    return table.weights[start:]


class M2M100Step(nn.Module):
    """(input_ids, positions, self_mask, past K/V, encoder K/V, memory_mask) -> (logits of the
    last new token, present K/V, cross attention)."""

    def __init__(self, model, max_positions: int | None = None):
        super().__init__()
        config = model.config
        decoder = model.model.decoder
        self.embed_tokens = decoder.embed_tokens  # scales by sqrt(d_model) itself
        table = decoder.embed_positions
        rows = max_positions or config.max_position_embeddings
        self.register_buffer("position_table", position_table(table, rows).clone())
        self.pad = table.padding_idx
        self.layers = decoder.layers
        self.layer_norm = decoder.layer_norm
        self.heads = config.decoder_attention_heads
        self.lm_head = model.lm_head

    def forward(self, input_ids, positions, self_mask, *tensors):
        real = (input_ids != self.pad).unsqueeze(-1).to(self.position_table.dtype)
        h = self.embed_tokens(input_ids) + self.position_table[positions] * real
        h, present, attention = run_step(self.layers, h, self_mask, tensors, self.heads, True)
        logits = self.lm_head(self.layer_norm(h[:, -1]))
        return (logits, *present, attention)
