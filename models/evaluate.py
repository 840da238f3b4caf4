"""Scoring translations with sacreBLEU, for the model and for the Apertium baseline."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from sacrebleu.metrics import BLEU, CHRF

from models.packages import ensure_debian_packages

APERTIUM_PACKAGES = ("apertium", "apertium-eng-spa")


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """sacreBLEU BLEU and chrF with their signatures."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(list(hypotheses), [list(references)])
    chrf_score = chrf.corpus_score(list(hypotheses), [list(references)])
    return {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(references),
    }


def apertium_translate(texts: Sequence[str]) -> list[str]:
    """Apertium's rule-based spa-eng, one line in, one line out; unknown words unmarked (-u)."""
    ensure_debian_packages(APERTIUM_PACKAGES)
    if shutil.which("apertium") is None:
        raise RuntimeError("apertium is not installed (Debian package apertium-eng-spa)")
    # Newlines inside a text would break the line alignment; verses have none.
    joined = "\n".join(t.replace("\n", " ") for t in texts) + "\n"
    result = subprocess.run(
        ["apertium", "-u", "spa-eng"], input=joined, capture_output=True, text=True, check=True
    )
    lines = result.stdout.rstrip("\n").split("\n")
    if len(lines) != len(texts):
        raise RuntimeError(f"apertium returned {len(lines)} lines for {len(texts)} texts")
    return lines
