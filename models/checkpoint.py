"""The shipped form of a model: fp16 safetensors, its config, and its tokenizer, in one folder.

<dir>/model.safetensors   weights in fp16 (tied matrices stored once); its metadata names the
                          kind ("attnserve-transformer-1", "attnserve-captioner-1")
<dir>/config.json         TransformerConfig or CaptionerConfig
<dir>/tokenizer.model     SentencePiece model
<dir>/grammar.json        the output grammar in words, where the model has one (the captioner:
                          its captions' patterns and the phrases of each slot); the export
                          writes it into the manifest in token ids (service.runtime.grammar)
"""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_model, save_model

from models.kinds import kind_named, kind_names, model_kind
from service.paths import file_name
from service.runtime.tokenizer import UNK_ID, Tokenizer

WEIGHTS, CONFIG, TOKENIZER = "model.safetensors", "config.json", "tokenizer.model"
GRAMMAR = "grammar.json"


class UnreadableCheckpoint(ValueError):
    """A checkpoint that is there but cannot be read: a file of something else, weights of
    other names or shapes, a config that does not parse."""


@contextlib.contextmanager
def reading(path: Path):
    """Whatever reading the checkpoint `path` raises, but a missing or unreadable file
    (OSError), as UnreadableCheckpoint naming it: torch, pickle and safetensors raise
    their own kinds."""
    try:
        yield
    except OSError:
        raise
    except Exception as error:
        raise UnreadableCheckpoint(f"{path}: not a checkpoint this reads ({error})") from error


def save_grammar(grammar: dict, out_dir: Path) -> None:
    """Writes an output grammar in words ({"patterns": [[slot, ...]], "slots": {slot:
    [phrase, ...]}}) beside the checkpoint."""
    (Path(out_dir) / GRAMMAR).write_text(json.dumps(grammar, indent=1) + "\n")


def checkpoint_grammar(directory: Path, tokenizer: Tokenizer) -> dict | None:
    """The checkpoint's output grammar in token ids (the manifest's `grammar`), None where it
    has none. Every phrase must be whole pieces of the tokenizer: ValueError where a phrase
    decodes to other text."""
    path = Path(directory) / GRAMMAR
    if not path.is_file():
        return None
    words = json.loads(path.read_text())
    slots = {}
    for slot, phrases in words["slots"].items():
        slots[slot] = [tokenizer.encode(phrase) for phrase in phrases]
        for phrase, ids in zip(phrases, slots[slot], strict=True):
            if tokenizer.decode(ids) != phrase or UNK_ID in ids:
                raise ValueError(f"{path}: {phrase!r} is not in the tokenizer's vocabulary")
    return {"patterns": words["patterns"], "slots": slots}


def checkpoint_kind(directory: Path) -> str:
    with safe_open(str(Path(directory) / WEIGHTS), "pt") as f:
        fmt = (f.metadata() or {}).get("format", "")
    kind = fmt.removeprefix("attnserve-").removesuffix("-1")
    if kind not in kind_names():
        raise ValueError(f"{directory}: unknown checkpoint format {fmt!r}")
    return kind


def save_checkpoint(model, tokenizer_file: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    half = copy.deepcopy(model).half()
    metadata = {"format": f"attnserve-{model_kind(model).name}-1"}
    save_model(half, str(out_dir / WEIGHTS), metadata=metadata)
    model.config.save(out_dir / CONFIG)
    if Path(tokenizer_file).resolve() != (out_dir / TOKENIZER).resolve():
        shutil.copyfile(tokenizer_file, out_dir / TOKENIZER)


def load_checkpoint(directory: Path, dtype: torch.dtype = torch.float32):
    """The model (eval mode, `dtype`) and tokenizer; every weight must match by name and shape.
    The model is of the kind (models.kinds) the weights' metadata names. UnreadableCheckpoint
    where the folder holds no such checkpoint, or its path is not UTF-8 (safetensors opens
    no such path), OSError where its files cannot be opened."""
    directory = Path(directory)
    if file_name(directory) != str(directory):
        raise UnreadableCheckpoint(
            f"{file_name(directory)}: a path that is not UTF-8, which safetensors cannot open"
            " (give its folders UTF-8 names)"
        )
    with reading(directory):
        kind = kind_named(checkpoint_kind(directory))
        config = kind.config_class.load(directory / CONFIG)
        model = kind.model_class(config).half()
        load_model(model, str(directory / WEIGHTS), strict=True)
        tokenizer = Tokenizer(directory / TOKENIZER)
        if tokenizer.vocab_size != config.vocab_size:
            vocabularies = f"{tokenizer.vocab_size} pieces, config {config.vocab_size}"
            raise ValueError(f"tokenizer has {vocabularies}")
    return model.to(dtype).eval(), tokenizer
