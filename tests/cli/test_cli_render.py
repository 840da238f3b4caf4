"""What `translate` and `caption` show (`attnserve.cli.render`): results as lines or JSON, a
partial line rewritten in place on a terminal, progress on stderr with or without tqdm, and
the files read and written."""

from __future__ import annotations

import io
import json
import os
import sys

import pytest

from attnserve.cli import render
from attnserve.cli.results import (
    Caption,
    Captioned,
    Captions,
    TokenCounts,
    Translated,
    Translation,
    Translations,
)

COUNTS = TokenCounts(3, 2)


def _translated(text: str, score: float) -> Translated:
    return Translated(text, score, score * 2, (text,), (score,), True, None)


def _translations(*nbests: tuple[str, ...]) -> Translations:
    items = tuple(
        Translation(
            "src",
            tuple(_translated(t, -0.123456 * (i + 1)) for i, t in enumerate(n)),
            (),
            (),
            COUNTS,
        )
        for n in nbests
    )
    return Translations("translator", "1", items, COUNTS)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_one_hypothesis_prints_its_text_several_print_rank_score_and_text():
    out = io.StringIO()
    render.show(_translations(("one",), ("a", "b")), json=False, out=out)
    assert out.getvalue().splitlines() == ["one", "1\t-0.1235\ta", "2\t-0.2469\tb"]


def test_a_text_with_line_breaks_tabs_or_backslashes_stays_one_line_escaped():
    text = "uno\ndos\r\ttres \\n"
    out = io.StringIO()
    render.show(_translations((text,), (text, "b")), json=False, out=out)
    escaped = "uno\\ndos\\r\\ttres \\\\n"
    assert out.getvalue().split("\n") == [escaped, f"1\t-0.1235\t{escaped}", "2\t-0.2469\tb", ""]
    rows = [line.split("\t") for line in out.getvalue().splitlines()[1:]]
    assert [len(row) for row in rows] == [3, 3]  # RANK, SCORE, TEXT: no tab of the text's
    assert rows[0][2].encode().decode("unicode_escape") == text  # read back as TSV reads it
    stream = io.StringIO()
    render.PartialLine(stream).show("uno\ndos")
    assert stream.getvalue() == "uno\\ndos\n"


def test_show_prints_captions_as_translations_and_defaults_to_stdout(capsys):
    caption = Caption("x.png", 4, 3, (Captioned("a dog", -1.0, -2.0, (), (), True, None),), COUNTS)
    render.show(Captions("captioner", "1", (caption,), COUNTS), json=False)
    assert capsys.readouterr().out == "a dog\n"


def test_show_json_is_one_line_of_the_results_fields_rounded():
    out = io.StringIO()
    render.show(_translations(("é",)), json=True, out=out)
    (line,) = out.getvalue().splitlines()
    assert "é" in line  # UTF-8 kept, not escaped
    response = json.loads(line)
    assert list(response) == ["model", "version", "translations", "token_counts"]
    assert response["translations"][0]["hypotheses"][0]["score"] == -0.1235


def test_print_hypotheses_of_none_prints_nothing():
    out = io.StringIO()
    render.print_hypotheses(Translation("s", (), (), (), COUNTS), out)
    assert out.getvalue() == ""


def test_a_partial_line_is_a_line_each_off_a_terminal():
    stream = io.StringIO()
    line = render.PartialLine(stream)
    line.show("uno")
    line.show("uno dos")
    line.close()
    assert stream.getvalue() == "uno\nuno dos\n"


def test_a_partial_line_is_rewritten_in_place_on_a_terminal_and_cleared_once(monkeypatch):
    # pytest's own reporting asks too, with a fallback, while the patch holds
    size = os.terminal_size((11, 5))
    monkeypatch.setattr(render.shutil, "get_terminal_size", lambda *_, **__: size)
    stream = Terminal()
    line = render.PartialLine(stream)
    line.show("uno")
    line.show("uno dos tres cuatro")  # wider than the terminal: its end shown
    assert stream.getvalue() == "\r\x1b[Kuno\r\x1b[K…es cuatro"
    assert len("…es cuatro") == 10  # a column less than the terminal's: no wrap
    line.close()
    line.close()
    assert stream.getvalue().endswith("cuatro\r\x1b[K")
    quiet = Terminal()
    render.PartialLine(quiet).close()  # nothing shown: nothing to clear
    assert quiet.getvalue() == ""


def test_a_partial_line_fits_the_terminal_of_its_own_stream(monkeypatch):
    """Partials on a narrow terminal's stderr while stdout goes to a file: shutil's width
    (stdout's, else 80) would wrap the line, and each rewrite leave a line behind."""

    class Stderr(Terminal):
        def fileno(self) -> int:
            return 2

    wide, real = os.terminal_size((80, 24)), os.get_terminal_size
    monkeypatch.setattr(render.shutil, "get_terminal_size", lambda *_, **__: wide)
    sizes = {2: os.terminal_size((11, 5))}
    monkeypatch.setattr(render.os, "get_terminal_size", lambda fd=1: sizes.get(fd) or real(fd))
    stream = Stderr()
    render.PartialLine(stream).show("uno dos tres cuatro")
    assert stream.getvalue() == "\r\x1b[K…es cuatro"


def test_progress_without_tqdm_is_a_line_per_call_off_a_terminal(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    with render.progress(70, "captioned", "image", True) as shown:
        shown(64)
        shown(70)
    assert capsys.readouterr().err.splitlines() == [
        "captioned 64/70 images",
        "captioned 70/70 images",
    ]


def test_progress_without_tqdm_rewrites_a_counter_on_a_terminal(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with render.progress(5, "translated", "text", True) as shown:
        shown(2)
        shown(5)
    assert terminal.getvalue() == "\rtranslated 2/5 texts\rtranslated 5/5 texts\n"


def test_progress_with_tqdm_moves_the_bar_to_the_count(capsys):
    pytest.importorskip("tqdm")
    with render.progress(9, "translated", "text", True) as shown:
        shown(4)
        assert shown.bar.n == 4
        shown(9)
        assert shown.bar.n == 9
    assert "9/9" in capsys.readouterr().err


def test_no_progress_when_not_shown_and_a_shown_one_closed_on_error(monkeypatch, capsys):
    with render.progress(100, "translated", "text", False) as shown:
        assert shown is None
    monkeypatch.setitem(sys.modules, "tqdm", None)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with pytest.raises(RuntimeError), render.progress(3, "translated", "text", True) as shown:
        shown(1)
        raise RuntimeError("call failed")
    assert terminal.getvalue().endswith("1/3 texts\n")  # the counter's line ended


def test_output_is_stdout_or_a_file_written_in_utf8(tmp_path):
    with render.output(None) as out:
        assert out is sys.stdout
    path = tmp_path / "en.txt"
    with render.output(path) as out:
        out.write("adiós\n")
    assert path.read_bytes() == "adiós\n".encode()


def test_read_lines_keeps_the_non_empty_lines_of_a_file_or_stdin(tmp_path, monkeypatch):
    path = tmp_path / "es.txt"
    path.write_text("uno\n\n  \ndos tres\n", encoding="utf-8")
    assert render.read_lines(path) == ["uno", "dos tres"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("a\n\nb\n"))
    assert render.read_lines(None) == ["a", "b"]


@pytest.mark.parametrize("inside", ["\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029"])
def test_a_line_is_cut_where_a_file_line_ends_alone(inside, tmp_path, monkeypatch):
    """A vertical tab (a word processor's manual line break), a form feed or U+2028 inside a
    line keeps it one text: str.splitlines cut there, and one line gave two translations."""
    text = f"Pulsa{inside}Guardar.\r\nuno\rdos\n\ntres"
    expected = [f"Pulsa{inside}Guardar.", "uno", "dos", "tres"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert render.read_lines(None) == expected
    path = tmp_path / "es.txt"
    path.write_bytes(text.encode())
    assert render.read_lines(path) == expected


def test_read_lines_of_a_missing_or_undecodable_file_is_none_and_says_why(tmp_path, capsys):
    missing = tmp_path / "none.txt"
    assert render.read_lines(missing) is None
    assert capsys.readouterr().err.startswith(f"error: {missing}: ")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("adiós".encode("latin-1"))
    assert render.read_lines(latin) is None
    assert "utf-8" in capsys.readouterr().err


def test_a_closed_stdin_is_none_and_says_so(monkeypatch, capsys):
    """A command started with stdin closed (`<&-`), where Python leaves sys.stdin None."""
    monkeypatch.setattr(sys, "stdin", None)
    assert render.read_lines(None) is None
    assert capsys.readouterr().err == "error: standard input: closed\n"
    with pytest.raises(OSError, match="closed"):
        render.read_text(None)


def test_read_images_reads_bytes_or_names_every_unreadable_file(tmp_path, capsys):
    first, second = tmp_path / "1.png", tmp_path / "2.png"
    first.write_bytes(b"\x89PNG")
    second.write_bytes(b"GIF8")
    assert render.read_images([first, second, first]) == [b"\x89PNG", b"GIF8", b"\x89PNG"]
    assert capsys.readouterr().err == ""
    missing, other = tmp_path / "no.png", tmp_path / "nor.png"
    assert render.read_images([missing, first, other]) is None
    assert capsys.readouterr().err.splitlines() == [
        f"error: {missing}: No such file or directory",
        f"error: {other}: No such file or directory",
    ]
