"""The figures `translate --alignment` and `caption --attention` write
(`attnserve.cli.figures`): one PNG per input under its numbered name, drawn from a result's
best hypothesis on the image as the server decodes it, and a `Failure` naming the input when
there is nothing to draw or it cannot be drawn."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from attnserve.cli import figures
from attnserve.cli.results import (
    Alignment,
    Attention,
    Caption,
    Captioned,
    Sentence,
    TokenAttention,
    TokenCounts,
    Translated,
    Translation,
)
from attnserve.cli.subcommand import Failure

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
COUNTS = TokenCounts(3, 2)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    return struct.unpack(">II", data[16:24])


def _encoded(image: Image.Image, format: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=format, **options)
    return buffer.getvalue()


def _translation(source: str, alignment: Alignment | None, hypotheses: int = 1) -> Translation:
    best = Translated("I am", -0.5, -1.0, ("▁I", "▁am"), (-0.5, -0.3, -0.2), True, alignment)
    return Translation(source, (best,) * hypotheses, (), (), COUNTS)


ALIGNMENT = Alignment(
    ("▁Yo", "▁soy", "</s>"),
    ("▁I", "▁am", "</s>"),
    ((0.8, 0.1, 0.1), (0.1, 0.8, 0.1), (0.0, 0.1, 0.9)),
)


def _caption(text: str, attention: Attention | None) -> Caption:
    best = Captioned(text, -0.5, -1.0, ("▁a", "▁dog"), (-0.5, -0.3, -0.2), True, attention)
    return Caption("dog.png", 64, 48, (best,), COUNTS)


def _attention(grid=(2, 3), tokens=("▁a", "▁dog", "</s>")) -> Attention:
    cells = grid[0] * grid[1]
    rows = tuple(
        TokenAttention(token, tuple(np.eye(cells)[i % cells].tolist()))
        for i, token in enumerate(tokens)
    )
    return Attention(grid[0], grid[1], 48, 64, rows)


def test_one_figure_keeps_its_name_several_are_numbered_from_one():
    out = Path("figs/out.png")
    assert figures.figure_path(out, 0, 1) == out
    assert [figures.figure_path(out, i, 3) for i in range(3)] == [
        Path("figs/out-1.png"),
        Path("figs/out-2.png"),
        Path("figs/out-3.png"),
    ]
    assert figures.figure_path(Path("a.b.png"), 1, 2) == Path("a.b-2.png")


def test_a_long_title_is_cut_to_80_characters():
    assert figures.short_title("x" * 80) == "x" * 80
    title = figures.short_title("y" * 200)
    assert len(title) == 80 and title.endswith("...") and title.startswith("y" * 77)


def test_the_alignment_figure_of_each_text_is_written(tmp_path):
    out = tmp_path / "alignment.png"
    for index in range(2):
        figures.write_alignment(out, index, 2, _translation("Yo soy", ALIGNMENT))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alignment-1.png", "alignment-2.png"]
    width, height = _png_size(tmp_path / "alignment-1.png")
    assert width > 100 and height > 100


def _sentences(*alignments: Alignment | None) -> Translation:
    """A text of several sentences: their alignments in `sentences`, none in the hypothesis."""
    sentences = tuple(Sentence(0, 1, 0, 1, alignment) for alignment in alignments)
    best = Translated("I am. No.", -0.5, -1.0, ("▁I",), (-0.5,), True, None)
    return Translation("Yo soy. No.", (best,), sentences, (), COUNTS)


SECOND = Alignment(("▁No", ".", "</s>"), ("▁No", "</s>"), ((0.9, 0.1, 0.0), (0.2, 0.2, 0.6)))


def test_a_text_of_several_sentences_is_drawn_with_each_sentences_alignment(tmp_path):
    """Before, a text of two sentences (the server aligns each apart) failed with "no
    alignment" after its translation was printed."""
    joined = figures.text_alignment(_sentences(ALIGNMENT, SECOND))
    assert joined.source_tokens == ("▁Yo", "▁soy", "</s>", "▁No", ".", "</s>")
    assert joined.target_tokens == ("▁I", "▁am", "</s>", "▁No", "</s>")
    assert joined.weights == (
        (0.8, 0.1, 0.1, 0.0, 0.0, 0.0),
        (0.1, 0.8, 0.1, 0.0, 0.0, 0.0),
        (0.0, 0.1, 0.9, 0.0, 0.0, 0.0),
        (0.0, 0.0, 0.0, 0.9, 0.1, 0.0),
        (0.0, 0.0, 0.0, 0.2, 0.2, 0.6),
    )
    figures.write_alignment(tmp_path / "a.png", 0, 1, _sentences(ALIGNMENT, SECOND))
    assert _png_size(tmp_path / "a.png")[0] > 100
    assert figures.text_alignment(_translation("Yo soy", ALIGNMENT)) is ALIGNMENT
    assert figures.text_alignment(_sentences(ALIGNMENT, None)) is None


def test_no_alignment_to_draw_names_the_text(tmp_path):
    out = tmp_path / "a.png"
    with pytest.raises(Failure, match=r"^no alignment for text 2$"):
        figures.write_alignment(out, 1, 3, _translation("Yo soy", None))
    with pytest.raises(Failure, match=r"^no alignment for text 1$"):
        figures.write_alignment(out, 0, 1, _translation("Yo soy", ALIGNMENT, hypotheses=0))
    ragged = Alignment(("▁Yo", "</s>"), ("▁I",), ((0.5, 0.5, 0.0),))
    with pytest.raises(Failure, match=r"^alignment of text 3: alignment: 3 weights for 1 target"):
        figures.write_alignment(out, 2, 3, _translation("Yo", ragged))
    assert list(tmp_path.iterdir()) == []


def test_the_figure_image_applies_a_jpegs_orientation_but_not_a_pngs():
    wide = Image.new("RGB", (40, 20), (200, 30, 30))
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 degrees clockwise to view
    assert figures.figure_image(_encoded(wide, "JPEG", exif=exif)).shape == (40, 20, 3)
    assert figures.figure_image(_encoded(wide, "PNG", exif=exif)).shape == (20, 40, 3)
    assert figures.figure_image(_encoded(wide, "JPEG")).shape == (20, 40, 3)


def test_the_figure_image_lays_transparency_over_white_and_shrinks_to_fit():
    clear = Image.new("RGBA", (4, 4), (0, 0, 0, 0))
    clear.putpixel((0, 0), (10, 20, 30, 255))
    pixels = figures.figure_image(_encoded(clear, "PNG"))
    assert pixels.dtype == np.uint8 and pixels.shape == (4, 4, 3)
    assert pixels[3, 3].tolist() == [255, 255, 255] and pixels[0, 0].tolist() == [10, 20, 30]
    palette = Image.new("P", (4, 4), 1)
    palette.putpalette([0, 0, 0, 9, 9, 9] + [0] * 762)
    palette.info["transparency"] = 1  # a palette colour that is transparent
    assert figures.figure_image(_encoded(palette, "PNG", transparency=1))[0, 0].tolist() == [
        255,
        255,
        255,
    ]
    big = Image.new("L", (1024, 600), 128)
    assert figures.figure_image(_encoded(big, "PNG")).shape == (300, figures.FIGURE_SIDE, 3)


def test_the_figure_image_is_the_servers_for_16_bit_gray_and_cmyk():
    """A 16-bit grayscale PNG was drawn white (Pillow clips its samples to 255) under a
    caption the server wrote for the gray image it read (the high byte of each sample)."""
    from service.runtime.images import decode_image

    gray = Image.fromarray(np.full((4, 6), 30000, dtype=np.uint16))
    cmyk = Image.new("CMYK", (4, 6), (10, 200, 30, 40))
    for encoded in (_encoded(gray, "PNG"), _encoded(cmyk, "JPEG")):
        served = decode_image(encoded, "image").pixels
        assert figures.figure_image(encoded).tolist() == served.tolist()
    assert figures.figure_image(_encoded(gray, "PNG"))[0, 0].tolist() == [117, 117, 117]


def test_the_attention_figure_is_drawn_on_the_image(tmp_path):
    image = _encoded(Image.new("RGB", (64, 48), (30, 90, 200)), "PNG")
    out = tmp_path / "attention.png"
    figures.write_attention(out, 0, 1, image, _caption("a dog", _attention()))
    width, height = _png_size(out)
    assert width >= 400 and height >= 100  # the image and three panels in a row


def test_the_attention_figure_draws_the_best_captions_tokens_and_grids(tmp_path, monkeypatch):
    import service.attention_figure

    drawn = {}

    def draw(image, tokens, attention, grid=None, path=None, title=None):
        drawn.update(image=image, tokens=tokens, attention=attention, path=path, title=title)

    monkeypatch.setattr(service.attention_figure, "draw_attention", draw)
    image = _encoded(Image.new("RGB", (1000, 500)), "PNG")
    caption = _caption("a dog " * 20, _attention())
    figures.write_attention(tmp_path / "att.png", 1, 2, image, caption)
    assert drawn["tokens"] == ["▁a", "▁dog", "</s>"]
    assert drawn["attention"].shape == (3, 2, 3) and drawn["attention"][2, 0, 2] == 1
    assert drawn["path"] == tmp_path / "att-2.png"
    assert drawn["title"] == figures.short_title(caption.hypotheses[0].text)
    assert len(drawn["title"]) == 80
    assert drawn["image"].shape == (256, 512, 3)  # shrunk to fit FIGURE_SIDE


def test_no_attention_or_an_unreadable_image_names_the_image(tmp_path):
    image = _encoded(Image.new("RGB", (8, 8)), "PNG")
    out = tmp_path / "a.png"
    with pytest.raises(Failure, match=r"^no attention for image 2$"):
        figures.write_attention(out, 1, 2, image, _caption("a dog", None))
    with pytest.raises(Failure, match=r"^attention of image 1: "):
        figures.write_attention(out, 0, 1, b"not an image", _caption("a dog", _attention()))
    ragged = Attention(2, 3, 48, 64, (TokenAttention("▁a", (1.0, 0.0)),))
    with pytest.raises(Failure, match=r"^attention of image 1: attention: token 0"):
        figures.write_attention(out, 0, 1, image, _caption("a", ragged))
    assert list(tmp_path.iterdir()) == []
