"""The modern translator's mix of the Bible, catalog and back-translated pairs."""

from __future__ import annotations

from models.corpus import read_split
from models.modern import (
    DEV_PAIRS,
    EXPRESSION_REPEAT,
    LEXICON_REPEAT,
    PHRASE_REPEAT,
    SYNTHETIC_TAG,
    TEST_PARTS,
    build_modern_data,
)


def _split(directory, name, pairs):
    for side, language in ((0, "es"), (1, "en")):
        (directory / f"{name}.{language}").write_text(
            "".join(p[side] + "\n" for p in pairs), encoding="utf-8"
        )


def test_the_mix_tags_synthetic_sources_and_keeps_the_dev_slice_out_of_train(tmp_path):
    source = tmp_path / "translator"
    source.mkdir()
    catalogs = [(f"abrir archivo {i}", f"open file {i}") for i in range(DEV_PAIRS + 40)]
    _split(source, "catalogs", catalogs)
    _split(source, "synthetic", [("me gustan los gatos", "I like cats.")])
    _split(source, "lexicon", [("tenedor", "fork"), ("traer", "bring")])
    _split(source, "phrases", [("Necesito un tenedor.", "I need a fork.")])
    _split(source, "expressions", [("Tengo hambre.", "I am hungry.")])
    _split(source, "train", [("En el principio", "In the beginning")])
    _split(source, "dev", [("Y dijo Dios", "And God said")])
    for part in TEST_PARTS:
        _split(source, part, [(f"{part} es", f"{part} en")])
    counts = build_modern_data(source, tmp_path / "modern")
    train = list(zip(*read_split(tmp_path / "modern", "train"), strict=True))
    dev = list(zip(*read_split(tmp_path / "modern", "dev"), strict=True))
    assert (f"{SYNTHETIC_TAG} me gustan los gatos", "I like cats.") in train
    assert ("En el principio", "In the beginning") in train
    assert ("tenedor", "fork") in train  # dictionary words are human-made: not tagged
    assert ("Necesito un tenedor.", "I need a fork.") in train
    assert train.count(("Tengo hambre.", "I am hungry.")) == EXPRESSION_REPEAT > 1
    assert train.count(("tenedor", "fork")) == LEXICON_REPEAT > 1
    assert train.count(("Necesito un tenedor.", "I need a fork.")) == PHRASE_REPEAT > 1
    assert len(dev) == 1 + DEV_PAIRS and not set(dev) & set(train)
    repeated = 2 * LEXICON_REPEAT + PHRASE_REPEAT + EXPRESSION_REPEAT
    assert counts["train"] == {
        "bible": 1, "catalogs": 40, "synthetic": 1, "lexicon": 2 * LEXICON_REPEAT,
        "phrases": PHRASE_REPEAT, "expressions": EXPRESSION_REPEAT, "total": 42 + repeated,
    }  # fmt: skip
    assert counts["test"] == dict.fromkeys(TEST_PARTS, 1)


def test_the_synthetic_tag_is_one_piece_of_the_tokenizer(tmp_path):
    from models.tokenizer import train_tokenizer

    lines = [f"{SYNTHETIC_TAG} me gustan los gatos", "I like cats", "hola mundo"] * 100
    tokenizer = train_tokenizer(lines, tmp_path / "t.model", vocab_size=280,
                                symbols=(SYNTHETIC_TAG,))  # fmt: skip
    pieces = tokenizer.pieces(tokenizer.encode(f"{SYNTHETIC_TAG} me gustan"))
    assert SYNTHETIC_TAG in pieces
