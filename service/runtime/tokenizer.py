"""The SentencePiece tokenizer as the runtime uses it (no torch).

Ids 0-3 are fixed for every model: `<blank>` (padding), `<s>`, `</s>`, `<unk>`, the order and
spelling CTranslate2 vocabularies use too. Text is NFC-normalised before encoding; the model
itself normalises nothing else, so decoding returns what was encoded.
"""

from __future__ import annotations

import functools
import unicodedata
from pathlib import Path

import sentencepiece as spm

from service.runtime.graphs import SpecialTokens

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_TOKENS = SpecialTokens(PAD_ID, BOS_ID, EOS_ID, UNK_ID)  # what exported models declare
SPECIAL_PIECES = ("<blank>", "<s>", "</s>", "<unk>")


# what is never read: invisible characters that carry nothing to translate (a byte order
# mark, a zero-width space, a soft hyphen, a word joiner, bidirectional marks) and control
# characters other than tab and line breaks. A model never saw them in training, and reads
# them as bytes it makes words of ("\ufeffBuenos días." came out "restrictionekfully-Buenos
# days."); joiners inside words (U+200C, U+200D) are kept: some scripts spell with them
INVISIBLE = dict.fromkeys(
    [
        *range(0x00, 0x09),
        0x0B,
        0x0C,
        *range(0x0E, 0x20),
        *range(0x7F, 0xA0),
        0x00AD,
        0x200B,
        0x200E,
        0x200F,
        *range(0x202A, 0x202F),
        0x2060,
        *range(0x2066, 0x206A),
        0xFEFF,
    ]
)


def visible(text: str) -> str:
    """`text` without the characters of INVISIBLE: what a tokenizer reads."""
    return text.translate(INVISIBLE)


class Tokenizer:
    """Text to ids and back for one SentencePiece model file."""

    def __init__(self, model_file: str | Path):
        """OSError where `model_file` cannot be read, RuntimeError where it is no
        SentencePiece model, ValueError where its special pieces are not SPECIAL_PIECES."""
        self.model_file = Path(model_file)
        # read here, not by SentencePiece, which opens no path that is not UTF-8 (a folder
        # named in Latin-1): Python opens every path the system has
        self._sp = spm.SentencePieceProcessor(model_proto=self.model_file.read_bytes())
        pieces = tuple(self._sp.id_to_piece(i) for i in range(len(SPECIAL_PIECES)))
        if pieces != SPECIAL_PIECES:
            raise ValueError(f"{model_file}: special pieces {pieces}, expected {SPECIAL_PIECES}")

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    @property
    def unknown_id(self) -> int:
        """What a character the vocabulary lacks becomes: `<unk>`."""
        return SPECIAL_PIECES.index("<unk>")

    def encode(self, text: str) -> list[int]:
        """Token ids without `<s>` or `</s>`."""
        return self._sp.encode(unicodedata.normalize("NFC", visible(text)))

    def encode_target(self, text: str) -> list[int]:
        """Target ids (a prefix, a scored translation): one vocabulary for both sides."""
        return self.encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """One text at a time: SentencePiece's list form starts a thread pool on every call,
        about 20x the cost of encoding a sentence (the server's front encodes every request)."""
        return [self.encode(t) for t in texts]

    def decode(self, ids: list[int]) -> str:
        """Text from ids; special ids are dropped."""
        return self._sp.decode([i for i in ids if i > UNK_ID or i == UNK_ID])

    def pieces(self, ids: list[int]) -> list[str]:
        """The piece of each id (IndexError for an id outside the vocabulary, as
        SentencePiece's own): a lookup each, a fraction of its call per id."""
        if len(ids) and min(ids) < 0:
            raise IndexError(f"piece id {min(ids)} is out of range")
        pieces = self._pieces
        return [pieces[i] for i in ids]

    def vocabulary(self) -> list[str]:
        """Every piece, in id order."""
        return list(self._pieces)

    @functools.cached_property
    def _pieces(self) -> tuple[str, ...]:
        return tuple(self._sp.id_to_piece(i) for i in range(self.vocab_size))
