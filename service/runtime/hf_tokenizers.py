"""The tokenizers of Hugging Face translation models, torch-free and transformers-free, as
the models' own tokenizers encode and decode (tests hold each against `transformers`):

- Marian (OPUS-MT): a SentencePiece model for the source and one for the target, one shared
  vocabulary (`vocab.json`, piece -> id) that is not SentencePiece's own numbering; a piece
  the vocabulary lacks is `<unk>`; `</s>` ends a source; a `>>xx<<` prefix (a multilingual
  target's language) is a token of its own.
- M2M100, NLLB and mBART-50: one SentencePiece model, `vocab.json`, and a token per
  language (`__es__`, `spa_Latn`, `es_XX`) after the vocabulary; a source is `[language]
  pieces </s>`, and decoding starts from `</s> [target language]`.

Like the runtime's own Tokenizer, `encode` gives the ids without `</s>` (the translator
appends it) and `decode` drops special ids (every one the model's tokenizer drops: the
manifest's `dropped`, `<mask>` among them), takes out the spaces before punctuation where
the model's tokenizer does (`clean_up_spaces`), and strips the text's ends (where NLLB's own
tokenizer keeps the spaces word-start pieces alone leave); `pieces` names ids for alignments.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from service.runtime.tokenizer import visible

WORD = "\u2581"  # SentencePiece's word start, left in a decoded text by a lone piece


@dataclass(frozen=True)
class Specials:
    """The special ids of a vocabulary: padding, end, unknown, and the decoder's first id."""

    pad: int
    eos: int
    unk: int
    decoder_start: int
    bos: int | None = None  # M2M100's `<s>`: in the vocabulary, never in a sequence

    def ids(self) -> frozenset[int]:
        return frozenset({self.pad, self.eos, self.unk} | ({self.bos} - {None}))


def read_vocabulary(path: str | Path) -> dict[str, int]:
    with open(path, encoding="utf-8") as file:
        vocabulary = json.load(file)
    if not isinstance(vocabulary, dict):
        raise ValueError(f"{path}: a JSON object of piece -> id expected")
    return vocabulary


# what a Hugging Face tokenizer's `clean_up_tokenization_spaces` replaces, in its order
CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
            (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))  # fmt: skip


@dataclass(frozen=True)
class Decoding:
    """How the model's own tokenizer writes a text: the ids it drops beyond the specials
    (`<mask>`), and whether it takes out the spaces before punctuation."""

    dropped: frozenset[int] = frozenset()
    clean_up_spaces: bool = False

    @classmethod
    def from_preprocessor(cls, preprocessor: dict) -> Decoding:
        return cls(
            frozenset(int(i) for i in preprocessor.get("dropped", ())),
            bool(preprocessor.get("clean_up_spaces", False)),
        )

    def text(self, text: str) -> str:
        if self.clean_up_spaces:
            for spaced, kept in CLEAN_UP:
                text = text.replace(spaced, kept)
        return text


class _Vocabulary:
    """Pieces to ids and back through `vocab.json`, SentencePiece models for the text."""

    def __init__(
        self,
        vocabulary: dict[str, int],
        specials: Specials,
        extra: dict[str, int],
        decoding: Decoding = Decoding(),
    ):
        self.encoder = {**vocabulary, **extra}
        self.decoder = {i: piece for piece, i in self.encoder.items()}
        self.specials = specials
        self.decoding = decoding
        self.dropped = specials.ids() | frozenset(extra.values()) | decoding.dropped
        self.vocab_size = max(self.decoder) + 1

    @property
    def unknown_id(self) -> int:
        """What a piece the vocabulary lacks becomes: its unknown token."""
        return self.specials.unk

    def ids(self, pieces: list[str]) -> list[int]:
        unk = self.specials.unk
        return [self.encoder.get(piece, unk) for piece in pieces]

    def pieces(self, ids) -> list[str]:
        return [self.decoder.get(int(i), "<unk>") for i in ids]

    def vocabulary(self) -> list[str]:
        return [self.decoder.get(i, "") for i in range(self.vocab_size)]

    def decode(self, ids) -> str:
        """Target text from ids, as the model's tokenizer writes it: every id it drops
        dropped, the text's ends stripped, its spaces cleaned up where it does so."""
        kept = [
            piece
            for i, piece in zip(ids, self.pieces(ids), strict=True)
            if int(i) not in self.dropped
        ]
        return self.decoding.text(self._written(kept).strip())

    def _written(self, pieces: list[str]) -> str:
        """The text of target pieces, by the family's SentencePiece model."""
        raise NotImplementedError


def _language_code(text: str) -> tuple[list[str], str]:
    """([`>>xx<<`], the rest) of a text that starts with a language code, else ([], text)."""
    if text.startswith(">>") and (end := text.find("<<")) != -1:
        return [text[: end + 2]], text[end + 2 :]
    return [], text


class MarianTokenizer(_Vocabulary):
    """OPUS-MT's tokenizer: source pieces by `source.spm`, target text by `target.spm`."""

    def __init__(
        self,
        source_spm,
        target_spm,
        vocabulary: dict[str, int],
        specials: Specials,
        decoding: Decoding = Decoding(),
    ):
        super().__init__(vocabulary, specials, {}, decoding)
        self._source = spm.SentencePieceProcessor(model_file=str(source_spm))
        self._target = spm.SentencePieceProcessor(model_file=str(target_spm))

    def encode(self, text: str) -> list[int]:
        """Source ids, without `</s>`; a leading `>>xx<<` is one token."""
        code, text = _language_code(visible(text))
        return self.ids(code + self._source.encode(text, out_type=str))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def encode_target(self, text: str) -> list[int]:
        """Target ids, without `</s>` (a reference to score, a forced prefix)."""
        code, text = _language_code(visible(text))
        return self.ids(code + self._target.encode(text, out_type=str))

    def _written(self, pieces: list[str]) -> str:
        return self._target.decode_pieces(pieces).replace(WORD, " ")


class M2M100Tokenizer(_Vocabulary):
    """M2M100's, NLLB's and mBART-50's tokenizer: one SentencePiece model, language tokens
    after the vocabulary (`languages`: code -> id, as the model's tokenizer numbers them)."""

    def __init__(
        self,
        model_file,
        vocabulary: dict[str, int],
        specials: Specials,
        languages: dict[str, int],
        decoding: Decoding = Decoding(),
    ):
        known = set(vocabulary.values())  # NLLB's vocabulary holds its language tokens
        tokens = {f"__{code}__": i for code, i in languages.items() if i not in known}
        super().__init__(vocabulary, specials, tokens, decoding)
        self.dropped |= frozenset(languages.values())
        self.languages = dict(languages)
        self._sp = spm.SentencePieceProcessor(model_file=str(model_file))

    def language_id(self, code: str) -> int:
        """The id of a language's token; KeyError for a language the model lacks."""
        return self.languages[code]

    def encode(self, text: str, language: str | None = None) -> list[int]:
        """Source ids without `</s>`, after the source language's token when given."""
        prefix = [] if language is None else [self.language_id(language)]
        return prefix + self.ids(self._sp.encode(visible(text), out_type=str))

    def encode_batch(self, texts: list[str], language: str | None = None) -> list[list[int]]:
        return [self.encode(t, language) for t in texts]

    def encode_target(self, text: str) -> list[int]:
        return self.ids(self._sp.encode(visible(text), out_type=str))

    def _written(self, pieces: list[str]) -> str:
        return self._sp.decode(pieces)


def read_tokenizer(version):
    """The tokenizer a model version's manifest declares (`preprocessor.type`): our
    SentencePiece model (`sentencepiece`), or a Hugging Face model's (`marian`, `m2m100`)."""
    from service.runtime.errors import ModelRepositoryError
    from service.runtime.tokenizer import Tokenizer

    manifest, root = version.manifest, version.directory
    preprocessor = manifest.get("preprocessor", {})
    kind = preprocessor.get("type", "sentencepiece")
    if kind == "sentencepiece":
        return Tokenizer(version.tokenizer_file)
    if kind not in ("marian", "m2m100"):
        raise ModelRepositoryError(f"{root}: unknown preprocessor type {kind!r}")
    ids = {name: int(entry["id"]) for name, entry in manifest["special_tokens"].items()}
    vocabulary = read_vocabulary(root / preprocessor["vocabulary"])
    specials = Specials(ids["pad"], ids["eos"], ids["unk"], ids["bos"], vocabulary.get("<s>"))
    decoding = Decoding.from_preprocessor(preprocessor)
    if kind == "marian":
        return MarianTokenizer(
            root / preprocessor["source"], root / preprocessor["target"], vocabulary, specials,
            decoding,
        )  # fmt: skip
    languages = manifest.get("languages", {}).get("tokens", {})
    return M2M100Tokenizer(root / preprocessor["model"], vocabulary, specials, languages, decoding)
