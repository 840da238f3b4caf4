"""The modern translator's mix of the Bible, catalog and back-translated pairs."""

from __future__ import annotations

from models.corpus import read_split
from models.modern import (
    DEV_PAIRS,
    EXPRESSION_REPEAT,
    LEXICON_REPEAT,
    PEOPLES_REPEAT,
    PHRASE_REPEAT,
    SYNTHETIC_TAG,
    TEST_PARTS,
    build_modern_data,
    modern_peoples,
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
    verse = ("Y los Judíos y los Griegos", "And the Jews and the Greeks")
    _split(source, "train", [("En el principio", "In the beginning"), verse])
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
    assert train.count(verse) == 1
    assert train.count(("Y los judíos y los griegos", verse[1])) == PEOPLES_REPEAT > 1
    assert train.count(("Tengo hambre.", "I am hungry.")) == EXPRESSION_REPEAT > 1
    assert train.count(("tenedor", "fork")) == LEXICON_REPEAT > 1
    assert train.count(("Necesito un tenedor.", "I need a fork.")) == PHRASE_REPEAT > 1
    assert len(dev) == 1 + DEV_PAIRS and not set(dev) & set(train)
    repeated = 2 * LEXICON_REPEAT + PHRASE_REPEAT + EXPRESSION_REPEAT
    assert counts["train"] == {
        "bible": 2,
        "bible-peoples": PEOPLES_REPEAT,
        "catalogs": 40,
        "synthetic": 1,
        "lexicon": 2 * LEXICON_REPEAT,
        "phrases": PHRASE_REPEAT,
        "expressions": EXPRESSION_REPEAT,
        "total": 43 + PEOPLES_REPEAT + repeated,
    }
    assert counts["test"] == dict.fromkeys(TEST_PARTS, 1)


def test_peoples_named_by_the_bible_are_written_lower_case_where_no_sentence_opens():
    assert modern_peoples("¿Dónde está el Rey de los Judíos, que ha nacido?") == (
        "¿Dónde está el Rey de los judíos, que ha nacido?"
    )
    assert modern_peoples("Judíos y Gentiles, Fariseos; Levitas") == (
        "Judíos y gentiles, fariseos; levitas"
    )  # the first word keeps the capital every sentence gives it
    # a land is still a name; a person's name is not a people
    assert (
        modern_peoples("los reyes de Asiria y los Asirios") == "los reyes de Asiria y los asirios"
    )
    assert modern_peoples("vino Judas á Jerusalem") == "vino Judas á Jerusalem"


def test_the_synthetic_tag_is_one_piece_of_the_tokenizer(tmp_path):
    from models.tokenizer import train_tokenizer

    lines = [f"{SYNTHETIC_TAG} me gustan los gatos", "I like cats", "hola mundo"] * 100
    tokenizer = train_tokenizer(
        lines, tmp_path / "t.model", vocab_size=280, symbols=(SYNTHETIC_TAG,)
    )
    pieces = tokenizer.pieces(tokenizer.encode(f"{SYNTHETIC_TAG} me gustan"))
    assert SYNTHETIC_TAG in pieces
