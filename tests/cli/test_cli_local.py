"""--engine torch's results (`attnserve.cli.local`): the runtime's hypotheses (token ids) read
into `results` as the server builds its response, the same pieces, `</s>` only where it was
generated and attention rows cut to the tokens; and image files Pillow cannot read refused."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import SHIPPED_CAPTIONER, SHIPPED_TRANSLATOR
from PIL import Image

from attnserve.cli import local
from attnserve.cli.main import build_parser
from attnserve.cli.results import Sentence, TokenCounts
from service.paths import file_name
from service.runtime.decoding import Hypothesis
from service.runtime.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer(SHIPPED_TRANSLATOR / "tokenizer.model")


def _hypothesis(tokenizer, text: str, finished: bool, columns: int | None, score: float):
    ids = tokenizer.encode(text)
    steps = len(ids) + finished
    rng = np.random.default_rng(len(text))
    alignment = None if columns is None else rng.random((steps + 2, columns))  # padded
    return Hypothesis(
        tokens=ids,
        log_prob=score * 2,
        score=score,
        token_log_probs=[score / steps] * steps,
        alignment=alignment,
        finished=finished,
    )


def test_a_translation_has_the_pieces_with_eos_where_generated(tokenizer):
    text = "Yo soy de Canadá."
    source_ids = tokenizer.encode(text)
    columns = len(source_ids) + 1 + 3  # the batch's padding beyond the source
    finished = _hypothesis(tokenizer, "I am from Canada.", True, columns, -0.5)
    cut = _hypothesis(tokenizer, "I am from", False, columns, -0.9)
    translation = local._translation(tokenizer, text, [finished, cut])
    source = [*tokenizer.pieces(source_ids), "</s>"]
    best, second = translation.hypotheses
    assert best.text == "I am from Canada." and second.text == "I am from"
    assert best.tokens == tuple(tokenizer.pieces(finished.tokens))  # without `</s>`
    assert best.alignment.source_tokens == tuple(source)
    assert best.alignment.target_tokens == (*best.tokens, "</s>")
    assert second.alignment.target_tokens == second.tokens  # cut at the limit: no `</s>`
    rows = np.asarray(finished.alignment)[: len(best.tokens) + 1, : len(source)]
    assert np.allclose(best.alignment.weights, rows)
    assert len(second.alignment.weights) == len(second.tokens)
    assert (best.score, best.log_prob, best.finished, second.finished) == (-0.5, -1.0, True, False)
    assert translation.sentences == (Sentence(0, len(text), 0, len(best.text), None),)
    assert translation.token_counts == TokenCounts(
        len(source_ids) + 1, len(finished.tokens) + len(cut.tokens)
    )


def test_a_translation_without_alignment_or_hypotheses(tokenizer):
    plain = local._translation(tokenizer, "Hola.", [_hypothesis(tokenizer, "Hi.", True, None, -1)])
    assert plain.hypotheses[0].alignment is None and plain.hypotheses[0].text == "Hi."
    empty = local._translation(tokenizer, "Hola.", [])
    assert empty.hypotheses == () and empty.sentences[0].target_end == 0
    assert empty.token_counts.output_tokens == 0


def test_a_caption_has_a_grid_per_token_over_the_image(tokenizer):
    grid, size = 2, (64, 48)  # width, height
    finished = _hypothesis(tokenizer, "a red dog", True, grid * grid + 5, -0.3)
    caption = local._caption(tokenizer, grid, "dir/dog.png", size, [finished])
    assert caption.image == "dir/dog.png"
    assert (caption.image_width, caption.image_height) == size
    (best,) = caption.hypotheses
    attention = best.attention
    assert (attention.grid_height, attention.grid_width) == (grid, grid)
    assert (attention.image_width, attention.image_height) == size
    assert [t.token for t in attention.tokens] == [*best.tokens, "</s>"]
    assert all(len(t.weights) == grid * grid for t in attention.tokens)
    assert np.allclose(attention.tokens[1].weights, finished.alignment[1, : grid * grid])
    assert caption.token_counts == TokenCounts(grid * grid, len(finished.tokens))
    plain = _hypothesis(tokenizer, "a dog", False, None, -0.3)
    assert local._caption(tokenizer, grid, "x", size, [plain]).hypotheses[0].attention is None


def _png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (10, 200, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_open_images_decodes_every_file_or_names_each_one_it_cannot(tmp_path, capsys):
    paths = [tmp_path / "a.png", tmp_path / "b.png"]
    opened = local.open_images(paths, [_png(6, 4), _png(3, 9)])
    assert [image.size for image in opened] == [(6, 4), (3, 9)]
    broken = _png(40, 40)[:60]  # the header, then nothing
    assert local.open_images([*paths, tmp_path / "c.png"], [b"text", _png(2, 2), broken]) is None
    first, second = capsys.readouterr().err.splitlines()
    assert first == f"error: {paths[0]}: not an image (PNG, JPEG or WebP expected)"
    assert second.startswith(f"error: {tmp_path / 'c.png'}: ")


def _encoded(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def test_the_torch_engine_sees_the_pixels_the_server_sees(tmp_path, capsys):
    from service.runtime.images import decode_image

    rgba = np.zeros((20, 30, 4), np.uint8)
    rgba[..., 0] = 200
    rgba[:, :10, 3] = 255  # the rest is transparent red
    upright = Image.fromarray(np.random.default_rng(0).integers(0, 256, (20, 30, 3), np.uint8))
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned a quarter clockwise
    files = {
        "clear.png": _encoded(Image.fromarray(rgba, "RGBA"), "PNG"),
        "turned.jpg": _encoded(upright, "JPEG", exif=exif.tobytes()),
        "sixteen.png": _encoded(Image.fromarray(np.full((4, 5), 40000, np.uint16)), "PNG"),
    }
    paths = [tmp_path / name for name in files]
    opened = local.open_images(paths, list(files.values()))
    for image, (name, data) in zip(opened, files.items(), strict=True):
        assert image.mode == "RGB"
        assert np.array_equal(np.asarray(image), decode_image(data, name).pixels), name
    assert np.asarray(opened[0])[0, 20].tolist() == [255, 255, 255]
    assert opened[1].size == (20, 30)
    assert np.asarray(opened[2]).max() == 40000 >> 8
    gif = tmp_path / "a.gif"
    gif.write_bytes(_encoded(upright, "GIF"))
    assert local.open_images([gif], [gif.read_bytes()]) is None
    assert (
        capsys.readouterr().err
        == f"error: {gif}: unsupported format GIF (PNG, JPEG or WebP expected)\n"
    )


@pytest.mark.slow  # loads torch and the shipped translator
def test_translate_decodes_with_the_checkpoint_and_counts_every_text():
    args = build_parser().parse_args(
        ["translate", "--engine", "torch", "--max-length", "12", "--n-best", "2", "--beam", "2"]
    )
    args.handler.check(args)
    texts = ["Hola.", "La casa es azul."]
    results = local.translate(args, texts)
    assert (results.model, results.version) == (str(SHIPPED_TRANSLATOR), "")
    assert [t.source for t in results.translations] == texts
    for translation in results.translations:
        assert len(translation.hypotheses) == 2
        assert translation.hypotheses[0].score >= translation.hypotheses[1].score
        best = translation.hypotheses[0]
        assert len(best.token_log_probs) == len(best.tokens) + best.finished
        assert len(best.alignment.weights) == len(best.token_log_probs)  # a row per step
        assert best.alignment.source_tokens[-1] == "</s>"
    assert results.token_counts == TokenCounts(
        sum(t.token_counts.input_tokens for t in results.translations),
        sum(t.token_counts.output_tokens for t in results.translations),
    )


def _json_lines(argv: list[str], monkeypatch) -> list[dict]:
    """What `main(argv)` prints, each line read as JSON, on a UTF-8 stdout that writes
    surrogates back as the bytes they stand for (Python's own under the C locale)."""
    from attnserve.cli import main

    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="surrogateescape")
    monkeypatch.setattr(sys, "stdout", stdout)
    main(argv)
    stdout.flush()
    return [json.loads(line) for line in stdout.buffer.getvalue().decode("utf-8").splitlines()]


def _run_weights(path: Path) -> Path:
    """A training run's weights file at `path` (a small random translator, its config in the
    file) beside the shipped tokenizer, as `last.pt` or `best.pt` of a run directory."""
    import torch

    from models.config import TransformerConfig
    from models.transformer import Transformer

    shutil.copy(SHIPPED_TRANSLATOR / "tokenizer.model", path.parent / "tokenizer.model")
    vocab = Tokenizer(SHIPPED_TRANSLATOR / "tokenizer.model").vocab_size
    config = TransformerConfig(vocab_size=vocab, d_model=32, n_heads=4, d_ff=64)
    torch.save({"model": Transformer(config).state_dict(), "model_config": config.to_dict()}, path)
    return path


@pytest.mark.slow  # loads torch
def test_a_checkpoint_whose_name_is_not_utf8_is_named_in_valid_json(tmp_path, monkeypatch):
    """A run's weights file whose name's bytes are not UTF-8 (Python keeps them as
    surrogates) was written raw into `translate --engine torch --json` and `evaluate --json`:
    bytes no JSON reader decodes. They are \\xNN escapes now, as an image's name is. (A
    directory of such a name holds no checkpoint that loads: safetensors refuses its path.)"""
    checkpoint = _run_weights(tmp_path / os.fsdecode(b"best-\xff.pt"))
    shown = str(tmp_path / "best-\\xff.pt")
    translate = ["translate", "--engine", "torch", "--checkpoint", str(checkpoint)]
    (result,) = _json_lines([*translate, "--max-length", "4", "--json", "uno"], monkeypatch)
    assert result["model"] == shown
    data = tmp_path / "data"
    data.mkdir()
    (data / "dev.es").write_text("uno dos\n", encoding="utf-8")
    (data / "dev.en").write_text("one two\n", encoding="utf-8")
    evaluate = ["evaluate", "translator", "--data", str(data), "--split", "dev"]
    evaluate += ["--checkpoint", str(checkpoint), "--max-length", "4", "--json"]
    (report,) = _json_lines(evaluate, monkeypatch)
    assert report["system"] == f"attnserve translator ({shown})"


@pytest.mark.slow  # loads torch
def test_a_run_in_a_folder_whose_name_is_not_utf8_translates(tmp_path, capsys):
    """SentencePiece refused the path of the run's tokenizer (a TypeError's traceback);
    torch reads the weights' path as any other, and the tokenizer is now read as bytes."""
    from attnserve.cli import main

    folder = tmp_path / os.fsdecode(b"run-\xff")
    folder.mkdir()
    checkpoint = _run_weights(folder / "last.pt")
    argv = ["translate", "--engine", "torch", "--checkpoint", str(checkpoint)]
    assert main([*argv, "--max-length", "4", "uno", "dos"]) == 0
    out, err = capsys.readouterr()
    assert (len(out.splitlines()), err) == (2, "")


@pytest.mark.slow  # loads torch
@pytest.mark.parametrize(
    ("command", "shipped"), [("translate", SHIPPED_TRANSLATOR), ("caption", SHIPPED_CAPTIONER)]
)
def test_a_checkpoint_folder_whose_name_is_not_utf8_is_refused_in_one_line(
    tmp_path, capsys, command, shipped
):
    """safetensors opens no path that is not UTF-8: the checkpoint is refused as one that
    cannot be read (a missing one is), naming the folder by its bytes' \\xNN."""
    from attnserve.cli import main

    folder = tmp_path / os.fsdecode(b"ckpt-\xff")
    shutil.copytree(shipped, folder)
    given = "uno" if command == "translate" else str(tmp_path / "scene.png")
    Image.new("RGB", (32, 32)).save(tmp_path / "scene.png")
    assert main([command, "--engine", "torch", "--checkpoint", str(folder), given]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"error: --checkpoint: {tmp_path}/ckpt-\\xff: a path that is not UTF-8, which"
        " safetensors cannot open (give its folders UTF-8 names)\n"
    )


def test_a_path_is_written_as_text_any_output_carries():
    """Bytes of a name that are not UTF-8 (kept by Python as surrogates, which no UTF-8
    encoder writes) come out as \\xNN escapes; UTF-8 names, accents among them, as they are."""
    odd = os.fsdecode(b"informe-\xff\xe9.txt")
    with pytest.raises(UnicodeEncodeError):
        odd.encode("utf-8")
    assert file_name(odd) == "informe-\\xff\\xe9.txt"
    assert file_name(Path("carpeta") / odd) == "carpeta/informe-\\xff\\xe9.txt"
    assert file_name("canción.txt") == "canción.txt"
    json.dumps(file_name(odd), ensure_ascii=False).encode("utf-8")  # as UTF-8 JSON writes it
