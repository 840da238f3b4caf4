"""The model repository: `<root>/<model>/<version>/` with graphs, tokenizer and manifest.

    manifest.json        format version, model kind and config, interface (graphs, memory,
                         state), special tokens, limits, preprocessor, files with sha256,
                         versions, parity
    tokenizer.model      SentencePiece model
    golden.json          a few inputs with their expected tokens, re-checked at start-up
    <variant>/encoder.onnx, <variant>/decoder.onnx     variant: fp32, int8, fp16
    <variant>/lean_decoder.onnx   optional: the step without its attention output (built
                                  translators), run when no row keeps its alignment
    int8/lean_decoder_one_row.onnx    optional: its form for steps of one row
    <variant>/weights.data        the weights of the variant's graphs, each once (a graph
                                  reads its own at their offsets; onnxruntime maps the file)

The runtime refuses a manifest whose format version it does not know, whose layout is not
the one it reads, whose files do not match their hashes or which names a graph or op it does
not hash. A worker refuses a version whose directory no longer holds the manifest the front
verified (`unchanged`: replaced in place since, or removed).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from service.runtime.errors import ModelRepositoryError

# 2: interface, special tokens, limits, preprocessor; 3: ops of any rank; 4: search ops;
# 5: lean steps (the step less its attention, the search folded in) and their one-row form;
# 6: the steps with their cache written in place (in_place_*); 7: the join op's pads are
# inputs (the host computes them: no shape arithmetic in the graph, no Memcpy on CUDA). A
# version of 7 may also ship the `scatter` op (the static step then writes a request's memory
# tensors into any slots in one run) and the `place` op (one run a run of consecutive slots);
# without either they are placed a tensor at a time.
FORMAT_VERSION = 7
MANIFEST = "manifest.json"
GOLDEN = "golden.json"
TOKENIZER = "tokenizer.model"


def manifests(root: Path) -> list[Path]:
    """The manifest of every `<model>/<version>/` under `root`, in order. Hidden names (a
    leading ".") are left out: a version is published by writing it aside under such a name
    (`translator/.incoming-2`) and renaming it into place, and is not read half written."""
    return [
        path
        for path in sorted(root.glob(f"*/*/{MANIFEST}"))
        if not (path.parent.name.startswith(".") or path.parent.parent.name.startswith("."))
    ]


def revision(manifest: dict) -> str:
    """A short digest of a manifest, which hashes every file of its version: two contents
    published under one model name and version (one replaced in place) differ in it."""
    text = json.dumps(manifest, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class ModelVersion:
    """A verified model version: where it lies and what its manifest says."""

    directory: Path
    manifest: dict

    @property
    def name(self) -> str:
        return self.manifest["model"]["name"]

    @property
    def version(self) -> str:
        return self.manifest["model"]["version"]

    @property
    def config(self) -> dict:
        return self.manifest["model"]["config"]

    @functools.cached_property
    def revision(self) -> str:
        return revision(self.manifest)

    def graph(self, variant: str, name: str) -> Path:
        graphs = self.manifest["graphs"]
        if variant not in graphs:
            raise ModelRepositoryError(f"{self.directory}: no {variant} variant ({sorted(graphs)})")
        return self.directory / graphs[variant][name]

    def has_graph(self, variant: str, name: str) -> bool:
        return name in self.manifest["graphs"].get(variant, {})

    def has_op(self, name: str, dtype: str) -> bool:
        return dtype in self.manifest.get("ops", {}).get(name, {})

    def op(self, name: str, dtype: str) -> Path:
        """A helper graph (see export.ops), e.g. op("gather", "float32")."""
        try:
            return self.directory / self.manifest["ops"][name][dtype]
        except KeyError as error:
            raise ModelRepositoryError(f"{self.directory}: no {name} op for {dtype}") from error

    @property
    def tokenizer_file(self) -> Path:
        return self.directory / self.manifest["tokenizer"]

    def golden(self) -> list[dict]:
        """The golden set written by the parity certificate (export.certify)."""
        try:
            return json.loads((self.directory / GOLDEN).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise ModelRepositoryError(
                f"{self.directory}: no readable golden set ({GOLDEN}): {error}; a version is "
                "served only once its parity certificate is written"
            ) from error


def read_manifest(directory: Path):
    """The JSON of `directory`'s manifest, not yet checked; ModelRepositoryError when it
    cannot be read."""
    try:
        return json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeDecodeError among them
        raise ModelRepositoryError(f"{directory}: unreadable manifest: {error}") from error


def unchanged(version: ModelVersion) -> None:
    """Raises ModelRepositoryError unless `version`'s directory still holds the manifest it
    was verified from. A directory replaced in place since (or removed) holds files other
    than those hashed, which a worker must not load under the old manifest."""
    found = revision(read_manifest(version.directory))
    if found != version.revision:
        raise ModelRepositoryError(
            f"{version.directory}: replaced since it was verified (its manifest's revision "
            f"is {found}, not {version.revision})"
        )


def verify(directory: Path) -> ModelVersion:
    """Reads and checks a manifest; raises ModelRepositoryError listing every problem."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if version != FORMAT_VERSION:
        raise ModelRepositoryError(
            f"{directory}: manifest format version {version!r}, this runtime reads {FORMAT_VERSION}"
        )
    problems = layout_problems(manifest)
    if problems:  # a manifest of the right version but another shape: no file is looked at
        raise ModelRepositoryError(f"{directory}: " + "; ".join(problems))
    for relative, expected in sorted(manifest.get("files", {}).items()):
        path = directory / relative
        if not path.is_file():
            problems.append(f"{relative}: missing")
        elif sha256(path) != expected:
            problems.append(f"{relative}: sha256 does not match the manifest")
    listed = set(manifest.get("files", {}))
    named = [
        f
        for table in ("graphs", "ops")
        for v in manifest.get(table, {}).values()
        for f in v.values()
    ]
    problems += [f"{f}: not hashed in the manifest" for f in named if f not in listed]
    if problems:
        raise ModelRepositoryError(f"{directory}: " + "; ".join(problems))
    return ModelVersion(directory, manifest)


def _texts(value, depth: int) -> bool:
    """Whether `value` is a JSON object of text (`depth` 1) or of such objects (2)."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return False
    return all(_texts(v, depth - 1) if depth > 1 else isinstance(v, str) for v in value.values())


def layout_problems(manifest: dict) -> list[str]:
    """What is wrong with the parts of a manifest every model version has (its model, files,
    graphs, helper ops, tokenizer and certificate), each named; [] when they have the layout
    this runtime reads."""
    problems = []
    model = manifest.get("model")
    if not isinstance(model, dict) or not all(
        isinstance(model.get(k), str) for k in ("name", "version", "kind")
    ):
        problems.append("model: an object with the texts name, version and kind expected")
    for key, depth, what in (
        ("files", 1, "path: sha256"),
        ("graphs", 2, "variant: {graph: path}"),
        ("ops", 2, "op: {dtype: path}"),
    ):
        if not _texts(manifest.get(key, {}), depth):
            problems.append(f"{key}: an object of {what} expected")
    if not isinstance(manifest.get("tokenizer", ""), str):
        problems.append("tokenizer: a path expected")
    parity = manifest.get("parity") or {}
    graphs = parity.get("graphs", {}) if isinstance(parity, dict) else None
    if not isinstance(graphs, dict) or not all(isinstance(g, dict) for g in graphs.values()):
        problems.append("parity: a certificate with an object per variant's graphs expected")
    return problems


def write_manifest(directory: Path, manifest: dict) -> Path:
    """Hashes every file below `directory` (but the manifest) into the manifest and writes it."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = {
        "format_version": FORMAT_VERSION,
        **manifest,
        "files": {str(p.relative_to(directory)): sha256(p) for p in files},
    }
    path = directory / MANIFEST
    path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
