"""The shipped SentencePiece model: special ids and lossless round trips."""

from __future__ import annotations

import os
import re
import shutil
import unicodedata

import pytest
from helpers import SHIPPED_TRANSLATOR

from service.runtime.tokenizer import SPECIAL_PIECES, Tokenizer

EDGE_CASES = [
    "",
    "Yo soy de Canadá.",
    "¿Me puedes traer un tenedor?",
    "¡Señor! año, niño, pingüino, ÑANDÚ",
    "Emoji: 😀🇨🇦👩‍👩‍👧 and ☃",
    "中文 and Ελληνικά and עברית",
    "tab\tand  double  spaces",
]


@pytest.fixture(scope="module")
def tokenizer(shipped_translator) -> Tokenizer:
    return shipped_translator[1]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_round_trip(tokenizer, text):
    ids = tokenizer.encode(text)
    assert all(0 <= i < tokenizer.vocab_size for i in ids)
    expected = re.sub(" +", " ", text).strip(" ")  # SentencePiece folds runs of spaces
    assert tokenizer.decode(ids) == expected
    assert (ids == []) == (text == "")


def test_nfd_input_is_normalised_to_nfc(tokenizer):
    decomposed = unicodedata.normalize("NFD", "Canadá ñ")
    assert tokenizer.encode(decomposed) == tokenizer.encode("Canadá ñ")
    assert tokenizer.decode(tokenizer.encode(decomposed)) == "Canadá ñ"


def test_invisible_and_control_characters_are_not_read(tokenizer):
    """A byte order mark, a zero-width space, a soft hyphen, bidirectional marks and control
    characters (pasted from the web, a word processor or a file) are read as nothing, where
    the model made words of their bytes; joiners, tabs and line breaks are read."""
    clean = "Buenos días, amigo.\tAdiós."
    dirty = "\ufeffBue\u00adnos\u200b días,\x01 \u200eamigo\u2069.\tAdiós.\x7f"
    assert tokenizer.encode(dirty) == tokenizer.encode(clean)
    assert tokenizer.encode_target(dirty) == tokenizer.encode_target(clean)
    assert tokenizer.encode("mi\u200dmi") != tokenizer.encode("mimi")  # a joiner is read
    assert tokenizer.encode("a\nb") != tokenizer.encode("ab")


def test_special_pieces_are_ctranslate2_compatible(tokenizer):
    assert tuple(tokenizer.vocabulary()[:4]) == SPECIAL_PIECES
    assert tokenizer.decode([1, *tokenizer.encode("hola"), 2, 0, 0]) == "hola"


def test_common_words_are_single_pieces(tokenizer):
    for word in ("▁Dios", "▁the", "▁tierra", "▁said"):
        assert tokenizer.pieces(tokenizer.encode(word.lstrip("▁"))) == [word]


def test_a_model_file_without_the_special_layout_is_refused(tmp_path):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["hola mundo"] * 50 + ["hello world"] * 50),
        model_prefix=str(tmp_path / "plain"),
        vocab_size=16,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="special pieces"):
        Tokenizer(tmp_path / "plain.model")


def test_a_model_in_a_folder_whose_name_is_not_utf8_is_read(tmp_path, tokenizer):
    """SentencePiece takes a path as UTF-8 text only: one with a folder named in Latin-1
    (Python keeps such bytes as surrogates) was a TypeError."""
    folder = tmp_path / os.fsdecode(b"modelo-\xff")
    folder.mkdir()
    shutil.copy(SHIPPED_TRANSLATOR / "tokenizer.model", folder / "tokenizer.model")
    read = Tokenizer(folder / "tokenizer.model")
    assert read.encode(EDGE_CASES[2]) == tokenizer.encode(EDGE_CASES[2])
    with pytest.raises(FileNotFoundError):
        Tokenizer(folder / "missing.model")
