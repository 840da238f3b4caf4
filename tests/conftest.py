"""Shared fixtures: the shipped translator and captioner, their data, their model repository
(exported once per session, with parity certificates); the gpu marker's skip."""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from helpers import (
    BUILT_REPOSITORY,
    CAPTIONER_DATA,
    ROOT,
    SHIPPED_CAPTIONER,
    SHIPPED_TRANSLATOR,
    TRANSLATOR_DATA,
)


@pytest.fixture(autouse=True)
def _torch_threads_kept():
    """A test that runs a command in process (a benchmark's main, a training run) may set
    torch's thread count for the process: it is set back after the test. A pytest-xdist
    worker left at two threads beside another worker spins both cores' OpenMP threads
    against each other for every later module (3.3x the CPU time of a module measured)."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch else None
    yield
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if threads is None:  # imported by the test: the thread count the suite runs with
        threads = int(os.environ.get("OMP_NUM_THREADS") or 0) or None
    if threads and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def translator_data() -> Path:
    """The corpus built from the Debian packages (built once when missing)."""
    from models.corpus import build_translator_data

    if not (TRANSLATOR_DATA / "test.es").exists():
        build_translator_data(TRANSLATOR_DATA)
    return TRANSLATOR_DATA


@pytest.fixture(scope="session")
def shipped_translator():
    """(model, tokenizer) of the trained translator shipped in the repository."""
    from models.checkpoint import load_checkpoint

    return load_checkpoint(SHIPPED_TRANSLATOR)


@pytest.fixture(scope="session")
def test_sentences(translator_data) -> list[str]:
    """The first 12 test sources that are one sentence each (the server decodes a text's
    sentences apart, so these are decoded whole, as a reference decodes them)."""
    from models.corpus import read_split
    from service.runtime.documents import split_text

    spanish, _ = read_split(translator_data, "test")
    return [s for s in spanish if len(split_text(s).sentences) == 1][:12]


@functools.cache
def _code_changed() -> float:
    """When the code that exports, certifies and decodes a version last changed: the newest
    module of export/, models/ and service/ (the generated wire aside, made again by each
    set-up)."""
    return max(
        path.stat().st_mtime
        for package in ("export", "models", "service")
        for path in (ROOT / package).rglob("*.py")
        if "wire" not in path.relative_to(ROOT).parts
    )


def _built_version(model: str, checkpoint: Path) -> Path | None:
    """The version of `model` made from the shipped `checkpoint` in the model repository
    `./dev.sh` builds before the suite (data/repository/MODEL/N: fp32 and int8 built op by op,
    certified on MIN_SENTENCES inputs of every test part), where it is current: made by this
    graph builder's revision, certified as passed, and after the code last changed. None
    otherwise."""
    from export.builder import REVISION
    from models.checkpoint import WEIGHTS
    from service.runtime.repository import (
        GOLDEN,
        ModelRepositoryError,
        manifests,
        read_manifest,
        sha256,
        verify,
    )

    weights = sha256(checkpoint / WEIGHTS)
    for path in manifests(BUILT_REPOSITORY):
        directory = path.parent
        try:  # its files hashed only where it was made from the checkpoint
            if directory.parent.name != model or (
                read_manifest(directory).get("source", {}).get("sha256") != weights
            ):
                continue
            manifest = verify(directory).manifest
        except (ModelRepositoryError, OSError):
            continue
        if (
            manifest.get("graphs_made") == {"fp32": "built", "int8": "built"}
            and manifest.get("graphs_revision") == REVISION
            and manifest.get("parity", {}).get("passed") is True
            and _code_changed() < (directory / GOLDEN).stat().st_mtime
        ):
            return directory
    return None


def _copied(built: Path, root: Path):
    """(ModelVersion, certificate) of a copy of the built version `built` under `root` (no
    test changes the served one)."""
    from service.runtime.repository import verify

    directory = root / built.parent.name / built.name
    shutil.copytree(built, directory)
    model_version = verify(directory)
    return model_version, model_version.manifest["parity"]


@pytest.fixture(scope="session")
def exported_translator(tmp_path_factory, translator_data):
    """(ModelVersion, certificate) of the shipped translator, fp32 and int8: a copy of the
    version `./dev.sh` built where it is current (`_built_version`), else exported as version 1
    and certified here on MIN_SENTENCES test sentences."""
    from export.certify import MIN_SENTENCES, certify
    from export.decode_parity import ParityInputs
    from export.repository import write_version
    from models.checkpoint import WEIGHTS, load_checkpoint
    from models.corpus import read_split
    from service.runtime.repository import sha256, verify

    root = tmp_path_factory.mktemp("repository")
    built = _built_version("translator", SHIPPED_TRANSLATOR)
    if built is not None:
        return _copied(built, root)
    directory = root / "translator" / "1"
    model, tokenizer = load_checkpoint(SHIPPED_TRANSLATOR)
    source = {"checkpoint": str(SHIPPED_TRANSLATOR), "sha256": sha256(SHIPPED_TRANSLATOR / WEIGHTS)}
    model_version = write_version(
        model, tokenizer.model_file, directory, "translator", "1", ("fp32", "int8"), source
    )
    spanish, english = read_split(translator_data, "test")
    sources = tokenizer.encode_batch(spanish[:MIN_SENTENCES])
    inputs = ParityInputs(sources, english[:MIN_SENTENCES])
    certificate = certify(model_version, SHIPPED_TRANSLATOR, inputs)
    return verify(directory), certificate


@pytest.fixture(scope="session")
def captioner_data() -> Path:
    """The captioner's scenes (built once when missing, with the smallest training split that
    gives the full build's dev and test splits)."""
    from models.artwork import HELD_OUT
    from models.caption_data import SEEN_SOURCE, DataOptions, build_captioner_data

    meta = CAPTIONER_DATA / "meta.json"
    built = meta.exists() and json.loads(meta.read_text()).get("held_out_family") == HELD_OUT
    if not built or not (CAPTIONER_DATA / "test.jsonl").exists():  # missing, or of older rules
        build_captioner_data(CAPTIONER_DATA, DataOptions(train=SEEN_SOURCE))
    return CAPTIONER_DATA


@pytest.fixture(scope="session")
def small_captioner_data(tmp_path_factory) -> tuple[Path, dict]:
    """(directory, meta) of a small build: 400 training scenes, 30 dev, 70 per test part."""
    from models.caption_data import DataOptions, build_captioner_data

    out = tmp_path_factory.mktemp("captioner-data")
    return out, build_captioner_data(out, DataOptions(train=400, dev=30, test_per_part=70))


@pytest.fixture(scope="session")
def exported_captioner(tmp_path_factory, captioner_data):
    """(ModelVersion, certificate) of the shipped captioner, fp32 and int8: a copy of the
    version `./dev.sh` built and serves where it is current (`_built_version`: 2, the previous
    checkpoint being 1), else exported as version 1
    and certified here on MIN_SENTENCES test images spread over the test parts (int8 on the
    whole test split)."""
    from export.certify import MIN_SENTENCES, certify
    from export.commands import parity_inputs
    from export.repository import write_version
    from models.checkpoint import WEIGHTS, checkpoint_grammar, load_checkpoint
    from service.runtime.repository import sha256, verify

    root = tmp_path_factory.mktemp("repository")
    built = _built_version("captioner", SHIPPED_CAPTIONER)
    if built is not None:
        return _copied(built, root)
    model, tokenizer = load_checkpoint(SHIPPED_CAPTIONER)
    directory = root / "captioner" / "1"
    source = {"checkpoint": str(SHIPPED_CAPTIONER), "sha256": sha256(SHIPPED_CAPTIONER / WEIGHTS)}
    grammar = checkpoint_grammar(SHIPPED_CAPTIONER, tokenizer)
    model_version = write_version(
        model,
        tokenizer.model_file,
        directory,
        "captioner",
        "1",
        ("fp32", "int8"),
        source,
        grammar=grammar,
    )
    inputs = parity_inputs(model, captioner_data, tokenizer, MIN_SENTENCES)
    certificate = certify(model_version, SHIPPED_CAPTIONER, inputs)
    return verify(directory), certificate


def _linked_repository(root: Path, *exported) -> Path:
    """`root` as a model repository of the exported versions (links to their directories)."""
    for model_version, _ in exported:
        (root / model_version.name).mkdir()
        (root / model_version.name / model_version.version).symlink_to(model_version.directory)
    return root


@pytest.fixture(scope="session")
def model_repository(exported_translator, exported_captioner, tmp_path_factory) -> Path:
    """The root of a model repository holding both exported shipped models."""
    root = tmp_path_factory.mktemp("model-repository")
    return _linked_repository(root, exported_translator, exported_captioner)


@pytest.fixture(scope="session")
def translator_repository(exported_translator, tmp_path_factory) -> Path:
    """A model repository of the shipped translator alone (a machine that cannot build the
    captioner's data serves it too)."""
    root = tmp_path_factory.mktemp("translator-repository")
    return _linked_repository(root, exported_translator)


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory) -> dict:
    """family -> (its Hugging Face directory, its exported version, the certificate): a small
    random Marian, M2M100, NLLB and mBART-50 model, built with `transformers`, exported (fp32,
    int8 and fp16) and certified against it on 200 Spanish test sentences."""
    from helpers import (
        certificate_texts,
        m2m100_directory,
        marian_directory,
        mbart50_directory,
        nllb_directory,
    )

    from service.runtime.repository import verify

    families = (
        ("marian", marian_directory, ("", "")),
        ("m2m100", m2m100_directory, ("es", "en")),
        ("nllb", nllb_directory, ("spa_Latn", "eng_Latn")),
        ("mbart", mbart50_directory, ("es_XX", "en_XX")),
    )

    def build(made: Path) -> None:
        # the hf extra, installed by ./dev.sh (a machine without it may run on what another
        # made: _made_once)
        pytest.importorskip("transformers")
        from export.hf.certify import certify_hf
        from export.hf.version import VARIANTS, export_hf

        for family, directory_of, languages in families:
            directory = directory_of(made / family)
            version = export_hf(directory, made / "repository", family, variants=VARIANTS)
            certify_hf(version, directory, certificate_texts(version), languages)

    made = _made_once(tmp_path_factory, "hf", build)
    models = {}
    for family, _, _ in families:
        version = verify(made / "repository" / family / "1")
        models[family] = made / family, version, version.manifest["parity"]
    return models


def _made_once(tmp_path_factory, name: str, build) -> Path:
    """A folder `build` fills once for the whole run: under pytest-xdist the workers share
    it (the first to ask builds it while the others wait on a lock), so that a session
    fixture of a minute is not paid again by each worker. Nothing may change it. Where
    ATTNSERVE_TEST_MADE names a folder, it is made there once for every run that names it
    (a machine without what `build` needs runs on what another made: `bash bench/gpu.sh
    families`)."""
    import fcntl

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above every worker's own
    if os.environ.get("ATTNSERVE_TEST_MADE"):
        root = Path(os.environ["ATTNSERVE_TEST_MADE"]).resolve()
        root.mkdir(parents=True, exist_ok=True)
    made, done = root / name, root / f"{name}.made"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        if not done.exists():
            shutil.rmtree(made, ignore_errors=True)  # what a failed build left
            made.mkdir()
            build(made)
            done.touch()
    return made


@pytest.fixture(scope="session")
def mixed_repository(exported_translator, hf_models, tmp_path_factory) -> Path:
    """A model repository of five translators: ours, a Marian, an M2M100, an NLLB and an
    mBART-50 model."""
    root = tmp_path_factory.mktemp("mixed-repository")
    hf = [(version, certificate) for _, version, certificate in hf_models.values()]
    return _linked_repository(root, exported_translator, *hf)


@pytest.fixture(scope="session")
def hf_repository(hf_models, tmp_path_factory) -> Path:
    """A model repository of the four Hugging Face families alone."""
    hf = [(version, certificate) for _, version, certificate in hf_models.values()]
    return _linked_repository(tmp_path_factory.mktemp("hf-repository"), *hf)


def pytest_collection_modifyitems(config, items):
    """Modules that hold a slow test come first, each kept whole and in its order: `./dev.sh
    test` deals modules out to its workers in this order (pytest-xdist, `--dist loadfile
    --no-loadscope-reorder`), and a long module dealt last would leave one worker running it
    alone. Tests marked gpu run only where onnxruntime has a CUDA execution provider; tests
    marked stack (image builds, minutes) only when the marker expression names them
    (`-m stack`, as `./dev.sh stack` does)."""
    slow = {item.path for item in items if "slow" in item.keywords}
    items.sort(key=lambda item: item.path not in slow)  # stable: the rest keep their order
    if "stack" not in (config.getoption("markexpr") or ""):
        later = pytest.mark.skip(reason="builds container images: ./dev.sh stack runs it")
        for item in items:
            if "stack" in item.keywords:
                item.add_marker(later)
    try:
        import onnxruntime

        has_cuda = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA execution provider")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
