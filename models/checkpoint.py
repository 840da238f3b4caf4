"""The shipped form of a model: fp16 safetensors, its config, and its tokenizer, in one folder.

<dir>/model.safetensors   weights in fp16 (tied matrices stored once)
<dir>/config.json         TransformerConfig
<dir>/tokenizer.model     SentencePiece model
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model

from models.config import TransformerConfig
from models.transformer import Transformer
from service.tokenizer import Tokenizer

WEIGHTS, CONFIG, TOKENIZER = "model.safetensors", "config.json", "tokenizer.model"


def save_checkpoint(model: Transformer, tokenizer_file: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    half = copy.deepcopy(model).half()
    save_model(half, str(out_dir / WEIGHTS), metadata={"format": "attnserve-transformer-1"})
    model.config.save(out_dir / CONFIG)
    if Path(tokenizer_file).resolve() != (out_dir / TOKENIZER).resolve():
        shutil.copyfile(tokenizer_file, out_dir / TOKENIZER)


def load_checkpoint(
    directory: Path, dtype: torch.dtype = torch.float32
) -> tuple[Transformer, Tokenizer]:
    """The model (eval mode, `dtype`) and tokenizer; every weight must match by name and shape."""
    directory = Path(directory)
    config = TransformerConfig.load(directory / CONFIG)
    model = Transformer(config).half()
    load_model(model, str(directory / WEIGHTS), strict=True)
    tokenizer = Tokenizer(directory / TOKENIZER)
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.vocab_size} pieces, config {config.vocab_size}")
    return model.to(dtype).eval(), tokenizer
