"""Training the joint Spanish-English SentencePiece model (the runtime side:
service.runtime.tokenizer).

A joint vocabulary lets the encoder embedding, the decoder embedding and the output projection
share one matrix. 8,000 pieces: the output projection is the largest single cost of a decode
step (vocab x d_model multiply-adds per token), and at 8k it costs about as much as the three
decoder layers together, while verses still average about 1.3 pieces a word.
"""

from __future__ import annotations

import io
import unicodedata
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from service.runtime.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_PIECES, UNK_ID, Tokenizer

DEFAULT_VOCAB_SIZE = 8000


def train_tokenizer(
    lines: Iterable[str],
    model_file: Path,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    model_type: str = "unigram",
    symbols: tuple[str, ...] = (),
) -> Tokenizer:
    """Trains a SentencePiece model on `lines` and writes it to `model_file`.

    unigram (the translator): byte fallback makes every string encodable (emoji, rare
    scripts): what the pieces do not cover is spelled in bytes, so decode(encode(text)) ==
    text for NFC text with single spaces.
    word (the captioner): one piece per word of a closed vocabulary; `vocab_size` is the
    number of distinct words plus the four special pieces.
    `symbols` are pieces of their own, never split (a tag such as models.modern's `<bt>`).
    """
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=(unicodedata.normalize("NFC", line) for line in lines),
        model_writer=model,
        model_type=model_type,
        vocab_size=vocab_size,
        character_coverage=1.0,
        byte_fallback=model_type != "word",
        normalization_rule_name="identity",
        pad_id=PAD_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        unk_id=UNK_ID,
        pad_piece=SPECIAL_PIECES[PAD_ID],
        bos_piece=SPECIAL_PIECES[BOS_ID],
        eos_piece=SPECIAL_PIECES[EOS_ID],
        unk_piece=SPECIAL_PIECES[UNK_ID],
        num_threads=2,
        minloglevel=2,
        **({"user_defined_symbols": list(symbols)} if symbols else {}),
    )
    model_file.parent.mkdir(parents=True, exist_ok=True)
    model_file.write_bytes(model.getvalue())
    return Tokenizer(model_file)
