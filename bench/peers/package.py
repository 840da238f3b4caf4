"""This repository's translator as an Argos Translate package, the form LibreTranslate loads.

What argos-translate-lt 1.12.1 (LibreTranslate 1.9.6's) reads from a package directory
(`argostranslate.package.Package`, `argostranslate.translate.PackageTranslation`):
`metadata.json` (from_code, to_code, names, type "translate", versions), `model/` (a
CTranslate2 model directory: model.bin, config.json, the vocabulary), `sentencepiece.model`
(its tokenizer: pieces in, pieces out, decoded with `decode_pieces`), and a sentence splitter:
`minisbd/*.onnx`, `stanza/` or `spacy/`, the one its `ARGOS_CHUNK_TYPE` asks for. Without one
in the package it downloads one at run time (MiniSBD's ONNX model from GitHub, or spaCy's
`xx_sent_ud_sm`), so the package carries `spacy/`: a blank spaCy Spanish pipeline (its
tokenizer alone), to which argos adds spaCy's rule-based `sentencizer` on loading
(`ARGOS_CHUNK_TYPE=SPACY`). The weights are converted by `bench.ctranslate2_convert` (int8,
as LibreTranslate's own packages ship); the SentencePiece model is the checkpoint's own.

A second package (type "sbd", no model: the same splitter) sits beside it: LibreTranslate's
start-up fetches the package index and MiniSBD's models whenever fewer than two packages are
installed (`libretranslate.init.check_and_install_models`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

PACKAGE_VERSION = "1.0"
ARGOS_VERSION = "1.12.1"
TRANSLATE = "translate-es_en"
SPLITTER = "sbd-es"
MODEL_FILES = ("model.bin", "config.json")
METADATA = {
    "package_version": PACKAGE_VERSION,
    "argos_version": ARGOS_VERSION,
    "from_code": "es",
    "from_name": "Spanish",
    "to_code": "en",
    "to_name": "English",
    "type": "translate",
    "links": [],
}
# a blank spaCy pipeline written by the virtual environment's spaCy
BLANK_SPACY = "import spacy, sys; spacy.blank(sys.argv[1]).to_disk(sys.argv[2])"


def build(
    checkpoint: Path, packages: Path, venv_python: Path | None, quantization: str = "int8"
) -> Path:
    """Writes the es->en package (and the splitter package) under `packages`; the package's
    directory. `venv_python`: the Python with spaCy that writes the blank pipelines (None:
    the packages carry none, for a layout check without LibreTranslate)."""
    from bench.ctranslate2_convert import convert

    checkpoint, packages = Path(checkpoint), Path(packages)
    root = packages / TRANSLATE
    if root.exists():
        shutil.rmtree(root)
    convert(checkpoint, root / "model", quantization)
    shutil.copyfile(checkpoint / "tokenizer.model", root / "sentencepiece.model")
    metadata = dict(METADATA, quantization=quantization, checkpoint=checkpoint.name)
    (root / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    (root / "README.md").write_text(
        "attnserve's Spanish -> English translator (models/checkpoints/translator), "
        f"CTranslate2 {quantization}, with its SentencePiece model and a blank spaCy Spanish "
        "pipeline as its sentence splitter; built by bench/peers/package.py for benchmarks.\n"
    )
    splitter = packages / SPLITTER
    if splitter.exists():
        shutil.rmtree(splitter)
    splitter.mkdir(parents=True)
    (splitter / "metadata.json").write_text(
        json.dumps(
            {
                "package_version": PACKAGE_VERSION,
                "argos_version": ARGOS_VERSION,
                "type": "sbd",
                "from_codes": ["es"],
                "links": [],
            },
            indent=2,
        )
        + "\n"
    )
    if venv_python is not None:
        for directory in (root / "spacy", splitter / "spacy"):
            subprocess.run([str(venv_python), "-c", BLANK_SPACY, "es", str(directory)], check=True)
    return root


def archive(root: Path, out: Path) -> Path:
    """The package directory as a `.argosmodel` (a zip of the directory, itself at its top),
    what `argospm install` and `argostranslate.package.install_from_path` take."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                zipped.write(path, Path(root.name) / path.relative_to(root))
    return out


def problems(root: Path, splitter: bool = True) -> list[str]:
    """What an installed package directory lacks for argos-translate-lt to load it as a
    translation with its own sentence splitter (empty: nothing)."""
    found = []
    metadata_path = root / "metadata.json"
    if not metadata_path.is_file():
        return ["metadata.json: missing"]
    metadata = json.loads(metadata_path.read_text())
    for key in ("from_code", "to_code", "package_version", "argos_version"):
        if not metadata.get(key):
            found.append(f"metadata.json: no {key}")
    if metadata.get("type", "translate") != "translate":
        found.append(f"metadata.json: type {metadata['type']!r}, not 'translate'")
    for name in MODEL_FILES:
        if not (root / "model" / name).is_file():
            found.append(f"model/{name}: missing")
    vocabularies = list((root / "model").glob("*vocabulary*"))
    if not vocabularies:
        found.append("model/: no vocabulary file")
    if not (root / "sentencepiece.model").is_file():
        found.append("sentencepiece.model: missing")
    if splitter and not (root / "spacy" / "config.cfg").is_file():
        found.append("spacy/: no spaCy pipeline (config.cfg)")
    return found
