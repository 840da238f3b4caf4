"""Starting a translator from a trained one whose tokenizer differs.

A new corpus wants a new tokenizer, and a new tokenizer makes the old embedding rows meaningless
by id. Everything but the embedding carries over unchanged (same dimensions). Each row of the
new embedding is taken from the old one by piece: a piece the old vocabulary also has keeps its
vector; any other piece gets the mean vector of the old pieces its text splits into (the
usual vocabulary-transfer initialisation); a piece that splits into nothing keeps its random
initialisation. The shared embedding is also the output projection (tied), so the decoder's
word choice carries over the same way.
"""

from __future__ import annotations

from pathlib import Path

import torch

from models.checkpoint import load_checkpoint
from service.runtime.tokenizer import SPECIAL_PIECES, Tokenizer

WORD_START = "\u2581"  # SentencePiece's mark of a piece that begins a word


def embedding_rows(new: Tokenizer, old: Tokenizer) -> tuple[list[int | None], list[list[int]]]:
    """For each new piece id: (its old id when the old vocabulary has the piece, else None;
    the old ids its text encodes to, used when it has none)."""
    old_ids = {piece: i for i, piece in enumerate(old.vocabulary())}
    same: list[int | None] = []
    parts: list[list[int]] = []
    for i, piece in enumerate(new.vocabulary()):
        known = old_ids.get(piece)
        same.append(known)
        if known is None and i >= len(SPECIAL_PIECES):
            parts.append(old.encode(piece.replace(WORD_START, " ").strip()))
        else:
            parts.append([])
    return same, parts


@torch.no_grad()
def transfer_weights(model, tokenizer: Tokenizer, source: Path) -> dict:
    """Loads the translator checkpoint in `source` into `model` (built for `tokenizer`):
    every weight but the embedding by name, the embedding by piece. Returns counts."""
    old_model, old_tokenizer = load_checkpoint(source)
    for config in (old_model.config, model.config):
        if not (config.share_embeddings and config.tie_output):
            raise ValueError("transfer needs one embedding, shared and tied, in both models")
    if old_model.config.d_model != model.config.d_model:
        raise ValueError(f"{source}: d_model {old_model.config.d_model}, this model's differs")
    old_state = old_model.state_dict()
    embedding = "source_embedding.weight"
    tied = {embedding, "target_embedding.weight", "output.weight"}  # one matrix, by piece
    state = model.state_dict()
    mismatched = sorted(
        name
        for name in state
        if name not in tied
        and (name not in old_state or old_state[name].shape != state[name].shape)
    )
    if mismatched:
        raise ValueError(f"{source}: no weight of the same shape for {mismatched}")
    model.load_state_dict({k: v for k, v in old_state.items() if k not in tied}, strict=False)
    old_rows = old_state[embedding]
    rows = model.source_embedding.weight
    same, parts = embedding_rows(tokenizer, old_tokenizer)
    counts = {"kept": 0, "composed": 0, "random": 0}
    for i, (known, pieces) in enumerate(zip(same, parts, strict=True)):
        if known is not None:
            rows[i] = old_rows[known]
            counts["kept"] += 1
        elif pieces:
            rows[i] = old_rows[pieces].mean(dim=0)
            counts["composed"] += 1
        else:
            counts["random"] += 1
    return counts
