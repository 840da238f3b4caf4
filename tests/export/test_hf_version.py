"""A Hugging Face directory as a model version (export.hf.version): what its manifest
declares for the runtime to follow, the step's banned tokens, the tokenizer the runtime
reads from it, and what is refused and why."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
from helpers import NLLB_CODES, certificate_texts, nllb_directory

from export.graph_files import SHARED
from export.hf.version import banned_tokens, export_hf, generation, languages
from service.front.config import auto_variant, certified_variants
from service.runtime.decoding import DecodingOptions
from service.runtime.hf_tokenizers import M2M100Tokenizer, MarianTokenizer, read_tokenizer
from service.runtime.languages import MBART50, own_code
from service.runtime.onnx_runtime import numpy_type
from service.runtime.repository import verify

pytestmark = pytest.mark.slow  # exports and certifies four models (hf_models)


def test_a_marian_version_declares_its_tokenizer_rules_and_languages(hf_models):
    directory, version, _ = hf_models["marian"]
    manifest = version.manifest
    pad = manifest["special_tokens"]["pad"]["id"]
    assert manifest["model"]["kind"] == "transformer"  # served as our own translator
    assert manifest["model"]["family"] == "marian"
    assert manifest["special_tokens"]["bos"]["id"] == pad  # Marian's decoder starts at <pad>
    assert manifest["special_tokens"]["eos"] == {"id": 0, "piece": "</s>"}
    assert manifest["preprocessor"]["type"] == "marian"
    assert manifest["generation"] == {
        "end_at_limit": True, "beam_stop": "estimate", "beam_size": 4, "length_penalty": 1.0,
        "max_length": 64, "banned": [pad], "decoder_start": pad,
    }  # fmt: skip
    assert manifest["languages"] == {"source": ["es"], "target": ["de"]}  # its tokenizer's
    assert set(manifest["graphs"]) == {"fp32", "int8", "fp16"}
    tokenizer = read_tokenizer(version)
    assert isinstance(tokenizer, MarianTokenizer)
    vocabulary = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    assert tokenizer.encode("Hola") == [vocabulary.get(p, 1) for p in tokenizer.pieces(
        tokenizer.encode("Hola"))]  # fmt: skip


def test_an_m2m100_version_takes_languages_by_their_tokens(hf_models):
    _, version, _ = hf_models["m2m100"]
    languages = version.manifest["languages"]
    assert languages["source_token"] is True and languages["target_token"] == "decoder"
    assert len(languages["source"]) == len(languages["target"]) == 100
    assert {"es", "en", "fr", "zh"} <= set(languages["tokens"])
    assert version.manifest["generation"]["beam_stop"] == "full"  # early_stopping True
    assert version.manifest["special_tokens"]["bos"]["id"] == 2  # `</s>` starts the decoder
    tokenizer = read_tokenizer(version)
    assert isinstance(tokenizer, M2M100Tokenizer)
    assert tokenizer.language_id("fr") == languages["tokens"]["fr"]
    assert tokenizer.decode([languages["tokens"]["fr"], *tokenizer.encode("hola")]) == "hola"


def test_an_nllb_version_takes_its_flores_codes_by_their_tokens(hf_models):
    """NLLB's languages are its special tokens (`spa_Latn`), not M2M100's hundred codes: the
    source is `spa_Latn pieces </s>` and the decoder starts at `</s> eng_Latn`."""
    directory, version, _ = hf_models["nllb"]
    languages = version.manifest["languages"]
    assert languages["source"] == languages["target"] == list(NLLB_CODES)
    special = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
    added = {token["content"]: token["id"] for token in special["added_tokens"]}
    assert languages["tokens"] == {code: added[code] for code in NLLB_CODES}
    assert (languages["source_token"], languages["target_token"]) == (True, "decoder")
    tokenizer = read_tokenizer(version)
    assert isinstance(tokenizer, M2M100Tokenizer)
    spanish = tokenizer.encode("hola", "spa_Latn")
    assert spanish[0] == added["spa_Latn"] and len(spanish) > 1
    assert tokenizer.decode([added["eng_Latn"], *spanish[1:]]) == "hola"


def test_an_mbart50_version_takes_its_52_codes_by_their_tokens(hf_models):
    """mBART-50's languages are its 52 codes (`es_XX`), each a token after the pieces; the
    source is `es_XX pieces </s>`, the decoder starts at `</s> en_XX`, and the edge names
    each by its language (`es`)."""
    _, version, _ = hf_models["mbart"]
    manifest = version.manifest
    languages = manifest["languages"]
    assert manifest["model"]["family"] == "mbart" and manifest["preprocessor"]["type"] == "m2m100"
    assert languages["source"] == languages["target"] == sorted(MBART50)
    assert (languages["source_token"], languages["target_token"]) == (True, "decoder")
    assert manifest["special_tokens"]["bos"]["id"] == 2  # `</s>` starts the decoder
    tokenizer = read_tokenizer(version)
    spanish = tokenizer.encode("hola", "es_XX")
    assert spanish[0] == languages["tokens"]["es_XX"] > max(spanish[1:])  # after the pieces
    assert tokenizer.decode([languages["tokens"]["en_XX"], *spanish[1:]]) == "hola"
    assert own_code("es", languages["source"]) == "es_XX"
    assert own_code("zh-Hans", languages["target"]) == "zh_CN"


@pytest.mark.parametrize("variant", ["fp32", "int8", "fp16"])
def test_the_step_never_writes_what_generate_bans(hf_models, variant):
    _, version, _ = hf_models["marian"]
    config, pad = version.config, version.manifest["generation"]["banned"][0]
    encoder = ort.InferenceSession(str(version.graph(variant, "encoder")))
    step = ort.InferenceSession(str(version.graph(variant, "decoder")))
    src = np.array([[5, 9, 33, 0]])
    memory = dict(zip([o.name for o in encoder.get_outputs()],
                      encoder.run(None, {"src_ids": src, "src_mask": np.ones_like(src)}),
                      strict=True))  # fmt: skip
    heads = config["decoder_attention_heads"]
    cache = numpy_type(next(i.type for i in step.get_inputs() if i.name.startswith("past")))
    feed = {
        "input_ids": np.array([[pad]]),
        "positions": np.array([[0]]),
        "self_mask": np.ones((1, 1), np.int64),
        "memory_mask": memory["memory_mask"],
    }
    for i in range(config["decoder_layers"]):
        for part in ("key", "value"):
            feed[f"past_key_values.{i}.{part}"] = np.zeros(
                (1, heads, 0, config["d_model"] // heads), cache
            )
            feed[f"encoder.{i}.{part}"] = memory[f"encoder.{i}.{part}"]  # fmt: skip
    (logits,) = step.run(["logits"], feed)
    assert np.isneginf(logits[0, pad])
    assert np.isfinite(np.delete(logits[0], pad)).all()


def test_text_is_written_as_the_models_own_tokenizer_decodes(tmp_path, hf_models):
    """Every id the model's tokenizer drops is dropped (`<mask>` too, not only the ids named
    in special_tokens), and where its decode takes out the spaces before punctuation
    (`clean_up_tokenization_spaces`, applied to a unigram model's text), so does ours."""
    import transformers

    directory, version, _ = hf_models["mbart"]
    theirs = transformers.AutoTokenizer.from_pretrained(directory)
    english = version.manifest["languages"]["tokens"]["en_XX"]
    text = "el perro , la casa . ¿ qué ?"
    pieces = theirs(text, add_special_tokens=False)["input_ids"]
    ids = [english, *pieces[:3], theirs.mask_token_id, theirs.unk_token_id, *pieces[3:]]
    assert theirs.mask_token_id in version.manifest["preprocessor"]["dropped"]
    assert read_tokenizer(version).decode(ids) == theirs.decode(ids, skip_special_tokens=True)
    cleaning = tmp_path / "cleaning"
    cleaning.mkdir()
    for f in directory.iterdir():
        (cleaning / f.name).write_bytes(f.read_bytes())
    settings = json.loads((cleaning / "tokenizer_config.json").read_text(encoding="utf-8"))
    settings["clean_up_tokenization_spaces"] = True
    (cleaning / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    cleaned = export_hf(cleaning, tmp_path / "repository", "cleaning")
    theirs = transformers.AutoTokenizer.from_pretrained(cleaning)
    ours = read_tokenizer(cleaned).decode(ids)
    assert ours == theirs.decode(ids, skip_special_tokens=True) and " ," not in ours
    assert read_tokenizer(version).decode(ids) != ours  # the first one keeps its spaces


def test_a_large_models_weights_go_beside_its_graphs_and_serve_the_same(
    tmp_path, hf_models, monkeypatch
):
    """Weights past the limit of a graph's file (2 GiB in protobuf: NLLB-1.3B's step is 2.6 GB
    in fp32) go to a file beside each graph as it is built and quantised, and to the
    variant's one shared file at the end, listed and hashed in the manifest; fp32 and int8
    serve the same tokens as a version written under the limit. The limit is lowered here,
    so that a small model crosses it."""
    import export.graph_files
    from export.hf.certify import ours

    directory, inline, _ = hf_models["m2m100"]
    monkeypatch.setattr(export.graph_files, "WEIGHTS_INSIDE", 4096)
    version = export_hf(directory, tmp_path / "repository", "m2m100")
    files = version.manifest["files"]
    for variant in ("fp32", "int8"):
        assert f"{variant}/{SHARED}" in files  # hashed, so a damaged one is refused
        for graph in version.manifest["graphs"][variant].values():
            assert f"{graph}.data" not in files
            assert (version.directory / graph).stat().st_size < 1 << 20
    texts = certificate_texts(inline, 24)
    options = DecodingOptions(max_length=40, max_length_ratio=0.0)
    for variant in ("fp32", "int8"):
        assert ours(version, variant, texts, ("es", "en"), options) == ours(
            inline, variant, texts, ("es", "en"), options
        ), variant


def test_what_is_refused_says_why(tmp_path, hf_models):
    several = SimpleNamespace(generation_config=SimpleNamespace(bad_words_ids=[[5], [6, 7]]))
    with pytest.raises(ValueError, match="several tokens"):
        banned_tokens(several)
    assert banned_tokens(SimpleNamespace(generation_config=SimpleNamespace(
        bad_words_ids=[[9], [3], [9]]))) == [3, 9]  # fmt: skip
    directory, _, _ = hf_models["marian"]
    separate = tmp_path / "separate"
    separate.mkdir()
    for f in directory.iterdir():
        (separate / f.name).write_bytes(f.read_bytes())
    (separate / "target_vocab.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ValueError, match="separate vocabularies"):
        export_hf(separate, tmp_path / "repository", "separate")
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    t5 = tmp_path / "t5"
    t5.mkdir()
    (t5 / "config.json").write_text(json.dumps({**config, "model_type": "t5"}), "utf-8")
    with pytest.raises(ValueError, match="relative position buckets"):
        export_hf(t5, tmp_path / "repository", "t5")
    mbart, _, _ = hf_models["mbart"]
    first = tmp_path / "mbart-cc25"  # mBART's first tokenizer: the language after the source
    first.mkdir()
    for f in mbart.iterdir():
        (first / f.name).write_bytes(f.read_bytes())
    settings = json.loads((first / "tokenizer_config.json").read_text(encoding="utf-8"))
    settings["tokenizer_class"] = "MBartTokenizer"
    (first / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    with pytest.raises(ValueError, match="only mBART-50's tokenizer"):
        export_hf(first, tmp_path / "repository", "mbart-cc25")
    nllb, _, _ = hf_models["nllb"]
    fast = tmp_path / "nllb-fast"  # a tokenizer saved as tokenizer.json alone
    fast.mkdir()
    for f in nllb.iterdir():
        if f.name != "sentencepiece.bpe.model":
            (fast / f.name).write_bytes(f.read_bytes())
    with pytest.raises(ValueError, match=r"no sentencepiece\.bpe\.model; the runtime encodes"):
        export_hf(fast, tmp_path / "repository", "nllb-fast")
    assert not (tmp_path / "repository" / "nllb-fast" / "1").exists()  # nothing left behind


def test_declared_languages_narrow_any_familys():
    """--reads and --writes narrow what a Marian model names too: its `>>xx<<` targets
    keep their tokens; a code it does not name is refused, naming what it does."""
    multilingual = SimpleNamespace(
        get_vocab=lambda: {">>fr<<": 5, ">>de<<": 6, "▁a": 7}, init_kwargs={"source_lang": "en"}
    )
    assert languages("marian", multilingual, None) == {
        "source": ["en"], "target": ["de", "fr"], "tokens": {"de": 6, "fr": 5},
        "target_token": "source",
    }  # fmt: skip
    narrowed = languages("marian", multilingual, None, ([], ["fr"]))
    assert (narrowed["target"], narrowed["tokens"]) == (["fr"], {"fr": 5})
    with pytest.raises(ValueError, match=r"\['es'\] are not the model's: it reads en, writes de"):
        languages("marian", multilingual, None, (["es"], []))


def test_declared_languages_are_named_as_requests_name_them():
    """--reads and --writes take a language as a request names it (`en` for mBART-50's
    `en_XX`, `es` for NLLB's `spa_Latn`), as --source-language does: the version declares
    the model's own codes, once."""
    ids = {"en_XX": 7, "es_XX": 8, "fr_XX": 9}
    mbart = SimpleNamespace(lang_code_to_id=ids, convert_tokens_to_ids=ids.__getitem__)
    declared = languages("mbart", mbart, (["en"], ["es"]), (["en", "en_XX"], []))
    assert (declared["source"], declared["tokens"]) == (["en_XX"], ids)
    ids = {"eng_Latn": 5, "spa_Latn": 6, "zho_Hant": 7}
    nllb = SimpleNamespace(all_special_tokens=[*ids, "</s>"], convert_tokens_to_ids=ids.__getitem__)
    declared = languages("m2m_100", nllb, None, (["EN"], ["es", "zh-TW"]))
    assert (declared["source"], declared["target"]) == (["eng_Latn"], ["spa_Latn", "zho_Hant"])
    with pytest.raises(ValueError, match=r"\['fr'\] are not the model's"):
        languages("m2m_100", nllb, None, ([], ["fr"]))


def test_a_multilingual_marian_declares_every_target_its_tokens_name():
    """A target given (the language certified) is one of a multilingual Marian's `>>xx<<`
    targets, not the only one it declares; a source given is its source."""
    multilingual = SimpleNamespace(
        get_vocab=lambda: {">>fr<<": 5, ">>de<<": 6, "▁a": 7}, init_kwargs={}
    )
    declared = languages("marian", multilingual, (["en"], ["fr"]))
    assert (declared["source"], declared["target"]) == (["en"], ["de", "fr"])
    assert declared["tokens"] == {"de": 6, "fr": 5}


def test_languages_to_certify_that_the_version_lacks_are_refused_before_writing(tmp_path):
    """A source or target given to certify must be one the version declares (its own code
    or as the edge names it), else the export stops before writing anything, naming it."""
    codes = {"en": 5, "es": 6}
    m2m100 = SimpleNamespace(lang_code_to_id=codes, get_lang_id=codes.get)
    assert languages("m2m_100", m2m100, (["es"], ["en"]))["target"] == ["en", "es"]
    with pytest.raises(ValueError, match=r"\['tlh'\] to certify are not the version's"):
        languages("m2m_100", m2m100, (["es"], ["tlh"]))
    with pytest.raises(ValueError, match=r"\['en'\] to certify .* writes es$"):
        languages("m2m_100", m2m100, (["es"], ["en"]), ([], ["es"]))
    plain = SimpleNamespace(get_vocab=dict, init_kwargs={})  # a Marian naming no language
    assert languages("marian", plain, (["es"], ["en"])) == {"source": ["es"], "target": ["en"]}
    directory = nllb_directory(tmp_path / "nllb")
    given = (["es"], ["eng_Latn"])  # `es` as the edge names `spa_Latn`
    made = export_hf(directory, tmp_path, "nllb", variants=("fp32",), given_languages=given)
    assert made.manifest["languages"]["source"] == list(NLLB_CODES)
    with pytest.raises(ValueError, match=r"\['fr'\] to certify are not the version's"):
        export_hf(directory, tmp_path, "nllb", "2", ("fp32",), (["es"], ["fr"]))
    assert not (tmp_path / "nllb" / "2").exists()


def test_generate_rules_default_as_generate_does():
    """A model without a generation config of its own: generate's own defaults."""
    plain = SimpleNamespace(
        generation_config=SimpleNamespace(
            early_stopping=None, forced_eos_token_id=None, num_beams=None, length_penalty=None,
            max_length=None, bad_words_ids=None,
        ),
        config=SimpleNamespace(decoder_start_token_id=2),
    )  # fmt: skip
    assert generation(plain) == {
        "end_at_limit": False, "beam_stop": "estimate", "beam_size": 1, "length_penalty": 1.0,
        "max_length": 20, "banned": [], "decoder_start": 2,
    }  # fmt: skip


def test_the_command_exports_and_certifies_a_directory(hf_models, tmp_path, capsys):
    """`attnserve export hf` (export.commands.export_hf): written, certified, summarised."""
    from argparse import Namespace

    from export.commands import export_hf as command

    directory, _, _ = hf_models["m2m100"]
    args = Namespace(
        directory=directory, out=tmp_path, name="multi", version="2", variants="fp32,fp16",
        texts=None, references=None, sentences=200, source_language="es",
        target_language="fr", reads="es, ca", writes="fr,en", graphs="built",
        int8_scales="per-channel",
    )  # fmt: skip
    assert command(args) == 0
    out = capsys.readouterr().out  # the exporter's progress lines, then the summary
    summary = json.loads(out[out.rindex('{\n  "model_version"') :])
    assert summary["passed"] and summary["model_version"] == str(tmp_path / "multi" / "2")
    assert summary["decodes"]["greedy"].endswith("near ties")
    version = verify(tmp_path / "multi" / "2")
    # fp16 built op by op is made and certified on the CPU too, on its own: a CUDA server
    # serves it by default, as it does our own translator's
    assert version.manifest["graphs_made"] == {"fp32": "built", "fp16": "built"}
    half = version.manifest["parity"]["graphs"]["fp16"]
    assert summary["graphs"]["fp16"] == half and half["passed"], half
    assert half["device"] == ("cuda" if "CUDAExecutionProvider" in ort.get_available_providers()
                              else "cpu")  # fmt: skip
    assert half["greedy"]["decodes"] == 200
    assert half["greedy"]["identical"] + len(half["greedy"]["near_ties"]) == 200
    assert certified_variants(version.manifest) == ["fp32", "fp16"]
    assert auto_variant("cuda", version.manifest)[0] == "fp16"
    assert auto_variant("cpu", version.manifest)[0] == "fp32"
    assert {"lean_decoder", "in_place_lean_decoder", "static_decoder"} <= set(
        version.manifest["graphs"]["fp32"]
    )  # every step our own translator ships
    assert version.manifest["parity"]["languages"] == ["es", "fr"]
    declared = version.manifest["languages"]  # as read and written where fewer are declared
    assert (declared["source"], declared["target"]) == (["es", "ca"], ["fr", "en"])
    assert set(declared["tokens"]) == {"es", "ca", "fr", "en"}
    with pytest.raises(ValueError, match=r"languages \['xx_YY'\] are not the model's"):
        command(Namespace(**{**vars(args), "version": "3", "reads": "es,xx_YY"}))
    assert not (tmp_path / "multi" / "3").exists()  # refused before anything is written


def test_the_command_publishes_a_version_once_certified(tmp_path, monkeypatch, capsys):
    """`attnserve export hf` writes and certifies under a hidden name a watching server does
    not read, then renames the version into place."""
    from argparse import Namespace

    from helpers import marian_directory

    from export.commands import export_hf as command
    from export.hf import certify
    from service.runtime.repository import manifests, write_manifest

    seen = []

    def certify_hf(version, directory, texts, languages, references):
        seen.append([str(m) for m in manifests(tmp_path / "repository")])
        kept = {k: v for k, v in version.manifest.items() if k != "files"}
        write_manifest(version.directory, {**kept, "parity": {"passed": True}})
        claim = {"passed": True}
        return {"passed": True, "tokenizer": claim, "graphs": {}, "decodes": [],
                "rows": claim, "seconds": 1}  # fmt: skip

    monkeypatch.setattr(certify, "certify_hf", certify_hf)
    args = Namespace(
        directory=marian_directory(tmp_path / "marian"), out=tmp_path / "repository",
        name="opus", version="1", variants="fp32,fp16", texts=None, references=None, sentences=200,
        source_language="", target_language="", reads=None, writes=None, graphs="traced",
        int8_scales="per-channel",
    )  # fmt: skip
    assert command(args) == 0
    assert seen == [[]]  # nothing to read until it is certified
    assert [p.name for p in (tmp_path / "repository" / "opus").iterdir()] == ["1"]
    published = verify(tmp_path / "repository" / "opus" / "1").manifest
    assert published["parity"]["passed"]
    assert set(published["graphs"]["fp32"]) == {"encoder", "decoder"}  # traced as asked
    # traced fp16 graphs are certified on a GPU alone: made only where one is
    cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    assert set(published["graphs"]) == ({"fp32", "fp16"} if cuda else {"fp32"})
    out = capsys.readouterr().out
    summary = json.loads(out[out.rindex('{\n  "model_version"') :])
    assert summary["model_version"] == str(tmp_path / "repository" / "opus" / "1")


def test_a_command_refused_while_certifying_says_why_and_leaves_nothing(tmp_path):
    """A multilingual model exported with no target to certify is refused as the export's
    other refusals are (a ValueError: one line of the command), and the version written
    for the certificate goes with it."""
    from argparse import Namespace

    from helpers import m2m100_directory

    from export.commands import export_hf as command

    args = Namespace(
        directory=m2m100_directory(tmp_path / "m2m100"), out=tmp_path / "repository",
        name="m2m100", version="1", variants="fp32", texts=None, references=None,
        sentences=200, source_language="es", target_language="", reads=None, writes=None,
        graphs="built", int8_scales="per-channel",
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"to certify: target_language: .* name one"):
        command(args)
    assert not list((tmp_path / "repository" / "m2m100").iterdir())
