"""The shipped form of a model: fp16 safetensors, its config, and its tokenizer, in one folder.

<dir>/model.safetensors   weights in fp16 (tied matrices stored once); its metadata names the
                          kind ("attnserve-transformer-1", "attnserve-captioner-1")
<dir>/config.json         TransformerConfig or CaptionerConfig
<dir>/tokenizer.model     SentencePiece model
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_model, save_model

from models.captioner import Captioner
from models.config import CaptionerConfig, TransformerConfig
from models.transformer import Transformer
from service.runtime.tokenizer import Tokenizer

WEIGHTS, CONFIG, TOKENIZER = "model.safetensors", "config.json", "tokenizer.model"
# kind -> (config class, model class); the kind is the manifest's model kind too
KINDS = {
    "transformer": (TransformerConfig, Transformer),
    "captioner": (CaptionerConfig, Captioner),
}


def kind_of(model) -> str:
    return next(kind for kind, (_, cls) in KINDS.items() if isinstance(model, cls))


def checkpoint_kind(directory: Path) -> str:
    with safe_open(str(Path(directory) / WEIGHTS), "pt") as f:
        fmt = (f.metadata() or {}).get("format", "")
    kind = fmt.removeprefix("attnserve-").removesuffix("-1")
    if kind not in KINDS:
        raise ValueError(f"{directory}: unknown checkpoint format {fmt!r}")
    return kind


def save_checkpoint(model, tokenizer_file: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    half = copy.deepcopy(model).half()
    metadata = {"format": f"attnserve-{kind_of(model)}-1"}
    save_model(half, str(out_dir / WEIGHTS), metadata=metadata)
    model.config.save(out_dir / CONFIG)
    if Path(tokenizer_file).resolve() != (out_dir / TOKENIZER).resolve():
        shutil.copyfile(tokenizer_file, out_dir / TOKENIZER)


def load_checkpoint(directory: Path, dtype: torch.dtype = torch.float32):
    """The model (eval mode, `dtype`) and tokenizer; every weight must match by name and shape.
    The model is a Transformer or a Captioner, as the weights' metadata says."""
    directory = Path(directory)
    config_class, model_class = KINDS[checkpoint_kind(directory)]
    config = config_class.load(directory / CONFIG)
    model = model_class(config).half()
    load_model(model, str(directory / WEIGHTS), strict=True)
    tokenizer = Tokenizer(directory / TOKENIZER)
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.vocab_size} pieces, config {config.vocab_size}")
    return model.to(dtype).eval(), tokenizer
