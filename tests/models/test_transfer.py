"""Starting a translator from one trained with another tokenizer (models.transfer)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from models.checkpoint import load_checkpoint, save_checkpoint
from models.config import PRESETS
from models.tokenizer import train_tokenizer
from models.transfer import transfer_weights
from models.transformer import Transformer

OLD_TEXT = ["y dijo dios sea la luz", "and god said let there be light"] * 60
NEW_TEXT = OLD_TEXT + ["la contraseña es incorrecta", "the password is incorrect"] * 60


@pytest.fixture
def old_checkpoint(tmp_path):
    tokenizer = train_tokenizer(OLD_TEXT, tmp_path / "old.model", vocab_size=280)
    config = replace(PRESETS["tiny"], vocab_size=tokenizer.vocab_size)
    torch.manual_seed(0)
    model = Transformer(config)
    save_checkpoint(model, tokenizer.model_file, tmp_path / "old")
    return tmp_path / "old", tokenizer


def test_the_new_model_keeps_every_weight_and_maps_the_embedding_by_piece(tmp_path, old_checkpoint):
    directory, old_tokenizer = old_checkpoint
    tokenizer = train_tokenizer(NEW_TEXT, tmp_path / "new.model", vocab_size=292)
    config = replace(PRESETS["tiny"], vocab_size=tokenizer.vocab_size)
    torch.manual_seed(1)
    model = Transformer(config)
    counts = transfer_weights(model, tokenizer, directory)

    old, _ = load_checkpoint(directory)
    for name, value in model.state_dict().items():
        if "embedding" not in name and name != "output.weight":
            assert torch.equal(value, old.state_dict()[name]), name
    old_ids = {piece: i for i, piece in enumerate(old_tokenizer.vocabulary())}
    rows, old_rows = model.source_embedding.weight, old.source_embedding.weight
    kept = composed = 0
    for i, piece in enumerate(tokenizer.vocabulary()):
        if piece in old_ids:
            assert torch.equal(rows[i], old_rows[old_ids[piece]]), piece
            kept += 1
        elif i >= 4:
            parts = old_tokenizer.encode(piece.replace("\u2581", " ").strip())
            assert torch.allclose(rows[i], old_rows[parts].mean(dim=0)), piece
            composed += 1
    assert counts["kept"] == kept and counts["composed"] == composed and composed > 0
    assert model.output.weight.data_ptr() == model.source_embedding.weight.data_ptr()  # tied


def test_a_model_of_other_dimensions_is_refused(tmp_path, old_checkpoint):
    directory, _ = old_checkpoint
    tokenizer = train_tokenizer(NEW_TEXT, tmp_path / "new.model", vocab_size=292)
    config = replace(PRESETS["tiny"], vocab_size=tokenizer.vocab_size, encoder_layers=3)
    with pytest.raises(ValueError, match="no weight of the same shape"):
        transfer_weights(Transformer(config), tokenizer, directory)
