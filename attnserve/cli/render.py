"""What `translate` and `caption` show on the terminal (results, a line rewritten in place,
progress) and the files they read and write."""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import shutil
import sys
from pathlib import Path

from attnserve.cli.results import dumps
from attnserve.cli.subcommand import Failure

# Written for a text's characters that would end or cut its line of output, and for the
# backslash that begins these escapes (TSV's text convention): a text stays one line.
ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
# Where a line of input ends, as Python reads a text file: not at the vertical tab, form feed,
# NEL or U+2028 where str.splitlines also cuts, which a line of text can hold (a manual line
# break of a word processor's export).
LINE_END = re.compile(r"\r\n|\r|\n")


def show(results, json: bool, out=None) -> None:
    """Translations or captions (`results`) on `out` (default: stdout): one line of JSON, or
    each input's hypotheses (`print_hypotheses`)."""
    out = out or sys.stdout
    if json:
        print(dumps(results, not encodes_all(out)), file=out)
        return
    for item in results.items:
        print_hypotheses(item, out)


def print_hypotheses(result, out=None) -> None:
    """The hypotheses of one translation or caption on `out` (default: stdout): the text when
    there is one, else RANK<TAB>SCORE<TAB>TEXT per hypothesis, each text on one line
    (`one_line`)."""
    out = out or sys.stdout
    hypotheses = result.hypotheses
    if len(hypotheses) == 1:
        print(one_line(hypotheses[0].text), file=out)
        return
    for rank, hypothesis in enumerate(hypotheses, 1):
        print(f"{rank}\t{hypothesis.score:.4f}\t{one_line(hypothesis.text)}", file=out)


def encodes_all(stream) -> bool:
    """Whether `stream` writes every character as it is: a stream of text, or one encoding
    UTF (PYTHONIOENCODING=latin-1 or a legacy code page do not)."""
    encoding = getattr(stream, "encoding", None)
    return encoding is None or codecs.lookup(encoding).name.startswith("utf")


def escape_unencodable(stream) -> None:
    """Has `stream` write what its encoding lacks as backslash escapes rather than raise
    UnicodeEncodeError midway through the output (unless its errors were chosen: Python's
    own are strict, or surrogateescape under the C locale, which fails as strict does on a
    character the encoding lacks)."""
    raising = getattr(stream, "errors", None) in ("strict", "surrogateescape")
    if raising and hasattr(stream, "reconfigure") and not encodes_all(stream):
        stream.reconfigure(errors="backslashreplace")


def one_line(text: str) -> str:
    """`text` as one line of output: a backslash, line break or tab written as its escape."""
    return text.translate(ESCAPES)


class PartialLine:
    """Partial hypotheses on `stream` (default stdout): one line rewritten in place on a
    terminal, else one line each."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.open = False

    def show(self, text: str) -> None:
        text = one_line(text)
        if not self.tty:
            print(text, file=self.stream, flush=True)
            return
        width = _columns(self.stream) - 1
        shown = text if len(text) <= width else "…" + text[-(width - 1) :]
        self.stream.write("\r\x1b[K" + shown)
        self.stream.flush()
        self.open = True

    def close(self) -> None:
        if self.open:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.open = False


def _columns(stream) -> int:
    """The width of the terminal `stream` writes to: its own, for stderr's can be a terminal
    where stdout is piped (shutil asks stdout's, else says 80)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):  # no descriptor, or not a terminal's
        return shutil.get_terminal_size().columns


class Progress:
    """Inputs answered so far, on stderr: a tqdm bar when tqdm is installed, else a counter
    (rewritten in place on a terminal, one line per call otherwise). Called with the count."""

    def __init__(self, total: int, verb: str, noun: str) -> None:
        self.total, self.verb, self.noun = total, verb, noun
        self.tty = sys.stderr.isatty()
        try:
            from tqdm import tqdm
        except ImportError:
            self.bar = None
        else:
            self.bar = tqdm(total=total, unit=noun, file=sys.stderr, dynamic_ncols=True)

    def __call__(self, done: int) -> None:
        text = f"{self.verb} {done}/{self.total} {self.noun}s"
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
        elif self.tty:
            sys.stderr.write(f"\r{text}")
            sys.stderr.flush()
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


@contextlib.contextmanager
def progress(total: int, verb: str, noun: str, shown: bool):
    """A Progress of `total` inputs when `shown`, else None; closed on the way out."""
    if not shown:
        yield None
        return
    counter = Progress(total, verb, noun)
    try:
        yield counter
    finally:
        counter.close()


@contextlib.contextmanager
def output(path: Path | None):
    """Standard output, or the file `path` (written whole, UTF-8; a Failure naming it where
    it cannot be written, a full disk say)."""
    if path is None:
        yield sys.stdout
        return
    try:
        with open(path, "w", encoding="utf-8") as out:
            yield out
    except OSError as error:
        raise Failure(f"--output {path}: {error.strerror or error}") from None


def read_text(path: Path | None = None) -> str:
    """A file, or standard input when None, as UTF-8 without the byte order mark that
    Windows' editors put first (UnicodeDecodeError where it is not UTF-8: Python's own
    reading of stdin would keep undecodable bytes as surrogates, which no request can
    carry; OSError where stdin is closed)."""
    if path is not None:
        return path.read_text(encoding="utf-8-sig")
    if sys.stdin is None:  # started with it closed (`<&-`): Python leaves None
        raise OSError("closed")
    raw = getattr(sys.stdin, "buffer", None)  # a text stream put in its place has none
    text = sys.stdin.read() if raw is None else raw.read().decode("utf-8")
    return text.removeprefix("\ufeff")


def read_lines(path: Path | None) -> list[str] | None:
    """Non-empty lines of a file, or of standard input when None (None: unreadable, after
    one line on stderr)."""
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as error:
        print(f"error: {path or 'standard input'}: {error}", file=sys.stderr)
        return None
    return [line for line in lines(text) if line.strip()]


def lines(text: str) -> list[str]:
    """The lines of `text`, cut at LINE_END alone (the last "" where it ends with one)."""
    return LINE_END.split(text)


def image_pixels(data: bytes, name: str):
    """An image file's bytes as the server decodes them (service.runtime.images: the same
    formats, EXIF orientation of JPEG and WebP applied, transparency over white, 16-bit
    samples by their high byte) at any size, as (H, W, 3) uint8; InvalidArgument naming
    `name` when the server would refuse the image for anything but its size."""
    from service.runtime.images import ImageLimits, decode_image

    limits = ImageLimits(max_bytes=len(data), max_pixels=sys.maxsize)
    return decode_image(data, name, limits).pixels


def read_images(paths: list[Path]) -> list[bytes] | None:
    """The bytes of every file, or None after one line on stderr per unreadable file."""
    images, failed = [], False
    for path in paths:
        try:
            images.append(path.read_bytes())
        except OSError as error:
            print(f"error: {path}: {error.strerror or error}", file=sys.stderr)
            failed = True
    return None if failed else images
