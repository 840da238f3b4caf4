"""Zipped formats (.epub, .docx, .pptx, .odt, .odp): the archive checked and unpacked once
before its library opens it, a library's document opened and saved, and the one message for
a file that is not of its format."""

from __future__ import annotations

import io
import lzma
import zipfile
import zlib

UNPACKED_BYTES = 256 << 20  # the files of a zipped format (.epub, .docx ...), unpacked, at most
UNPACK_PART = 1 << 20  # bytes of a zipped file unpacked at a time
ZIPPED_FILES = 20_000  # files of a zipped format at most
# what zipfile raises for a zip it cannot unpack: not one, an encrypted file, a compression
# it lacks, a file's data that does not unpack (deflate, bzip2, lzma)
UNREADABLE = (
    zipfile.BadZipFile, RuntimeError, NotImplementedError, zlib.error, lzma.LZMAError, OSError,
    EOFError,
)  # fmt: skip


def _opened(load, data: bytes, suffix: str):
    """The document `load` reads from `data` (a zip, checked first: _archive); ValueError
    where it is not a `suffix` file (python-docx, python-pptx and odfpy raise several kinds
    for a file that is not one)."""
    _archive(data, suffix)
    try:
        return load(io.BytesIO(data))
    except Exception as error:
        raise ValueError(_not_a(suffix, error)) from None


def _archive(data: bytes, suffix: str) -> zipfile.ZipFile:
    """`data` as a zip whose every file was unpacked once here, a part at a time, and is as
    its header says: the sizes it declares add up to at most UNPACKED_BYTES, and each file
    unpacks to its size and checksum (a reader never gives more of a file than its size,
    so a file's library reads at most what is counted here). ValueError else: not a zip, an
    encrypted file, a compression zipfile lacks, data that does not unpack."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        if sum(e.file_size for e in archive.infolist()) > UNPACKED_BYTES:
            raise ValueError(f"{suffix}: more than {UNPACKED_BYTES >> 20} MiB unpacked")
        if len(archive.infolist()) > ZIPPED_FILES:
            raise ValueError(f"{suffix}: more than {ZIPPED_FILES} files")
        for entry in archive.infolist():
            with archive.open(entry) as unpacked:
                while unpacked.read(UNPACK_PART):  # the checksum is checked at the end
                    pass
    except UNREADABLE as error:
        raise ValueError(_not_a(suffix, error)) from None
    return archive


def _not_a(suffix: str, error: Exception) -> str:
    article = "an" if suffix[1] in "aeiou" else "a"
    return f"not {article} {suffix} file ({error})"


def _saver(document, method: str = "save"):
    """The `save` of a File whose document writes itself to a stream by `method`."""

    def save() -> bytes:
        out = io.BytesIO()
        getattr(document, method)(out)
        return out.getvalue()

    return save
