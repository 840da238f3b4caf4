"""A Hugging Face model directory as a model version of our repository: its graphs
(export.hf.graphs: every step our own translator ships, built op by op, or the encoder and
the cached step traced) in fp32 and int8 (fp16 where asked), the tokenizer files the runtime
reads (service.runtime.hf_tokenizers), and the manifest.

The manifest's kind is the translator's: the runtime serves it as it serves ours. What the
family does differently is declared, not coded in the runtime:

    preprocessor   `marian` (a source and a target SentencePiece model, one vocabulary) or
                   `m2m100` (one SentencePiece model, a token per language: M2M100, NLLB
                   and mBART-50)
    special_tokens `bos` is the decoder's first token (Marian's pad, M2M100's `</s>`)
    languages      what the model reads and writes; `tokens` (code -> id) and where a
                   language's token goes: `source_token` (before the source, M2M100's source
                   language) and `target_token` ("decoder": the forced first token, as
                   generate's forced_bos_token_id; "source": a multilingual Marian's `>>xx<<`)
    generation     the model's own generate rules, which the runtime applies to every
                   request: `end_at_limit` (forced_eos_token_id) and `beam_stop`
                   (early_stopping); single tokens it bans (bad_words_ids) are -inf in the
                   step's logits. The defaults it was published with (beams, length
                   penalty, length limit) are recorded: the certificate decodes with its
                   length penalty and limit, and a request chooses its own (unset: greedy)

`transformers` is imported here and by the certificate only: the runtime reads the files.
"""

from __future__ import annotations

import json
import re
import shutil
from importlib.metadata import version as package_version
from pathlib import Path

import onnxruntime
import torch

from export.builder import REVISION
from export.hf.graphs import architecture, build_graphs, export_graphs, interface
from export.kinds import export_kind_named
from export.onnx_export import OPSET
from export.ops import write_ops
from export.repository import INT8_SCALES, METHODS, int8_graphs, share_each_variant
from service.runtime.languages import listed, own_code
from service.runtime.repository import ModelVersion, verify, write_manifest

TOKENIZER_DIR = "tokenizer"
VARIANTS = ("fp32", "int8", "fp16")
BEAM_STOPS = {True: "full", False: "estimate", "never": "never"}  # generate's early_stopping
NLLB_CODE = re.compile(r"[a-z]{3}_[A-Z][a-z]{3}")  # spa_Latn
# families whose languages are tokens: the source's before it, the target's forced first
LANGUAGE_TOKENS = ("m2m_100", "mbart")
GRAPHS = {"built": build_graphs, "traced": export_graphs}  # by export.repository's METHODS


def load(directory: Path):
    """(model in float32 eval mode, its tokenizer) of a Hugging Face directory; ValueError
    naming a refused architecture (export.hf.graphs.architecture) or tokenizer."""
    import transformers

    if not (Path(directory) / "config.json").is_file():
        raise ValueError(f"{directory}: no config.json: not a Hugging Face model directory")
    config = transformers.AutoConfig.from_pretrained(directory)
    family = architecture(config)
    classes = {
        "marian": transformers.MarianMTModel,
        "m2m_100": transformers.M2M100ForConditionalGeneration,
        "mbart": transformers.MBartForConditionalGeneration,
    }
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    if family == "mbart" and not type(tokenizer).__name__.startswith("MBart50"):
        raise ValueError(
            f"mBART with {type(tokenizer).__name__}: its languages follow the source and start "
            "the decoder; only mBART-50's tokenizer (the language before the source) is taken"
        )
    model = classes[family].from_pretrained(directory, dtype=torch.float32).eval()
    return model, tokenizer


def banned_tokens(model) -> list[int]:
    """The single tokens `generate` never writes (bad_words_ids of one token); ValueError for
    banned sequences of several, which a step's logits cannot carry."""
    banned = model.generation_config.bad_words_ids or []
    longer = [words for words in banned if len(words) != 1]
    if longer:
        raise ValueError(f"bad_words_ids of several tokens are not taken: {longer}")
    return sorted({words[0] for words in banned})


def generation(model) -> dict:
    """The model's generate rules and defaults, as the manifest declares them."""
    g, config = model.generation_config, model.config
    early = g.early_stopping if g.early_stopping is not None else False
    return {
        "end_at_limit": g.forced_eos_token_id is not None,
        "beam_stop": BEAM_STOPS[early],
        "beam_size": g.num_beams or 1,
        "length_penalty": 1.0 if g.length_penalty is None else float(g.length_penalty),
        "max_length": g.max_length or 20,  # generate's default; the decoder's start included
        "banned": banned_tokens(model),
        "decoder_start": config.decoder_start_token_id,
    }


def _piece(tokenizer, token_id: int) -> str:
    return tokenizer.convert_ids_to_tokens(int(token_id))


def special_tokens(model, tokenizer) -> dict:
    ids = {
        "pad": tokenizer.pad_token_id,
        "bos": model.config.decoder_start_token_id,
        "eos": tokenizer.eos_token_id,
        "unk": tokenizer.unk_token_id,
    }
    return {name: {"id": int(i), "piece": _piece(tokenizer, i)} for name, i in ids.items()}


def write_tokenizer(family: str, tokenizer, out: Path) -> dict:
    """Copies the tokenizer's files under `out` and writes its vocabulary (piece -> id, as
    the tokenizer numbers them); returns the manifest's preprocessor."""
    out.mkdir(parents=True, exist_ok=True)
    folder = Path(tokenizer.name_or_path)
    vocabulary = {piece: int(i) for piece, i in tokenizer.get_vocab().items()}
    (out / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False), "utf-8")
    # how its decode writes a text: every special id dropped (`<mask>` too), and the spaces
    # before punctuation taken out where the tokenizer does so
    decoding = {
        "vocabulary": f"{TOKENIZER_DIR}/vocab.json",
        "appends": "</s>",
        "dropped": sorted({int(i) for i in tokenizer.all_special_ids}),
        "clean_up_spaces": cleans_up_spaces(tokenizer),
    }
    if family == "marian":
        if (folder / "target_vocab.json").exists():
            raise ValueError("a Marian model with separate vocabularies is not taken")
        for side in ("source", "target"):
            shutil.copyfile(_sentencepiece(folder, f"{side}.spm"), out / f"{side}.spm")
        return {
            "type": "marian",
            "source": f"{TOKENIZER_DIR}/source.spm",
            "target": f"{TOKENIZER_DIR}/target.spm",
            **decoding,
        }
    model = _sentencepiece(folder, "sentencepiece.bpe.model")
    shutil.copyfile(model, out / "sentencepiece.bpe.model")
    return {"type": "m2m100", "model": f"{TOKENIZER_DIR}/sentencepiece.bpe.model", **decoding}


def _sentencepiece(folder: Path, name: str) -> Path:
    """The SentencePiece model `name` of a model directory, which the runtime encodes with;
    ValueError where the directory lacks it (a tokenizer saved as tokenizer.json alone)."""
    path = folder / name
    if not path.is_file():
        raise ValueError(
            f"{folder}: no {name}; the runtime encodes with the model's SentencePiece model, "
            "and a tokenizer saved as tokenizer.json alone is not taken (copy the base "
            "model's file beside it)"
        )
    return path


def cleans_up_spaces(tokenizer) -> bool:
    """Whether the tokenizer's decode takes out the spaces before punctuation
    (`clean_up_tokenization_spaces`, where its kind of tokenizer applies it)."""
    ids = tokenizer("a , b .", add_special_tokens=False)["input_ids"]
    return tokenizer.decode(ids) != tokenizer.decode(ids, clean_up_tokenization_spaces=False)


def languages(
    family: str,
    tokenizer,
    given: tuple[list[str], list[str]] | None,
    declared: tuple[list[str], list[str]] = ([], []),
) -> dict:
    """The manifest's languages: M2M100's, NLLB's and mBART-50's every language both ways,
    by their tokens; a Marian model's from `given` (source, target) or its tokenizer's
    config, its target languages by their `>>xx<<` tokens where it has them (every one,
    whatever target is given). Then, of any family, only those `declared` to be read and
    written where they are (mBART-50's one-to-many model reads `en_XX` alone; each code its
    own or as a request names it, `en`); ValueError naming one the model lacks, or one
    `given` (to certify) the version does not declare."""
    found = _languages(family, tokenizer, given)
    reads = list(dict.fromkeys(own_code(code, found["source"]) for code in declared[0]))
    writes = list(dict.fromkeys(own_code(code, found["target"]) for code in declared[1]))
    unknown = sorted((set(reads) - set(found["source"])) | (set(writes) - set(found["target"])))
    if unknown:
        raise ValueError(
            f"languages {unknown} are not the model's: it reads "
            f"{listed(found['source']) or 'none named'}, writes {listed(found['target'])}"
        )
    narrowed = {**found, "source": list(reads or found["source"])}
    narrowed["target"] = list(writes or found["target"])
    if "tokens" in found:
        kept = {*narrowed["source"], *narrowed["target"]}
        narrowed["tokens"] = {code: i for code, i in found["tokens"].items() if code in kept}
    source, target = given or ([], [])
    missing = _undeclared(source, narrowed["source"]) + _undeclared(target, narrowed["target"])
    if missing:  # refused before anything is written, not by the certificate's request
        raise ValueError(
            f"languages {missing} to certify are not the version's: it reads "
            f"{listed(narrowed['source']) or 'any'}, writes {listed(narrowed['target'])}"
        )
    return narrowed


def _undeclared(given: list[str], codes: list[str]) -> list[str]:
    """The codes of `given` a request could not name among `codes` (any where empty), as the
    runtime reads a request's codes (languages.own_code: `es` for `spa_Latn`)."""
    return [code for code in given if codes and own_code(code, codes) not in codes]


def _languages(family: str, tokenizer, given: tuple[list[str], list[str]] | None) -> dict:
    """The languages a model's tokenizer (or `given`, a Marian model's) names."""
    if family in LANGUAGE_TOKENS:
        codes = _language_codes(tokenizer)
        return {
            "source": codes,
            "target": codes,
            "tokens": {c: language_id(tokenizer, c) for c in codes},
            "source_token": True,
            "target_token": "decoder",
        }
    vocabulary = tokenizer.get_vocab()
    targets = {
        piece[2:-2]: int(i)
        for piece, i in vocabulary.items()
        if piece.startswith(">>") and piece.endswith("<<") and len(piece) > 4
    }
    source, target = given or ([], [])
    config = getattr(tokenizer, "init_kwargs", {})
    source = list(source) or [c for c in [config.get("source_lang")] if c]
    # `>>xx<<` tokens name every target it writes; a target given is the one certified
    target = sorted(targets) or list(target) or [c for c in [config.get("target_lang")] if c]
    found = {"source": source, "target": target}
    if targets:
        found["tokens"] = {c: targets[c] for c in target if c in targets}
        found["target_token"] = "source"
    return found


def _language_codes(tokenizer) -> list[str]:
    """M2M100's and mBART-50's language codes (`es`, `es_XX`: their tokenizer's
    `lang_code_to_id`), or NLLB's (`spa_Latn`: its special tokens)."""
    codes = getattr(tokenizer, "lang_code_to_id", None)
    if codes:
        return sorted(codes)
    special = getattr(tokenizer, "all_special_tokens", None) or []  # transformers 4 and 5
    nllb = sorted({t for t in special if NLLB_CODE.fullmatch(t)})
    if nllb:
        return nllb
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES

    return sorted(FAIRSEQ_LANGUAGE_CODES["m2m100"])


def language_id(tokenizer, code: str) -> int:
    """The id of a language's token: M2M100's `__es__`, NLLB's `spa_Latn`, mBART-50's
    `es_XX`."""
    if hasattr(tokenizer, "get_lang_id"):
        return int(tokenizer.get_lang_id(code))
    return int(tokenizer.convert_tokens_to_ids(code))


def write_graphs(
    model,
    directory: Path,
    variants: tuple[str, ...],
    banned,
    method: str = "built",
    per_channel: bool = True,
) -> dict:
    """Every variant's graphs under `directory`, by variant then graph name (relative): built
    op by op (`method` "built": every graph our own translator ships, int8's as its are
    quantised) or traced (the encoder and the cached step); a variant's graphs share one
    file of weights."""
    made = {"fp32": GRAPHS[method](model, directory / "fp32", banned=banned)}
    if "int8" in variants:
        kind = export_kind_named("transformer")
        made["int8"] = int8_graphs(kind, made["fp32"], directory, per_channel)
    if "fp16" in variants:
        half = GRAPHS[method](model, directory / "fp16", torch.float16, banned=banned)
        model.float()
        made["fp16"] = half
    share_each_variant(made)
    return {v: {k: str(p.relative_to(directory)) for k, p in g.items()} for v, g in made.items()}


def export_hf(
    directory: Path,
    repository: Path,
    name: str,
    version: str = "1",
    variants: tuple[str, ...] = ("fp32", "int8"),
    given_languages: tuple[list[str], list[str]] | None = None,
    declared: tuple[list[str], list[str]] = ([], []),
    into: Path | None = None,
    method: str = "built",
    int8_scales: str = INT8_SCALES[0],
) -> ModelVersion:
    """Writes `<repository>/<name>/<version>` (or the folder `into`) from the Hugging Face
    directory `directory` (no certificate yet: export.hf.certify); `declared`: the languages
    a multilingual model is declared to read and write, where fewer than its tokenizer names;
    `method` and `int8_scales` as export.repository.write_version takes them."""
    unknown = set(variants) - set(VARIANTS)
    if unknown or "fp32" not in variants:
        raise ValueError(f"variants {variants}: fp32 and any of {VARIANTS[1:]}")
    if method not in METHODS or int8_scales not in INT8_SCALES:
        raise ValueError(
            f"method {method!r}, int8 scales {int8_scales!r}: of {METHODS}, {INT8_SCALES}"
        )
    model, tokenizer = load(directory)
    family = architecture(model.config)
    declared_languages = languages(family, tokenizer, given_languages, declared)  # or refused
    target = Path(into) if into is not None else Path(repository) / name / version
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    try:
        preprocessor = write_tokenizer(family, tokenizer, target / TOKENIZER_DIR)  # or refused
        rules = generation(model)
        per_channel = int8_scales == INT8_SCALES[0]
        graphs = write_graphs(model, target, variants, rules["banned"], method, per_channel)
    except BaseException:  # no half-written version left behind
        shutil.rmtree(target, ignore_errors=True)
        raise
    limit = int(model.config.max_position_embeddings)
    config = {**model.config.to_dict(), "max_length": limit}
    manifest = {
        "model": {"name": name, "version": version, "kind": "transformer", "config": config,
                  "family": family},
        "interface": interface(model.config).to_dict(),
        "special_tokens": special_tokens(model, tokenizer),
        "limits": {"max_source_tokens": limit, "max_output_tokens": limit},
        "languages": declared_languages,
        "preprocessor": preprocessor,
        "generation": rules,
        "graphs": graphs,
        "graphs_made": dict.fromkeys(graphs, method),
        **({"graphs_revision": REVISION} if method == "built" else {}),
        **({"int8_scales": int8_scales} if "int8" in graphs else {}),
        "ops": write_ops(target, len(interface(model.config).memory_tensors)),
        "tokenizer": TOKENIZER_DIR,
        "versions": {
            "torch": torch.__version__,
            "transformers": package_version("transformers"),
            "onnx": package_version("onnx"),
            "onnxruntime": onnxruntime.__version__,
            "opset": OPSET,
        },
        "source": {"huggingface": str(Path(directory).resolve()), "family": family},
    }  # fmt: skip
    write_manifest(target, manifest)
    return verify(target)
