"""The captions' grammar (models.scenes.caption_grammar): every caption the scenes are drawn
with is in it, none of its outputs can hold an article twice or a word twice in a row, and a
checkpoint carries it in words that the export turns into token ids."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from models.caption_data import read_glyphs, read_scenes
from models.checkpoint import GRAMMAR, checkpoint_grammar, save_grammar
from models.scenes import caption_grammar
from service.runtime.grammar import Grammar
from service.runtime.tokenizer import Tokenizer

ARTICLES = {"a", "an"}


@pytest.fixture(scope="module")
def grammar_words(captioner_data) -> dict:
    return caption_grammar(read_glyphs(captioner_data))


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    from helpers import SHIPPED_CAPTIONER

    return Tokenizer(SHIPPED_CAPTIONER / "tokenizer.model")


def test_every_caption_of_every_split_is_in_the_grammar(captioner_data, grammar_words, tokenizer):
    grammar = Grammar.from_manifest(
        {
            "patterns": grammar_words["patterns"],
            "slots": {
                slot: [tokenizer.encode(p) for p in phrases]
                for slot, phrases in grammar_words["slots"].items()
            },
        }
    )
    for split in ("train", "dev", "test"):
        scenes, _ = read_scenes(captioner_data, split)
        for scene in scenes[:3000]:
            assert grammar.accepts(tokenizer.encode(scene.caption)), scene.caption
    assert not grammar.accepts(tokenizer.encode("a a cat at the top"))


def test_no_output_can_double_a_word_or_an_article(grammar_words):
    slots = {name: [p.split() for p in phrases] for name, phrases in grammar_words["slots"].items()}
    for phrases in slots.values():
        for words in phrases:
            assert all(a != b for a, b in pairwise(words)), words
            assert not any(a in ARTICLES and b in ARTICLES for a, b in pairwise(words)), words
    for pattern in grammar_words["patterns"]:
        for left, right in pairwise(pattern):
            ends = {words[-1] for words in slots[left]}
            starts = {words[0] for words in slots[right]}
            assert not ends & starts, (left, right, ends & starts)
            assert not (ends & ARTICLES and starts & ARTICLES), (left, right)


def test_a_checkpoint_grammar_becomes_token_ids(tmp_path, grammar_words, tokenizer):
    save_grammar(grammar_words, tmp_path)
    ids = checkpoint_grammar(tmp_path, tokenizer)
    assert ids["patterns"] == grammar_words["patterns"]
    first = grammar_words["slots"]["thing"][0]
    assert tokenizer.decode(ids["slots"]["thing"][0]) == first
    assert checkpoint_grammar(tmp_path / "elsewhere", tokenizer) is None
    words = json.loads((tmp_path / GRAMMAR).read_text())
    words["slots"]["thing"].append("a quokka")
    (tmp_path / GRAMMAR).write_text(json.dumps(words))
    with pytest.raises(ValueError, match="'a quokka' is not in the tokenizer's vocabulary"):
        checkpoint_grammar(tmp_path, tokenizer)
