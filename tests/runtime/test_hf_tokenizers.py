"""The runtime's tokenizers of Hugging Face models (service.runtime.hf_tokenizers) against
`transformers`' own, on SentencePiece models trained here: the same ids for every text, the
same text back from every id sequence, special and language tokens included."""

from __future__ import annotations

import json
import random

import pytest
import sentencepiece as spm
from helpers import TRANSLATOR_DATA, trained_spm

from service.runtime.hf_tokenizers import M2M100Tokenizer, MarianTokenizer, Specials

transformers = pytest.importorskip("transformers")  # the hf extra, installed by ./dev.sh

ODD = [
    "¡Hola! ¿Qué tal?… «Bien», dijo—y se fue.",
    "Pagó 12.345,67 € el 03/04/2025 a las 18:30h (IVA 21%).",
    "Emoji 😀🇪🇸👍🏽 y símbolos ∑ √ ≠ ©.",
    "Caracteres raros: ŧ ǅ 漢字 ქართული ✓",
    "  espacios   de más\ty tabulador  ",
    ">>en<< con código de lengua al principio",
    "x",
]


def texts(side: str, count: int = 300) -> list[str]:
    lines = (TRANSLATOR_DATA / f"test.{side}").read_text(encoding="utf-8").splitlines()
    return lines[:count]


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    folder = tmp_path_factory.mktemp("marian")
    trained_spm(texts("es"), folder / "source", "unigram", 400)
    trained_spm(texts("en"), folder / "target", "unigram", 350)
    vocabulary = {"</s>": 0, "<unk>": 1}
    for side in ("source", "target"):
        model = spm.SentencePieceProcessor(model_file=str(folder / f"{side}.model"))
        for i in range(model.get_piece_size()):
            vocabulary.setdefault(model.id_to_piece(i), len(vocabulary))
    vocabulary[">>en<<"] = len(vocabulary)
    vocabulary["<pad>"] = len(vocabulary)
    (folder / "vocab.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    files = {"source_spm": folder / "source.model", "target_spm": folder / "target.model"}
    theirs = transformers.MarianTokenizer(
        vocab=str(folder / "vocab.json"), source_lang="es", target_lang="en",
        **{k: str(v) for k, v in files.items()},
    )  # fmt: skip
    specials = Specials(
        theirs.pad_token_id, theirs.eos_token_id, theirs.unk_token_id, theirs.pad_token_id
    )
    ours = MarianTokenizer(files["source_spm"], files["target_spm"], vocabulary, specials)
    return ours, theirs


@pytest.fixture(scope="module")
def m2m100(tmp_path_factory):
    folder = tmp_path_factory.mktemp("m2m100")
    trained_spm(texts("es") + texts("en"), folder / "sentencepiece", "bpe", 500)
    model = spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.model"))
    vocabulary = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(model.get_piece_size()):
        vocabulary.setdefault(model.id_to_piece(i), len(vocabulary))
    (folder / "vocab.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    codes = transformers.models.m2m_100.tokenization_m2m_100.FAIRSEQ_LANGUAGE_CODES["m2m100"]
    theirs = transformers.M2M100Tokenizer(  # language tokens special, as a model's config says
        str(folder / "vocab.json"),
        str(folder / "sentencepiece.model"),
        src_lang="es",
        tgt_lang="en",
        additional_special_tokens=[f"__{code}__" for code in codes],
    )
    languages = {code: theirs.get_lang_id(code) for code in theirs.lang_code_to_id}
    specials = Specials(
        theirs.pad_token_id,
        theirs.eos_token_id,
        theirs.unk_token_id,
        theirs.eos_token_id,
        theirs.bos_token_id,
    )
    ours = M2M100Tokenizer(folder / "sentencepiece.model", vocabulary, specials, languages)
    return ours, theirs


def random_ids(vocab_size: int, seed: int, count: int = 200) -> list[list[int]]:
    chooser = random.Random(seed)
    return [
        [chooser.randrange(vocab_size) for _ in range(chooser.randint(1, 30))] for _ in range(count)
    ]


def test_marian_encodes_every_text_as_its_own_tokenizer(marian):
    ours, theirs = marian
    for text in texts("es") + ODD:
        assert ours.encode(text) + [theirs.eos_token_id] == theirs(text)["input_ids"], text


def test_marian_decodes_every_target_as_its_own_tokenizer(marian):
    ours, theirs = marian
    for text in texts("en") + ODD:
        ids = theirs(text_target=text)["input_ids"]
        assert ours.encode_target(text) + [theirs.eos_token_id] == ids, text
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True), text
    for ids in random_ids(ours.vocab_size, seed=1):
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True), ids
    assert ours.pieces(theirs("Hola")["input_ids"]) == theirs.convert_ids_to_tokens(
        theirs("Hola")["input_ids"]
    )


def test_m2m100_encodes_with_the_source_language_token(m2m100):
    ours, theirs = m2m100
    for text in texts("es") + ODD:
        assert ours.encode(text, "es") + [theirs.eos_token_id] == theirs(text)["input_ids"], text
    assert ours.language_id("en") == theirs.get_lang_id("en")
    with pytest.raises(KeyError):
        ours.language_id("tlh")


def test_m2m100_decodes_as_its_own_tokenizer_dropping_language_tokens(m2m100):
    ours, theirs = m2m100
    for text in texts("en") + ODD:
        ids = theirs(text_target=text)["input_ids"]
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True), text
    size = max(ours.languages.values()) + 1
    for ids in random_ids(size, seed=2):
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True), ids


def test_a_version_reads_the_tokenizer_its_manifest_declares(tmp_path, m2m100):
    """read_tokenizer: the preprocessor's type picks the class, its files the models."""
    from types import SimpleNamespace

    from service.runtime.hf_tokenizers import read_tokenizer

    ours, _ = m2m100
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    (folder / "vocab.json").write_text(json.dumps(dict(ours.encoder)), encoding="utf-8")
    (folder / "sp.model").write_bytes(ours._sp.serialized_model_proto())
    ids = {"pad": 1, "bos": 2, "eos": 2, "unk": 3}
    manifest = {
        "preprocessor": {"type": "m2m100", "model": "tokenizer/sp.model",
                         "vocabulary": "tokenizer/vocab.json"},
        "special_tokens": {k: {"id": v, "piece": ""} for k, v in ids.items()},
        "languages": {"tokens": dict(ours.languages)},
    }  # fmt: skip
    read = read_tokenizer(SimpleNamespace(manifest=manifest, directory=tmp_path))
    assert isinstance(read, M2M100Tokenizer)
    for text in texts("es", 50):
        assert read.encode(text, "es") == ours.encode(text, "es")
    manifest["preprocessor"] = {"type": "wordpiece"}
    with pytest.raises(Exception, match="unknown preprocessor type 'wordpiece'"):
        read_tokenizer(SimpleNamespace(manifest=manifest, directory=tmp_path))
