"""Helpers shared by the test suites: paths and small random models."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import socketserver
import struct
import threading
import zipfile
import zlib
from pathlib import Path

import numpy as np

from models.shipped import SHIPPED_CAPTIONER as SHIPPED_CAPTIONER
from models.shipped import SHIPPED_TRANSLATOR as SHIPPED_TRANSLATOR
from service.runtime import documents

ROOT = Path(__file__).resolve().parents[1]
TRANSLATOR_DATA = ROOT / "data" / "translator"
CAPTIONER_DATA = ROOT / "data" / "captioner"
BUILT_REPOSITORY = ROOT / "data" / "repository"  # `./dev.sh repository` (and `test`) builds it
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
# the seeds of the tests that draw traffic at random (docs/reliability.md, "Random traffic"):
# ATTNSERVE_RANDOM_SEEDS of them, 0 on (2 by default, what CI runs)
RANDOM_SEEDS = list(range(max(1, int(os.environ.get("ATTNSERVE_RANDOM_SEEDS", "2")))))
# a translation long enough that a request lasts seconds unless something stops it: 4 texts x
# 16 samples, temperature 5 (almost never `</s>`), up to 500 steps
LONG = {
    "temperature": 5.0,
    "num_hypotheses": 16,
    "max_length": 500,
    "seed": 3,
    "max_length_ratio": 0.0,  # 500 steps whatever the input's length
}
LONG_TEXTS = ["Yo soy de Canadá.", "¿Me puedes traer un tenedor?", "Dios es amor.", "Hola."]


def installed(name: str) -> str:
    """The path of a program ./dev.sh installs (a Debian package); the test fails without."""
    import pytest

    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run ./dev.sh, which installs it (Debian packages)")
    return path


def handmade_png(width: int, height: int, depth: int, color: int, row: bytes) -> bytes:
    """A PNG of `height` identical rows (filter byte 0 then `row`), compressed a row at a time."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(b"\x00" + row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


def tiny_transformer(seed: int = 0, **overrides):
    """A small random model whose outputs are far from uniform (weights scaled up)."""
    import torch

    from models.config import PRESETS
    from models.transformer import Transformer

    config = PRESETS["tiny"]
    if overrides:
        from dataclasses import replace

        config = replace(config, **overrides)
    torch.manual_seed(seed)
    model = Transformer(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(3.0)
    return model


def tiny_translator_checkpoint(directory: Path, seed: int = 0) -> Path:
    """A small random translator (width 32, 2 layers a side, its weights as initialised) with
    the shipped tokenizer, saved as a checkpoint in `directory`: what the benchmarks' quick
    runs export and time."""
    import torch

    from models.checkpoint import save_checkpoint
    from models.config import TransformerConfig
    from models.transformer import Transformer
    from service.runtime.tokenizer import Tokenizer

    tokenizer = SHIPPED_TRANSLATOR / "tokenizer.model"
    torch.manual_seed(seed)
    config = TransformerConfig(
        vocab_size=Tokenizer(tokenizer).vocab_size,
        d_model=32,
        n_heads=4,
        d_ff=64,
        encoder_layers=2,
        decoder_layers=2,
    )
    save_checkpoint(Transformer(config), tokenizer, directory)
    return directory


def random_sources(vocab: int, lengths: list[int], seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(4, vocab, size=n).tolist() for n in lengths]


def run_bench(
    module: str, arguments: list[str], markdown: Path, timeout: float
) -> tuple[dict, str]:
    """(JSON report, Markdown) of `python -m <module> --quick --json ... --markdown F`."""
    import json
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", module, "--quick", "--json", *arguments]
    done = subprocess.run(
        [*command, "--markdown", str(markdown)],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout), markdown.read_text(encoding="utf-8")


def perturb_near_logits(path: Path, amount: float = 0.05) -> str:
    """Adds `amount` to 8 channels of the 1-D float weight nearest the step's `logits` (a
    layer norm's scale or an output bias, traced or built alike); returns its name."""
    from collections import deque

    import onnx
    from onnx import numpy_helper

    proto = onnx.load(str(path))
    graph = proto.graph
    weights = {i.name: i for i in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}
    queue, seen = deque(["logits"]), set()
    while queue:
        node = producers.get(queue.popleft())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        for name in node.input:
            weight = weights.get(name)
            if weight is not None and len(weight.dims) == 1 and weight.data_type in (1, 10):
                values = numpy_helper.to_array(weight).copy()
                values[:8] += amount
                weight.CopyFrom(numpy_helper.from_array(values, weight.name))
                onnx.save(proto, str(path))
                return name
        queue.extend(node.input)
    raise ValueError(f"{path}: no 1-D float weight leads to logits")


def built_tiny_translator(directory: Path, tokenizer, seed: int, variants: tuple[str, ...]):
    """(model, version): a tiny random translator (3 decoder layers, the middle one's
    cross-attention returned) written op by op into `directory` with `variants`."""
    from dataclasses import replace

    import torch

    from export.repository import write_version
    from models.config import PRESETS
    from models.transformer import Transformer

    config = replace(
        PRESETS["tiny"], vocab_size=tokenizer.vocab_size, decoder_layers=3, cross_attention_layer=1
    )
    torch.manual_seed(seed)
    model = Transformer(config).eval()
    version = write_version(
        model, tokenizer.model_file, directory, "tiny", "1", variants, method="built"
    )
    return model, version


def tiny_hf_families() -> dict:
    """name -> (a builder of a small random model, its pad, its end, the tokens forced first):
    each family's layout (post-norm Marian with GELU and with swish, pre-norm M2M100, mBART
    with its embedding norm and logits bias)."""
    return {
        "marian-gelu": (tiny_marian, 95, 0, ()),
        "marian-swish": (lambda: tiny_marian(activation_function="swish"), 95, 0, ()),
        "m2m100": (tiny_m2m100, 1, 2, (120,)),
        "mbart": (tiny_mbart, 1, 2, (120,)),
    }


class OrtModule:
    """An onnxruntime session called as the graph's module is: torch tensors in, in the
    order of `names`, and out."""

    def __init__(self, path, names):
        import onnxruntime as ort

        self.session, self.names = ort.InferenceSession(str(path)), names

    def __call__(self, *tensors):
        import numpy as np
        import torch

        feeds = {n: t.numpy() for n, t in zip(self.names, tensors, strict=True)}
        return tuple(torch.from_numpy(np.asarray(o)) for o in self.session.run(None, feeds))


def tiny_marian(seed: int = 0, **overrides):
    """A small random Marian (transformers), pad 95, end 0: OPUS-MT's layout (`overrides`
    of its config: OPUS-MT's own activation is swish)."""
    import torch
    import transformers

    config = transformers.MarianConfig(
        **{"vocab_size": 96, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
           "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 64,
           "decoder_ffn_dim": 64, "max_position_embeddings": 64, "pad_token_id": 95,
           "eos_token_id": 0, "decoder_start_token_id": 95, "forced_eos_token_id": None,
           "bad_words_ids": [[95]], **overrides},
    )  # fmt: skip
    torch.manual_seed(seed)
    return transformers.MarianMTModel(config).eval()


def tiny_m2m100(seed: int = 2):
    """A small random M2M100 (transformers), fairseq's ids (pad 1, end 2); its default seed
    writes greedy decodes of several tokens."""
    import torch
    import transformers

    config = transformers.M2M100Config(
        vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=1, eos_token_id=2,
        decoder_start_token_id=2,
    )  # fmt: skip
    torch.manual_seed(seed)
    return transformers.M2M100ForConditionalGeneration(config).eval()


def tiny_mbart(seed: int = 0):
    """A small random mBART-50 (transformers), fairseq's ids (pad 1, end 2), learned
    positions, an embedding norm and a final logits bias of its own."""
    import torch
    import transformers

    config = transformers.MBartConfig(
        vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=1, eos_token_id=2,
        decoder_start_token_id=2, scale_embedding=True, forced_eos_token_id=None, init_std=0.5,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = transformers.MBartForConditionalGeneration(config).eval()
    with torch.no_grad():  # a bias that is not zeros, so the step must add it
        model.final_logits_bias.normal_(0.0, 0.1)
    return model


def trained_spm(
    lines: list[str], prefix: Path, model_type: str, size: int, ends: bool = False
) -> Path:
    """A SentencePiece model of `lines` as Hugging Face's translation models ship them: no
    `<s>`, `</s>` or padding of its own, `<unk>` at 0 (`ends`: `<s>` at 1 and `</s>` at 2,
    as mBART's)."""
    import sentencepiece as spm

    bos, eos = (1, 2) if ends else (-1, -1)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=size,
        model_type=model_type, character_coverage=1.0, bos_id=bos, eos_id=eos, unk_id=0,
        pad_id=-1, minloglevel=2,
    )  # fmt: skip
    return prefix.with_suffix(".model")


def _pieces(model_file: Path) -> list[str]:
    import sentencepiece as spm

    model = spm.SentencePieceProcessor(model_file=str(model_file))
    return [model.id_to_piece(i) for i in range(model.get_piece_size())]


def _lines(side: str, count: int = 300) -> list[str]:
    text = (TRANSLATOR_DATA / f"test.{side}").read_text(encoding="utf-8")
    return text.splitlines()[:count]


def marian_directory(folder: Path, seed: int = 0, multilingual: bool = False) -> Path:
    """A small random Marian model saved as a Hugging Face directory, OPUS-MT's layout (its
    tokenizer says Spanish to German: a pair our own translator does not cover): source and
    target SentencePiece models, one vocabulary (`</s>` 0, `<unk>` 1, `<pad>`
    last), pad as the decoder's start and banned, `</s>` forced at the limit; with
    `multilingual`, target languages as `>>xx<<` tokens."""
    import json

    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    source = trained_spm(_lines("es"), folder / "source", "unigram", 300)
    target = trained_spm(_lines("en"), folder / "target", "unigram", 250)
    vocabulary = {"</s>": 0, "<unk>": 1}
    for model_file in (source, target):
        for piece in _pieces(model_file):
            vocabulary.setdefault(piece, len(vocabulary))
    if multilingual:
        for code in ("en", "fr", "de"):
            vocabulary[f">>{code}<<"] = len(vocabulary)
    vocabulary["<pad>"] = len(vocabulary)
    (folder / "vocab.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    source.rename(folder / "source.spm")
    target.rename(folder / "target.spm")
    tokenizer = transformers.MarianTokenizer(
        vocab=str(folder / "vocab.json"), source_spm=str(folder / "source.spm"),
        target_spm=str(folder / "target.spm"), source_lang="es", target_lang="de",
    )  # fmt: skip
    pad = vocabulary["<pad>"]
    config = transformers.MarianConfig(
        vocab_size=len(vocabulary), d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=pad, eos_token_id=0,
        decoder_start_token_id=pad, init_std=1.0,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=pad, pad_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
        bad_words_ids=[[pad]], num_beams=4, max_length=64,
    )  # fmt: skip
    with torch.no_grad():  # weights far from 0, so outputs follow the source; `</s>` likely
        model.final_logits_bias[0, 0] = 18.0  # enough that most outputs end
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _random_language_token_model(vocab_size: int, seed: int, family: str = "m2m100"):
    """A small random M2M100 (or mBART-50: `family` "mbart", learned positions, a random
    final logits bias) model of fairseq's ids (`<s>` 0, pad 1, `</s>` 2) with its generate
    rules; weights that make `</s>` likely enough that most outputs end."""
    import torch
    import transformers

    mbart = family == "mbart"
    config_class = transformers.MBartConfig if mbart else transformers.M2M100Config
    config = config_class(
        vocab_size=vocab_size, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=1, eos_token_id=2,
        bos_token_id=0, decoder_start_token_id=2, init_std=0.5, scale_embedding=True,
        tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(seed)
    model_class = (
        transformers.MBartForConditionalGeneration
        if mbart
        else transformers.M2M100ForConditionalGeneration
    )
    model = model_class(config).eval()
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=2, pad_token_id=1, eos_token_id=2, bos_token_id=0,
        forced_eos_token_id=2, early_stopping=True, num_beams=4, max_length=64,
    )  # fmt: skip
    with torch.no_grad():  # `</s>` likelier through the final norm's bias: most outputs end
        direction = torch.nn.functional.normalize(torch.randn(config.d_model), dim=0)
        model.model.decoder.layer_norm.bias.copy_(direction)
        model.lm_head.weight[2] += 5.0 * direction
        if mbart:  # a bias that is not zeros, so the step must add it
            model.final_logits_bias.normal_(0.0, 0.1)
    return model


def m2m100_directory(folder: Path, seed: int = 0) -> Path:
    """A small random M2M100 model saved as a Hugging Face directory: one SentencePiece
    model, fairseq's ids (`<s>` 0, pad 1, `</s>` 2, `<unk>` 3), a token per language after
    the vocabulary, `</s>` as the decoder's start, the target language forced after it."""
    import json

    import transformers
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES

    folder.mkdir(parents=True, exist_ok=True)
    model_file = trained_spm(_lines("es") + _lines("en"), folder / "spm", "bpe", 400)
    vocabulary = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for piece in _pieces(model_file):
        vocabulary.setdefault(piece, len(vocabulary))
    (folder / "vocab.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    model_file.rename(folder / "sentencepiece.bpe.model")
    codes = FAIRSEQ_LANGUAGE_CODES["m2m100"]
    tokenizer = transformers.M2M100Tokenizer(
        str(folder / "vocab.json"), str(folder / "sentencepiece.bpe.model"), src_lang="es",
        tgt_lang="en", additional_special_tokens=[f"__{code}__" for code in codes],
    )  # fmt: skip
    model = _random_language_token_model(len(tokenizer), seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


NLLB_CODES = ("eng_Latn", "spa_Latn", "zho_Hans", "zho_Hant")  # FLORES-200's; French left to M2M100


def nllb_directory(folder: Path, seed: int = 0) -> Path:
    """A small random NLLB model saved as a Hugging Face directory, as NLLB-200 ships one: an
    M2M100 model, one SentencePiece BPE model and the tokenizer `transformers` builds from
    its pieces and merges (`<s>` 0, pad 1, `</s>` 2, `<unk>` 3, the FLORES-200 codes as
    special tokens after the pieces, `<mask>` last), `</s>` as the decoder's start and the
    target language forced after it."""
    import transformers
    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    folder.mkdir(parents=True, exist_ok=True)
    model_file = trained_spm(_lines("es") + _lines("en"), folder / "spm", "bpe", 400)
    model_file = model_file.rename(folder / "sentencepiece.bpe.model")
    pieces = SentencePieceExtractor(str(model_file)).extract(BPE)
    vocabulary = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for piece in pieces["vocab"]:
        vocabulary.setdefault(piece, len(vocabulary))
    for code in (*NLLB_CODES, "<mask>"):
        vocabulary[code] = len(vocabulary)
    tokenizer = transformers.NllbTokenizer(
        vocab=vocabulary, merges=pieces["merges"], src_lang="spa_Latn", tgt_lang="eng_Latn",
        additional_special_tokens=list(NLLB_CODES),
        _spm_precompiled_charsmap=pieces["_spm_precompiled_charsmap"],
    )  # fmt: skip
    model = _random_language_token_model(len(tokenizer), seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def mbart50_directory(folder: Path, seed: int = 0) -> Path:
    """A small random mBART-50 model saved as a Hugging Face directory, as its many-to-many
    translator ships: one SentencePiece model (`<unk>` 0, `<s>` 1, `</s>` 2), the tokenizer
    `transformers` builds from its pieces (fairseq's ids: `<s>` 0, pad 1, `</s>` 2, `<unk>`
    3; mBART-50's 52 language codes after the pieces, `<mask>` last), `</s>` as the
    decoder's start and the target language forced after it."""
    import transformers
    from tokenizers.models import Unigram
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    folder.mkdir(parents=True, exist_ok=True)
    lines = _lines("es") + _lines("en")
    model_file = trained_spm(lines, folder / "spm", "unigram", 400, ends=True)
    model_file = model_file.rename(folder / "sentencepiece.bpe.model")
    pieces = SentencePieceExtractor(str(model_file)).extract(Unigram)
    tokenizer = transformers.MBart50Tokenizer(
        vocab=pieces["vocab"], src_lang="es_XX", tgt_lang="en_XX",
        _spm_precompiled_charsmap=pieces["_spm_precompiled_charsmap"],
    )  # fmt: skip
    model = _random_language_token_model(len(tokenizer), seed, family="mbart")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def certificate_texts(model_version, count: int = 200) -> list[str]:
    """`count` Spanish test sentences within a version's source limit (its own tokenizer's
    tokens, a language token and `</s>` besides)."""
    from service.runtime.hf_tokenizers import read_tokenizer

    tokenizer = read_tokenizer(model_version)
    limit = model_version.manifest["limits"]["max_source_tokens"] - 2
    return [t for t in _lines("es", 3000) if len(tokenizer.encode(t)) <= limit][:count]


def broken_version(directory):
    """A translator version (ModelVersion) whose graphs are missing from its directory."""
    from models.config import PRESETS
    from service.runtime.repository import MANIFEST, ModelVersion

    pieces = [("pad", "<blank>"), ("bos", "<s>"), ("eos", "</s>"), ("unk", "<unk>")]
    manifest = {
        "model": {
            "name": "tiny",
            "version": "2",
            "kind": "transformer",
            "config": PRESETS["tiny"].to_dict(),
        },
        "special_tokens": {n: {"id": i, "piece": p} for i, (n, p) in enumerate(pieces)},
        "graphs": {"fp32": {"encoder": "fp32/encoder.onnx", "decoder": "fp32/decoder.onnx"}},
    }
    (directory / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return ModelVersion(directory, manifest)


CHAPTER = (
    '<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml">'
    "<head><title>Uno</title></head><body><p>El perro <b>come</b> pan.</p><p><br/></p>"
    "</body></html>"
)


def epub(chapter: str = CHAPTER, ncx: str | None = None, language: str | None = None) -> bytes:
    """A small EPUB: its mimetype first and stored, a package listing one chapter in a
    folder of its own, and an image; with `ncx`, an EPUB 2 table of contents (toc.ncx), with
    `language`, the package's metadata declaring it (dc:language)."""
    metadata = toc = ""
    if language is not None:
        metadata = (
            '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Libro</dc:title>'
            f"<dc:language>{language}</dc:language></metadata>"
        )
    if ncx is not None:
        toc = '<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>'
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr(
            "META-INF/container.xml",
            '<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container" version="1.0">'
            '<rootfiles><rootfile full-path="OEBPS/content.opf" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>',
        )
        archive.writestr(
            "OEBPS/content.opf",
            f'<package xmlns="http://www.idpf.org/2007/opf" version="3.0">{metadata}<manifest>'
            '<item id="c1" href="text/cap%C3%ADtulo.xhtml" media-type="application/xhtml+xml"/>'
            f'<item id="i" href="cover.png" media-type="image/png"/>{toc}</manifest></package>',
        )
        archive.writestr("OEBPS/text/capítulo.xhtml", chapter)
        if ncx is not None:
            archive.writestr("OEBPS/toc.ncx", ncx)
        archive.writestr("OEBPS/cover.png", b"\x89PNG not really")
    return out.getvalue()


def upper_cased(text: str) -> dict:
    """The /v1 JSON of `text` translated as the server answers it (the alignment of a text
    of one sentence on its hypothesis): each sentence upper-cased, each word attending to
    itself."""
    document = documents.split_text(text)
    said = [sentence.upper() for sentence in document.sentence_texts()]
    whole, spans = document.join(said)
    sentences = []
    for (start, end), (begin, finish), sentence in zip(
        document.sentences, spans, document.sentence_texts(), strict=True
    ):
        pieces = ["▁" + word for word in sentence.split()] + ["</s>"]
        weights = [1.0 if s == t else 0.0 for t in range(len(pieces)) for s in range(len(pieces))]
        alignment = {
            "sourceTokens": pieces,
            "targetTokens": [p if p == "</s>" else p.upper() for p in pieces],
            "weights": weights,
        }
        span = {"sourceEnd": end, "targetStart": begin, "targetEnd": finish}
        sentences.append({**span, "sourceStart": start, "alignment": alignment})
    hypothesis = {"text": whole}
    if len(sentences) == 1:
        hypothesis["alignment"] = sentences[0].pop("alignment")
    return {"hypotheses": [hypothesis], "sentences": sentences}


def assert_resumes_as_unbroken(leg) -> None:
    """A training run of 4 steps, and the same run stopped after 2 and resumed to 4, end
    with equal weights; `leg(run, steps)` trains run `run` (a name) to `steps` as a new
    process would (a new trainer on the run's folder) and returns the trainer."""
    import torch

    def trained(run: str, *legs: int) -> dict:
        for steps in legs:
            trainer = leg(run, steps)
        assert trainer.progress.step == legs[-1]
        return trainer.model.state_dict()

    unbroken, resumed = trained("unbroken", 4), trained("resumed", 2, 4)
    for name, weights in unbroken.items():
        assert torch.equal(resumed[name], weights), name


class RefusingEncoder:
    """An engine (delegating everything to `engine`) whose encoder refuses a batch of sources
    longer than `longest` tokens as an exported encoder does (an onnxruntime error: its
    position table is shorter), after `refusals` runs that fail whatever their inputs (a
    fault of the device: `refusals=-1` for every run)."""

    def __init__(self, engine, longest: int, refusals: int = 0):
        self._engine, self.longest, self.refusals, self.runs = engine, longest, refusals, 0

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def encode(self, *inputs, **named):
        self.runs += 1
        length = named["src_ids"].shape[1]
        if self.refusals:
            self.refusals -= self.refusals > 0
            raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : device fault")
        if length > self.longest:
            raise RuntimeError(
                "[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running "
                f"Add node: Attempting to broadcast an axis by a dimension other than 1. "
                f"{self.longest} by {length}"
            )
        return self._engine.encode(*inputs, **named)


class PrefixProxy:
    """A reverse proxy on 127.0.0.1 that serves `upstream` (a port of 127.0.0.1) at `prefix`,
    as nginx's `location /prefix/ { proxy_pass http://upstream/; }` does: a request under the
    prefix goes on with the prefix stripped, any other is a 404 of the proxy's own. One
    request a connection: the server closes each once it has answered. A context manager;
    `url` is the prefix's address."""

    def __init__(self, upstream: int, prefix: str):
        relay = self._relay

        class Relay(socketserver.BaseRequestHandler):
            def handle(self):
                relay(self.request)

        self.upstream, self.prefix = upstream, prefix.encode()
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Relay)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{prefix}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> PrefixProxy:
        self.thread.start()
        return self

    def __exit__(self, *failed) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _relay(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head and (data := client.recv(65536)):
            head += data
        head, _, body = head.partition(b"\r\n\r\n")
        line, *headers = head.split(b"\r\n")
        method, target, version = line.split(b" ", 2)
        if not target.startswith(self.prefix + b"/"):
            client.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            return
        # the request as the proxy passes it on: its path stripped, one request a connection
        line = b" ".join([method, target[len(self.prefix) :], version])
        headers = [h for h in headers if not h.lower().startswith(b"connection:")]
        head = b"\r\n".join([line, *headers, b"connection: close", b"", body])
        with socket.create_connection(("127.0.0.1", self.upstream)) as upstream:
            upstream.sendall(head)

            def rest_of_body() -> None:
                with contextlib.suppress(OSError):
                    while data := client.recv(65536):
                        upstream.sendall(data)

            threading.Thread(target=rest_of_body, daemon=True).start()
            while data := upstream.recv(65536):
                client.sendall(data)


def growth(run, small, large, rounds: int = 5) -> float:
    """The time `run(large)` takes over that of `run(small)`, each the best of `rounds` runs
    taken in turn, small then large, with the garbage collector off (a collection of the test
    session's objects can take longer than the work): for an input four times as long, about 4
    where the work is linear in its length, 16 where it is quadratic. The time is this thread's
    CPU time, so the suite's other workers, busy on the same cores, do not count in it; and a
    ratio, so a slower machine leaves it where it is."""
    import gc
    import time

    def timed(argument) -> float:
        started = time.thread_time()
        run(argument)
        return time.thread_time() - started

    enabled = gc.isenabled()
    gc.disable()
    try:
        pairs = [(timed(small), timed(large)) for _ in range(rounds)]
        return min(large for _, large in pairs) / min(small for small, _ in pairs)
    finally:
        if enabled:
            gc.enable()


def drain(scheduler, jobs: list, every: int = 1) -> tuple[dict, int]:
    """Submits one job every `every` rounds -> (the final event of each job, the rounds)."""
    from service.worker.messages import Last

    pending, done, rounds = list(jobs), {}, 0
    while pending or scheduler.busy:
        if pending and rounds % every == 0:
            scheduler.submit(pending.pop(0))
        scheduler.iterate()
        rounds += 1
        for event in scheduler.events:
            if isinstance(event, Last):
                done[event.job_id] = event
        scheduler.events.clear()
    return done, rounds
