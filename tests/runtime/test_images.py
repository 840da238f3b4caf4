"""Image bytes from a request -> uint8 RGB: every refusal and every pixel-mode rule of
service.runtime.images, on images made in memory with Pillow (or by hand where Pillow cannot
write one)."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
from helpers import handmade_png
from PIL import Image, ImageFile

from service.runtime.errors import InvalidArgument
from service.runtime.images import (
    DecodedImage,
    ImageLimits,
    _to_rgb,
    decode_image,
    decode_images,
    resize_square,
)

FIELD = "images[2]"


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def noise(height: int = 48, width: int = 64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def refusal(data: bytes, limits: ImageLimits | None = None) -> str:
    with pytest.raises(InvalidArgument) as error:
        decode_image(data, FIELD, limits or ImageLimits())
    message = str(error.value)
    assert message.startswith(f"{FIELD}: "), message
    return message


def test_png_round_trip_is_exact():
    pixels = noise()
    decoded = decode_image(encode(Image.fromarray(pixels), "PNG"), FIELD)
    assert isinstance(decoded, DecodedImage)
    assert (decoded.width, decoded.height, decoded.format, decoded.mode) == (64, 48, "PNG", "RGB")
    assert decoded.pixels.dtype == np.uint8 and decoded.pixels.shape == (48, 64, 3)
    np.testing.assert_array_equal(decoded.pixels, pixels)
    assert not decoded.pixels.flags.writeable


@pytest.mark.parametrize(
    ("fmt", "options", "tolerance"),
    [("JPEG", {"quality": 95}, 4.0), ("WEBP", {"lossless": True}, 0.0), ("WEBP", {}, 6.0)],
)
def test_jpeg_and_webp_round_trip(fmt, options, tolerance):
    ramp = np.linspace(0, 255, 64).astype(np.uint8)
    pixels = np.stack(
        np.broadcast_arrays(ramp[None, :], ramp[:, None], 128 - ramp[None, :] // 2), -1
    )
    decoded = decode_image(encode(Image.fromarray(pixels), fmt, **options), FIELD)
    assert (decoded.format, decoded.mode, decoded.pixels.shape) == (fmt, "RGB", (64, 64, 3))
    assert np.abs(decoded.pixels.astype(int) - pixels).mean() <= tolerance


def test_empty_data_is_refused():
    assert refusal(b"") == f"{FIELD}: empty (no image bytes)"


def test_too_many_bytes_are_refused_before_opening():
    png = encode(Image.fromarray(noise()), "PNG")
    limits = ImageLimits(max_bytes=1000)
    assert refusal(png, limits) == f"{FIELD}: {len(png)} bytes, at most 1000"
    # Junk over the limit is refused for its size: the bytes were never handed to Pillow.
    assert refusal(b"\x00" * 1001, limits) == f"{FIELD}: 1001 bytes, at most 1000"


@pytest.mark.parametrize("data", [np.random.default_rng(1).bytes(500), b"a cat on a mat\n"])
def test_not_an_image_is_refused(data):
    assert refusal(data) == f"{FIELD}: not an image (PNG, JPEG or WebP expected)"


def test_zero_size_image_is_refused():
    assert "not an image" in refusal(handmade_png(0, 1, 8, 0, b""))


@pytest.mark.parametrize("fmt", ["GIF", "BMP", "TIFF"])
def test_other_formats_are_refused_by_name(fmt):
    data = encode(Image.fromarray(noise(8, 8)), fmt)
    assert refusal(data) == f"{FIELD}: unsupported format {fmt} (PNG, JPEG or WebP expected)"


def test_the_accepted_formats_are_the_limits():
    jpeg = encode(Image.fromarray(noise(8, 8)), "JPEG")
    assert refusal(jpeg, ImageLimits(formats=("PNG",))).endswith(
        "unsupported format JPEG (PNG expected)"
    )


def test_decompression_bomb_is_refused_from_its_header(monkeypatch):
    def no_decoding(self):
        raise AssertionError("pixels were decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decoding)
    pillow_limit = Image.MAX_IMAGE_PIXELS
    # 1-bit: 20000 x 20000 is past Pillow's own error limit, 10000 x 10000 past its warning.
    for side in (20000, 10000):
        bomb = handmade_png(side, side, 1, 0, bytes(side // 8))
        assert len(bomb) < 100_000
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            message = refusal(bomb)
        assert message == (
            f"{FIELD}: {side} x {side} pixels, at most {4096 * 4096} (refused before decoding)"
        )
    assert pillow_limit == Image.MAX_IMAGE_PIXELS  # left as it was


def test_the_pixel_limit_alone_decides_between_decoding_and_refusing():
    png = handmade_png(300, 200, 1, 0, b"\xf0" * 38)  # 38 bytes: 304 bits, the last 4 are padding
    decoded = decode_image(png, FIELD, ImageLimits(max_pixels=300 * 200))
    assert decoded.pixels.shape == (200, 300, 3)
    assert decoded.pixels[0, :8, 0].tolist() == [255] * 4 + [0] * 4
    message = refusal(png, ImageLimits(max_pixels=300 * 200 - 1))
    assert message.endswith(f"300 x 200 pixels, at most {300 * 200 - 1} (refused before decoding)")


@pytest.mark.parametrize("fmt", ["PNG", "WEBP"])
def test_animated_images_are_refused(fmt):
    frames = [Image.new("RGB", (8, 8), color) for color in ("red", "green", "blue")]
    data = encode(frames[0], fmt, save_all=True, append_images=frames[1:])
    assert refusal(data) == f"{FIELD}: animated or multi-frame image (3 frames); send one frame"


def test_a_jpeg_with_more_images_after_it_is_read_as_its_first():
    """A camera's JPEG that carries a preview or a stereo pair after its own image (Pillow
    names it MPO) was refused as an unsupported format: it is a JPEG, read as viewers show it,
    its EXIF orientation applied."""
    first, preview = Image.new("RGB", (64, 48), (200, 10, 10)), Image.new("RGB", (16, 12), "blue")
    exif = Image.Exif()
    exif[0x0112] = 6  # displayed turned 90 degrees clockwise
    data = encode(first, "MPO", save_all=True, append_images=[preview], exif=exif, quality=95)
    assert Image.open(io.BytesIO(data)).format == "MPO"
    decoded = decode_image(data, FIELD)
    assert (decoded.format, decoded.width, decoded.height) == ("JPEG", 48, 64)
    assert np.abs(decoded.pixels.astype(int) - [200, 10, 10]).max() <= 8
    assert refusal(data, ImageLimits(formats=("PNG",))).endswith(
        "unsupported format MPO (PNG expected)"
    )


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated_data_is_refused(fmt):
    data = encode(Image.fromarray(noise(128, 128)), fmt)
    message = refusal(data[: len(data) // 2])
    assert message.startswith(f"{FIELD}: truncated or corrupt {fmt} data (")
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


def test_cmyk_jpeg_is_converted_to_rgb():
    cmyk = Image.new("CMYK", (16, 16), (255, 0, 0, 0))  # pure cyan
    cmyk.paste((0, 255, 0, 0), (8, 0, 16, 16))  # pure magenta on the right
    decoded = decode_image(encode(cmyk, "JPEG", quality=95), FIELD)
    assert (decoded.mode, decoded.pixels.shape) == ("CMYK", (16, 16, 3))
    assert np.abs(decoded.pixels[8, 2].astype(int) - (0, 255, 255)).max() <= 8
    assert np.abs(decoded.pixels[8, 13].astype(int) - (255, 0, 255)).max() <= 8


def test_palette_png_transparency_is_white():
    palette = Image.new("P", (4, 1))
    palette.putpalette([255, 0, 0, 0, 0, 255])  # 0: red, made transparent; 1: blue
    palette.putpixel((2, 0), 1)
    palette.putpixel((3, 0), 1)
    decoded = decode_image(encode(palette, "PNG", transparency=0), FIELD)
    assert decoded.mode == "P"
    assert decoded.pixels[0].tolist() == [[255, 255, 255]] * 2 + [[0, 0, 255]] * 2


def test_opaque_palette_and_gray_are_converted():
    palette = Image.new("P", (1, 1))
    palette.putpalette([10, 20, 30])
    for image, mode, rgb in [
        (palette, "P", [10, 20, 30]),
        (Image.new("L", (1, 1), 77), "L", [77] * 3),
    ]:
        decoded = decode_image(encode(image, "PNG"), FIELD)
        assert (decoded.mode, decoded.pixels[0, 0].tolist()) == (mode, rgb)


@pytest.mark.parametrize(
    ("mode", "values", "expected"),
    [
        ("LA", [(0, 0), (0, 255), (0, 128)], [255, 0, 127]),
        ("RGBA", [(255, 0, 0, 0), (255, 0, 0, 255), (255, 0, 0, 128)], [255, 0, 127]),
    ],
)
def test_alpha_is_composited_on_white(mode, values, expected):
    image = Image.new(mode, (3, 1))
    for x, value in enumerate(values):
        image.putpixel((x, 0), value)
    decoded = decode_image(encode(image, "PNG"), FIELD)
    assert decoded.mode == mode
    # Green, the channel both cases put at 0 before compositing; LA is gray so all three agree.
    assert np.abs(decoded.pixels[0, :, 1].astype(int) - expected).max() <= 1
    if mode == "RGBA":
        assert decoded.pixels[0, :, 0].tolist() == [255, 255, 255]


def test_16_bit_grayscale_keeps_the_high_byte():
    values = np.array([[0, 255, 256, 511, 32768, 65280, 65535]], dtype=np.uint16)
    decoded = decode_image(encode(Image.fromarray(values), "PNG"), FIELD)
    assert decoded.mode == "I;16"
    assert decoded.pixels[0, :, 0].tolist() == [0, 0, 1, 1, 128, 255, 255]
    np.testing.assert_array_equal(decoded.pixels[..., 0], decoded.pixels[..., 2])


def test_16_bit_rgb_png_reads_as_8_bit_rgb():
    samples = np.array([0x1234, 0x80FF, 0xFFFF, 0x00FF, 0x0100, 0xFF00], dtype=">u2")
    decoded = decode_image(handmade_png(2, 1, 16, 2, samples.tobytes()), FIELD)
    assert decoded.mode == "RGB"  # Pillow has no 16-bit RGB mode: the high byte of each sample
    assert decoded.pixels[0].tolist() == [[0x12, 0x80, 0xFF], [0x00, 0x01, 0xFF]]


def test_32_bit_integer_gray_is_clipped_then_scaled():
    # No supported format reads as "I" (Pillow opens 16-bit PNG as "I;16"): the converter itself.
    wide = Image.fromarray(np.array([[-5, 0, 32768, 65535, 70000]], dtype=np.int32))
    assert wide.mode == "I"
    assert _to_rgb(wide, FIELD)[0, :, 0].tolist() == [0, 0, 128, 255, 255]


def test_float_pixels_are_refused():
    carried = []
    for fmt in ("PNG", "JPEG", "WEBP"):
        try:
            data = encode(Image.new("F", (2, 2), 0.5), fmt)
        except OSError:
            continue
        with Image.open(io.BytesIO(data)) as image:
            if image.mode == "F":
                carried.append(data)
    if not carried:
        pytest.skip("no supported format carries mode F (PNG, JPEG refuse it; WebP stores RGB)")
    for data in carried:
        assert refusal(data) == f"{FIELD}: unsupported pixel mode F"


@pytest.mark.parametrize(("fmt", "applied"), [("JPEG", True), ("WEBP", True), ("PNG", False)])
def test_exif_orientation_is_applied_for_jpeg_and_webp(fmt, applied):
    stored = Image.new("RGB", (32, 16), (255, 0, 0))  # left half red, right half blue
    stored.paste((0, 0, 255), (16, 0, 32, 16))
    exif = Image.Exif()
    exif[0x0112] = 6  # displayed turned 90 degrees clockwise
    decoded = decode_image(encode(stored, fmt, exif=exif, quality=95), FIELD)
    if not applied:
        assert (decoded.width, decoded.height) == (32, 16)
        return
    assert (decoded.width, decoded.height, decoded.pixels.shape) == (16, 32, (32, 16, 3))
    assert np.abs(decoded.pixels[4, 8].astype(int) - (255, 0, 0)).max() <= 16  # left -> top
    assert np.abs(decoded.pixels[28, 8].astype(int) - (0, 0, 255)).max() <= 16


def test_decode_images_names_every_bad_image_in_one_error():
    good = encode(Image.fromarray(noise(4, 4)), "PNG")
    gif = encode(Image.fromarray(noise(4, 4)), "GIF")
    with pytest.raises(InvalidArgument) as error:
        decode_images([("images[0]", good), ("images[1]", b""), ("images[2]", gif)])
    assert str(error.value) == (
        "images[1]: empty (no image bytes); "
        "images[2]: unsupported format GIF (PNG, JPEG or WebP expected)"
    )
    decoded = decode_images([("images[0]", good), ("image", good)])
    assert [d.pixels.shape for d in decoded] == [(4, 4, 3), (4, 4, 3)]


@pytest.mark.parametrize(("height", "width", "side"), [(37, 53, 24), (5, 9, 32), (20, 20, 20)])
def test_resize_square_is_pillow_bilinear(height, width, side):
    pixels = noise(height, width, seed=height)
    squared = resize_square(pixels, side)
    assert squared.shape == (side, side, 3) and squared.dtype == np.uint8
    reference = np.asarray(Image.fromarray(pixels).resize((side, side), Image.BILINEAR))
    np.testing.assert_array_equal(squared, reference)


def test_resize_square_refuses_other_arrays():
    with pytest.raises(ValueError):
        resize_square(np.zeros((4, 4), np.uint8), 2)
    with pytest.raises(ValueError):
        resize_square(np.zeros((4, 4, 3), np.float32), 2)
