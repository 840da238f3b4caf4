"""`attnserve translate` and `attnserve score` (`attnserve.cli.translate`): the engines'
options checked, how a text is cut and with which glossary it is sent, documents and files,
and the SOURCE<TAB>TARGET pairs that `--glossary` and `score` read. The stand-in server of
tests/stand_ins.py upper-cases its input; here it scores pairs too."""

from __future__ import annotations

import codecs
import io
import json
import os
import re
import sys

import grpc
import pytest
from helpers import SHIPPED_TRANSLATOR
from stand_ins import StandIn, translation_started

from attnserve.cli import main, translate
from attnserve.cli.main import build_parser
from attnserve.cli.options import TORCH_DECODING
from attnserve.cli.subcommand import Failure
from service.runtime.files.word import qn_w
from service.runtime.markup import TAG
from service.wire.v1 import translation_pb2


class ScoringStandIn(StandIn):
    """StandIn that also scores: a pair's mean log-prob is minus its target's words, its total
    that times the words."""

    def Score(self, request, context):
        self.requests.append(request)
        for i, pair in enumerate(request.pairs):
            if pair.source == "fail":
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"pairs[{i}].source: refused")
        response = translation_pb2.ScoreResponse(model="translator", version="1")
        for pair in request.pairs:
            words = len(pair.target.split())
            response.scores.add(mean_log_prob=-words, log_prob=-words * words)
        return response


@pytest.fixture(scope="module")
def scoring_server():
    servicer = ScoringStandIn()
    server, address = translation_started(servicer)
    yield servicer, address
    server.stop(None)


@pytest.fixture
def stand_in(scoring_server):
    servicer, address = scoring_server
    servicer.requests.clear()
    return servicer, address


def _parsed(*argv: str):
    args = build_parser().parse_args(["translate", *argv])
    args.handler.check(args)
    return args


@pytest.mark.parametrize(
    "argv",
    [
        ["--engine", "torch", "--stream"],
        ["--engine", "torch", "--server", "127.0.0.1:1"],
        ["--engine", "torch", "--alignment", "a.png"],
        ["--checkpoint", str(SHIPPED_TRANSLATOR)],
    ],
)
def test_options_of_the_other_engine_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["translate", *argv, "hola"])
    assert exit_.value.code == 2
    assert "only with --engine" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--glossary", "x"),
        ("--text-format", "html"),
        ("--input", "x"),
        ("--target-prefix", "x"),
        ("--sentence-splitting", "none"),  # the torch engine decodes each text whole
        ("--sentence-splitting", "sentences"),
        ("--concurrency", "2"),
    ],
)
def test_the_grpc_only_inputs_and_controls_are_refused_with_torch(flag, value, capsys):
    with pytest.raises(SystemExit):
        _parsed("--engine", "torch", flag, value, "hola")
    assert f"error: {flag}: only with --engine grpc" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--input", "es.txt", "hola"], "texts or --input, not both"),
        (["--stream", "--output", "en.txt", "hola"], "--stream: not with --output"),
        (["--stream", "--input", "es.txt"], "--stream with --input: one text a line (--lines)"),
        (["--alignment", "a.png", "--input", "es.txt"], "--alignment: not with a document"),
    ],
)
def test_flags_that_would_be_ignored_are_refused(argv, message, capsys):
    """Each of these was accepted and then ignored: the texts decided over --input, the
    stream never wrote --output, --stream turned a document into lines, a document drew no
    alignment."""
    with pytest.raises(SystemExit) as exit_:
        _parsed(*argv)
    assert exit_.value.code == 2
    assert f"error: {message}" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--output", "--alignment"])
def test_an_output_or_figure_that_cannot_be_written_is_refused_before_any_call(
    flag, tmp_path, capsys
):
    """Refused at the start, not after every text was decoded (a figure written last)."""
    for path, problem in ((tmp_path, "a folder, not a file"), (tmp_path / "no" / "a.png", "no")):
        with pytest.raises(SystemExit) as exit_:
            _parsed(flag, str(path), "hola")
        assert exit_.value.code == 2
        assert f"error: {flag} {path}: {problem}" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["translate hola", "caption image.png"])
@pytest.mark.parametrize("name", ["out", "out.svg", "out.txt"])
def test_a_figure_not_named_png_is_refused_before_any_call(command, name, tmp_path, capsys):
    """A figure is PNG: out.svg and out.txt held PNG data, and caption's `out` became
    out.png, a file the command was not given."""
    flag = "--alignment" if command.startswith("translate") else "--attention"
    path = tmp_path / name
    with pytest.raises(SystemExit) as exit_:
        main([*command.split(), flag, str(path)])
    assert exit_.value.code == 2
    assert f"error: {flag} {path}: a figure is a PNG file, named .png" in capsys.readouterr().err
    args = build_parser().parse_args([*command.split(), flag, str(tmp_path / "OUT.PNG")])
    args.handler.check(args)  # .png in any case


def test_the_flags_that_go_together_are_taken():
    _parsed("--stream", "--lines", "--input", "es.txt")
    _parsed("--alignment", "a.png", "--lines", "--input", "es.txt", "--output", "en.txt")
    _parsed("--stream", "--alignment", "a.png", "hola")


def test_every_grpc_only_name_is_an_option_of_translate():
    args = build_parser().parse_args(["translate"])
    assert all(hasattr(args, name) for name in translate.GRPC_ONLY)
    assert "checkpoint" not in translate.GRPC_ONLY and "n_best" not in translate.GRPC_ONLY


def test_the_torch_engine_decodes_as_the_server_by_default_with_the_shipped_translator():
    args = _parsed("--engine", "torch", "--n-best", "2", "hola")
    assert args.checkpoint == SHIPPED_TRANSLATOR and args.n_best == 2
    assert {k: getattr(args, k) for k in TORCH_DECODING if k != "n_best"} == {
        k: v for k, v in TORCH_DECODING.items() if k != "n_best"
    }
    grpc = _parsed("hola")
    assert grpc.beam_size is None and grpc.checkpoint is None and grpc.concurrency == 4
    assert grpc.sentence_splitting == "sentences" and grpc.text_format is None


def test_pairs_are_read_by_tab_skipping_blank_lines():
    text = "hola\thello\n\n  \nperro\tdog\tcan\n\tempty source\n"
    assert translate._pairs(text, "") == [
        ("hola", "hello"),
        ("perro", "dog\tcan"),  # the first tab divides
        ("", "empty source"),
    ]
    with pytest.raises(Failure, match=r"^line 3: SOURCE<TAB>TARGET expected$"):
        translate._pairs("a\tb\n\nno tab here\n", "")
    with pytest.raises(Failure, match=r"^--glossary line 1: SOURCE<TAB>TARGET expected$"):
        translate._pairs("no tab", "--glossary ")


def test_a_pair_holding_a_vertical_tab_or_u2028_stays_one_pair():
    """Only a file's line ends cut pairs: not what str.splitlines also cuts at."""
    text = "Pulsa\x0bGuardar\tPress\x0bSave\r\nhola\u2028amigo\thello\u2028friend\n"
    assert translate._pairs(text, "") == [
        ("Pulsa\x0bGuardar", "Press\x0bSave"),
        ("hola\u2028amigo", "hello\u2028friend"),
    ]
    with pytest.raises(Failure, match=r"^line 2: SOURCE<TAB>TARGET expected$"):
        translate._pairs("a\tb\x0cc\nno tab\n", "")


def test_a_glossary_file_is_read_or_its_error_is_a_failure(tmp_path):
    path = tmp_path / "glossary.tsv"
    path.write_text("gato\tcat\nmundo\tworld\n", encoding="utf-8")
    assert translate._glossary(path) == [("gato", "cat"), ("mundo", "world")]
    with pytest.raises(Failure, match=r"^--glossary: .*No such file"):
        translate._glossary(tmp_path / "none.tsv")


def test_splitting_format_and_glossary_go_with_every_call(stand_in, tmp_path, capsys):
    servicer, address = stand_in
    glossary = tmp_path / "glossary.tsv"
    glossary.write_text("gato\tcat\n", encoding="utf-8")
    argv = ["translate", "--server", address, "--sentence-splitting", "lines"]
    argv += ["--text-format", "html", "--glossary", str(glossary)]
    assert main([*argv, "<b>el gato</b>"]) == 0
    assert main([*argv, "--stream", "uno"]) == 0
    assert capsys.readouterr().out.splitlines() == ["<B>EL GATO</B>", "UNO"]
    for request in servicer.requests:
        assert request.sentence_splitting == translation_pb2.SENTENCE_SPLITTING_LINES
        assert request.text_format == translation_pb2.TEXT_FORMAT_HTML
        assert [(e.source, e.target) for e in request.glossary] == [("gato", "cat")]
    assert len(servicer.requests) == 2
    assert main(["translate", "--server", address, "hola"]) == 0
    plain = servicer.requests[-1]
    assert plain.text_format == translation_pb2.TEXT_FORMAT_PLAIN and list(plain.glossary) == []
    assert plain.sentence_splitting == translation_pb2.SENTENCE_SPLITTING_SENTENCES


@pytest.mark.parametrize(
    ("encoding", "errors"),
    [("latin-1", "strict"), ("ascii", "strict"), ("ascii", "surrogateescape")],  # C locale's
)
def test_a_stdout_that_cannot_encode_the_text_gets_escapes_not_a_traceback(
    stand_in, monkeypatch, encoding, errors
):
    _, address = stand_in
    text = "ωμέγα ñ 😀"
    argv = ["translate", "--server", address, text]
    for flags in (["--json"], ["--json", "--stream"], []):
        stdout = io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors=errors)
        monkeypatch.setattr(sys, "stdout", stdout)
        assert main([*argv, *flags]) == 0
        stdout.flush()
        lines = stdout.buffer.getvalue().decode(encoding).splitlines()
        if flags:
            result = json.loads(lines[-1])
            result = result.get("result", result)  # a stream's last line: {"result": ...}
            assert result["translations"][0]["source"] == text
            assert result["translations"][0]["hypotheses"][0]["text"] == text.upper()
        else:  # what the encoding lacks, as Python writes it
            assert lines == [text.upper().encode(encoding, "backslashreplace").decode(encoding)]


def test_a_bad_glossary_fails_before_any_call(stand_in, tmp_path, capsys):
    servicer, address = stand_in
    glossary = tmp_path / "glossary.tsv"
    glossary.write_text("gato cat\n", encoding="utf-8")
    assert main(["translate", "--server", address, "--glossary", str(glossary), "hola"]) == 1
    assert capsys.readouterr().err == "error: --glossary line 1: SOURCE<TAB>TARGET expected\n"
    assert servicer.requests == []


def test_nothing_to_translate_makes_no_call(stand_in, tmp_path, monkeypatch, capsys):
    servicer, address = stand_in
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n  \n"))
    assert main(["translate", "--server", address]) == 0
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    assert main(["translate", "--server", address, "--input", str(empty), "--lines"]) == 0
    assert capsys.readouterr().out == "" and servicer.requests == []


def test_nothing_to_translate_as_json_is_still_one_object(stand_in, tmp_path, monkeypatch, capsys):
    """--json promises one JSON object: an empty stdin, file of lines or document (blank
    lines alone) gives one with no translation, not nothing or the blank lines."""
    servicer, address = stand_in
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n", encoding="utf-8")
    argv = ["translate", "--server", address, "--json", "--model", "m"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n"))
    assert main(argv) == 0
    assert main([*argv, "--lines", "--input", str(blank)]) == 0
    assert main([*argv, "--input", str(blank)]) == 0
    out = tmp_path / "out.json"
    assert main([*argv, "--input", str(blank), "--output", str(out)]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    printed.append(json.loads(out.read_text(encoding="utf-8")))
    nothing = {"model": "m", "version": "", "translations": []}
    nothing["token_counts"] = {"input_tokens": 0, "output_tokens": 0}
    assert printed == [nothing] * 4 and servicer.requests == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="a device that is always full")
def test_an_output_that_fails_to_be_written_is_one_line_of_error(stand_in, capsys):
    _, address = stand_in
    assert main(["translate", "--server", address, "--output", "/dev/full", "hola"]) == 1
    assert capsys.readouterr().err == "error: --output /dev/full: No space left on device\n"


def test_nothing_to_translate_still_writes_the_output_file(stand_in, tmp_path):
    """An empty day's file translated into the file of the day before: it holds no line of it."""
    servicer, address = stand_in
    empty, output = tmp_path / "empty.txt", tmp_path / "en.txt"
    empty.write_text("\n", encoding="utf-8")
    output.write_text("the day before\n", encoding="utf-8")
    argv = ["translate", "--server", address, "--lines", "--input", str(empty)]
    assert main([*argv, "--output", str(output)]) == 0
    assert output.read_text(encoding="utf-8") == "" and servicer.requests == []


def test_a_document_as_json_is_the_response_of_its_paragraphs(stand_in, tmp_path, capsys):
    servicer, address = stand_in
    source = tmp_path / "es.txt"
    source.write_text("Hola.\n\nAdiós.\n", encoding="utf-8")
    assert main(["translate", "--server", address, "--input", str(source), "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    response = json.loads(line)
    assert [t["source"] for t in response["translations"]] == ["Hola.\n\nAdiós.\n"]
    assert response["translations"][0]["hypotheses"][0]["text"] == "HOLA.\n\nADIÓS.\n"
    assert servicer.requests[0].options.return_log_probs


class SpanishStandIn(StandIn):
    """StandIn answering the languages a Spanish-English model's server answers with."""

    def Translate(self, request, context):
        response = super().Translate(request, context)
        response.source_language, response.target_language = "es", "en"
        return response


def test_a_translated_file_declares_the_language_the_server_translated_into(tmp_path):
    import docx

    document = docx.Document()
    properties = document.add_paragraph().add_run("Hola.")._r.get_or_add_rPr()
    properties.append(properties.makeelement(qn_w("lang"), {qn_w("val"): "es-ES"}))
    source, output = tmp_path / "carta.docx", tmp_path / "letter.docx"
    document.save(source)
    server, address = translation_started(SpanishStandIn())
    try:
        argv = ["translate", "--server", address, "--input", str(source)]
        assert main([*argv, "--output", str(output)]) == 0
    finally:
        server.stop(None)
    (run,) = docx.Document(output).paragraphs[0].runs
    assert run.text == "HOLA." and run._r.rPr.find(qn_w("lang")).get(qn_w("val")) == "en"


def test_an_undecodable_document_is_exit_status_2(stand_in, tmp_path, capsys):
    servicer, address = stand_in
    source = tmp_path / "latin.txt"
    source.write_bytes("adiós".encode("latin-1"))
    assert main(["translate", "--server", address, "--input", str(source)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {source}: ")
    assert servicer.requests == []


def test_score_prints_mean_and_total_per_pair(stand_in, tmp_path, capsys):
    servicer, address = stand_in
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("hola\thello there\n\nperro\tdog\n", encoding="utf-8")
    argv = ["score", "--server", address, "--input", str(pairs), "--model-version", "3"]
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines() == ["-2.0000\t-4.0000", "-1.0000\t-1.0000"]
    (request,) = servicer.requests
    assert [(p.source, p.target) for p in request.pairs] == [
        ("hola", "hello there"),
        ("perro", "dog"),
    ]
    assert (request.model, request.version) == ("", "3")


def test_score_sends_many_pairs_in_calls_the_server_takes(stand_in, tmp_path, capsys):
    """A Score call takes 1,000 pairs at most: 2,001 go in three calls, printed in order;
    no pair at all is a usage error."""
    servicer, address = stand_in
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"uno {i}\tone\n" for i in range(2_001)), encoding="utf-8")
    assert main(["score", "--server", address, "--input", str(pairs)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2_001
    assert [len(r.pairs) for r in servicer.requests] == [1_000, 1_000, 1]
    assert servicer.requests[-1].pairs[0].source == "uno 2000"
    pairs.write_text("\n", encoding="utf-8")
    assert main(["score", "--server", address, "--input", str(pairs)]) == 2
    assert capsys.readouterr().err == "error: no pairs to score\n"


def test_a_pair_refused_in_a_later_call_is_named_among_all_pairs(stand_in, tmp_path, capsys):
    """The second call's pairs[0] is the file's pair 1000: before, the error said pairs[0]."""
    _, address = stand_in
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("uno\tone\n" * 1_000 + "fail\tone\n", encoding="utf-8")
    assert main(["score", "--server", address, "--input", str(pairs)]) == 1
    captured = capsys.readouterr()
    assert captured.err == "error: INVALID_ARGUMENT: pairs[1000].source: refused\n"
    assert captured.out == ""


def test_score_reads_stdin_and_prints_the_response_as_json(stand_in, monkeypatch, capsys):
    _, address = stand_in
    monkeypatch.setattr(sys, "stdin", io.StringIO("gato\tcat\n"))
    assert main(["score", "--server", address, "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    response = json.loads(line)
    assert response["model"] == "translator"
    assert response["scores"] == [
        {"tokens": [], "token_log_probs": [], "log_prob": -1.0, "mean_log_prob": -1.0}
    ]


def test_score_refuses_a_line_without_a_tab_and_an_unreadable_file(stand_in, tmp_path, capsys):
    servicer, address = stand_in
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("hola\thello\nperro dog\n", encoding="utf-8")
    assert main(["score", "--server", address, "--input", str(pairs)]) == 1
    assert capsys.readouterr().err == "error: line 2: SOURCE<TAB>TARGET expected\n"
    missing = tmp_path / "none.tsv"
    assert main(["score", "--server", address, "--input", str(missing)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {missing}: ")
    assert servicer.requests == []


BOM = "\ufeff".encode()  # what Windows' editors write at the start of a UTF-8 file


def test_files_and_stdin_are_read_without_a_byte_order_mark(
    stand_in, tmp_path, monkeypatch, capsys
):
    """A glossary, a --lines file, stdin and score's pairs saved with a byte order mark:
    their first term, text and source are sent without it."""
    servicer, address = stand_in
    glossary, lines, pairs = tmp_path / "g.tsv", tmp_path / "es.txt", tmp_path / "pairs.tsv"
    glossary.write_bytes(BOM + b"gato\tcat\n")
    lines.write_bytes(BOM + b"uno\ndos\n")
    pairs.write_bytes(BOM + b"hola\thello\n")
    argv = ["translate", "--server", address, "--glossary", str(glossary)]
    assert main([*argv, "--lines", "--input", str(lines)]) == 0
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BOM + b"tres\n")))
    assert main(["translate", "--server", address]) == 0
    assert main(["score", "--server", address, "--input", str(pairs)]) == 0
    assert capsys.readouterr().out.splitlines() == ["UNO", "DOS", "TRES", "-1.0000\t-1.0000"]
    first, from_stdin, scored = servicer.requests
    assert [(e.source, e.target) for e in first.glossary] == [("gato", "cat")]
    assert list(first.texts) == ["uno", "dos"] and list(from_stdin.texts) == ["tres"]
    assert scored.pairs[0].source == "hola"


def test_an_html_input_with_json_is_sent_as_html(stand_in, tmp_path, capsys):
    """`--input page.html --json` prints the response, not a file: the page still goes as
    HTML, so its markup is kept out of the model; --text-format plain says otherwise."""
    servicer, address = stand_in
    page = tmp_path / "p.html"
    page.write_text("<p>Hola <b>amigo</b>.</p>", encoding="utf-8")
    argv = ["translate", "--server", address, "--input", str(page), "--json"]
    assert main(argv) == 0
    assert servicer.requests[-1].text_format == translation_pb2.TEXT_FORMAT_HTML
    assert json.loads(capsys.readouterr().out)["translations"]
    assert main([*argv, "--text-format", "plain"]) == 0
    assert servicer.requests[-1].text_format == translation_pb2.TEXT_FORMAT_PLAIN


@pytest.mark.parametrize(
    ("name", "text_format"),
    [("p.xhtml", translation_pb2.TEXT_FORMAT_HTML), ("d.xml", translation_pb2.TEXT_FORMAT_XML)],
)
def test_an_xhtml_or_xml_input_is_sent_in_its_format(stand_in, tmp_path, capsys, name, text_format):
    """An .xhtml or .xml --input went as plain text: its tags were words to the model, and
    came back translated, moved or lost."""
    servicer, address = stand_in
    source = tmp_path / name
    source.write_text('<?xml version="1.0"?><p>Hola <b>amigo</b>.</p>', encoding="utf-8")
    assert main(["translate", "--server", address, "--input", str(source)]) == 0
    assert servicer.requests[-1].text_format == text_format
    argv = ["translate", "--server", address, "--input", str(source), "--text-format", "plain"]
    assert main(argv) == 0
    assert servicer.requests[-1].text_format == translation_pb2.TEXT_FORMAT_PLAIN


@pytest.mark.parametrize("name", ["p.xhtml", "d.xml"])
def test_an_xml_input_s_cdata_is_translated_as_its_text(stand_in, tmp_path, capsys, name):
    """In an XML document (.xhtml, .xml) a CDATA section is text: it is sent as that text,
    escaped, and so is translated, where it was sent as markup, left untranslated; a script's
    CDATA stays as it was."""
    servicer, address = stand_in
    source = tmp_path / name
    script = "<script><![CDATA[if (a < b) go();]]></script>"
    source.write_text(f"<p><![CDATA[Tom & Jerry comen pan.]]></p>{script}", encoding="utf-8")
    assert main(["translate", "--server", address, "--input", str(source)]) == 0
    sent = "".join(servicer.requests[-1].texts)
    assert "Tom &amp; Jerry comen pan." in sent and script in sent
    # the stand-in upper-cases the whole text it is sent, its markup too
    assert capsys.readouterr().out == f"<p>Tom &amp; Jerry comen pan.</p>{script}".upper()


@pytest.mark.parametrize("bom", [codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF8])
def test_a_subtitle_file_of_any_encoding_is_written_to_stdout_as_text(
    stand_in, tmp_path, capsys, bom
):
    """An .srt or .html file read in UTF-16 (as Windows saves subtitles) or UTF-8 with a byte
    order mark comes back to standard output as its text, the mark left out."""
    _, address = stand_in
    encoding = {codecs.BOM_UTF16_LE: "utf-16-le", codecs.BOM_UTF16_BE: "utf-16-be"}
    subtitles = "1\r\n00:00:01,000 --> 00:00:02,000\r\nhola señor\r\n\r\n"
    for name, text in (("s.srt", subtitles), ("p.html", "<p>Adiós</p>")):
        source = tmp_path / name
        source.write_bytes(bom + text.encode(encoding.get(bom, "utf-8")))
        assert main(["translate", "--server", address, "--input", str(source)]) == 0
        out = capsys.readouterr().out
        assert out == text.upper()  # the stand-in upper-cases what it translates


def test_a_formatted_file_comes_back_in_its_format(stand_in, tmp_path, capsys):
    """A .docx's paragraphs translated (the stand-in upper-cases them), with alignments asked
    for where a paragraph has several runs, and written back as a .docx; HTML as HTML."""
    import docx

    servicer, address = stand_in
    document = docx.Document()
    paragraph = document.add_paragraph("El perro ")
    paragraph.add_run("come").bold = True
    document.add_paragraph("Buenos días.")
    source, target = tmp_path / "carta.docx", tmp_path / "letter.docx"
    document.save(source)
    argv = ["translate", "--server", address, "--input", str(source), "--output", str(target)]
    assert main(argv) == 0
    (request,) = servicer.requests
    assert list(request.texts) == ["El perro come", "Buenos días."]
    assert request.options.return_alignment
    assert request.text_format == translation_pb2.TEXT_FORMAT_PLAIN
    written = docx.Document(target)
    assert [p.text for p in written.paragraphs] == ["EL PERRO COME", "BUENOS DÍAS."]
    page, translated = tmp_path / "p.html", tmp_path / "p.en.html"
    page.write_text("<p>Hola <b>amigo</b>.</p>", encoding="utf-8")
    argv = ["translate", "--server", address, "--input", str(page), "--output", str(translated)]
    assert main(argv) == 0
    assert servicer.requests[-1].text_format == translation_pb2.TEXT_FORMAT_HTML
    assert not servicer.requests[-1].options.return_alignment  # one run: nothing to cut
    assert translated.read_text(encoding="utf-8") == "<P>HOLA <B>AMIGO</B>.</P>"
    old = tmp_path / "old.htm"  # HTML by its other suffix, to standard output
    old.write_text("<p>Adiós</p>", encoding="utf-8")
    capsys.readouterr()
    assert main(["translate", "--server", address, "--input", str(old)]) == 0
    assert capsys.readouterr().out == "<P>ADIÓS</P>"
    calls = len(servicer.requests)
    assert main(["translate", "--server", address, "--input", str(source)]) == 2  # no --output
    assert "is written to --output FILE" in capsys.readouterr().err
    broken = tmp_path / "broken.pptx"
    broken.write_bytes(b"not a zip")
    argv = ["translate", "--server", address, "--input", str(broken), "--output", str(target)]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(f"error: {broken}: not a .pptx file")
    assert len(servicer.requests) == calls  # neither called


def test_a_pdf_comes_back_as_a_pdf(stand_in, tmp_path, capsys):
    """A .pdf --input was sent as text (its bytes decoded), not read as a document."""
    from pdfminer.high_level import extract_text
    from reportlab.pdfgen import canvas

    servicer, address = stand_in
    source, target = tmp_path / "carta.pdf", tmp_path / "letter.pdf"
    page = canvas.Canvas(str(source))
    page.drawString(72, 700, "Buenos días.")
    page.save()
    argv = ["translate", "--server", address, "--input", str(source), "--output", str(target)]
    assert main(argv) == 0
    assert [list(request.texts) for request in servicer.requests] == [["Buenos días."]]
    assert extract_text(str(target)).split() == ["BUENOS", "DÍAS."]
    assert main(["translate", "--server", address, "--input", str(source)]) == 2  # no --output
    assert "is written to --output FILE" in capsys.readouterr().err


def test_a_long_html_document_is_never_cut_inside_a_tag(stand_in, tmp_path, capsys):
    """A page past one text's 100,000 characters, on one line, was cut after its last space,
    inside a tag (`<a href="/x" | title="...">`): the tag's halves went to the model as words."""
    from service.runtime.markup import TAG

    servicer, address = stand_in
    title = "V" * 200  # few words: the stand-in's alignments grow as their square
    links = "".join(f'<p>Frase{i}.</p><a href="/x" title="{title}">enlace</a>' for i in range(700))
    page = f"<html><body>{links}</body></html>"
    source, target = tmp_path / "p.html", tmp_path / "en.txt"
    source.write_text(page, encoding="utf-8")
    assert main(["translate", "--server", address, "--input", str(source), "--json"]) == 0
    texts = [text for request in servicer.requests for text in request.texts]
    assert len(texts) > 1 and "".join(texts) == page
    assert all(len(text) <= 100_000 and "<" not in re.sub(TAG, "", text) for text in texts)
    assert [request.text_format for request in servicer.requests] == [
        translation_pb2.TEXT_FORMAT_HTML
    ]
    capsys.readouterr()
    source = tmp_path / "p.txt"
    source.write_text(page, encoding="utf-8")
    argv = ["--input", str(source), "--text-format", "html", "--output", str(target)]
    assert main(["translate", "--server", address, *argv]) == 0
    assert target.read_text(encoding="utf-8") == page.upper()


def upper_words(text: str) -> str:
    """`text` with its words upper-cased and its tags as they are."""
    pieces = re.split(f"({TAG})", text)
    return "".join(p if i % 2 else p.upper() for i, p in enumerate(pieces))


class MarkupStandIn(StandIn):
    """Translates HTML as the server does its markup: the words upper-cased, the tags kept as
    they are; each text one sentence, between the tags at its ends."""

    def _response(self, request, texts, context):
        response = super()._response(request, texts, context)
        for text, translation in zip(texts, response.translations, strict=True):
            kept = upper_words(text)
            words = re.sub(TAG, lambda tag: " " * len(tag.group()), text)
            start, end = len(words) - len(words.lstrip()), len(words.rstrip())
            for hypothesis in translation.hypotheses:  # a rank's "!" at its sentence's end
                hypothesis.text = kept[:end] + hypothesis.text[len(text) :] + kept[end:]
            translation.sentences.add(
                source_start=start, source_end=end, target_start=start, target_end=end
            )
        return response


@pytest.fixture
def markup_stand_in():
    servicer = MarkupStandIn()
    server, address = translation_started(servicer)
    yield servicer, address
    server.stop(None)


def test_a_long_html_document_as_json_shows_its_own_markup(
    markup_stand_in, tmp_path, capsys, monkeypatch
):
    """A block past the text limit goes in parts, each reopening the inline elements open
    where it starts and closing those open where it ends: `--json` showed every part with
    those tags, which are not in the document there, and sentences' spans that counted
    them."""
    from service.runtime import requests

    servicer, address = markup_stand_in
    monkeypatch.setattr(requests, "MAX_TEXT_CHARS", 120)
    page = '<p>Hola. <b class="x">' + "Uno dos. " * 20 + "</b> Fin.</p>"
    source = tmp_path / "p.html"
    source.write_text(page, encoding="utf-8")
    argv = ["translate", "--server", address, "--input", str(source), "--json", "--n-best", "2"]
    assert main(argv) == 0
    sent = list(servicer.requests[-1].texts)
    assert any(t.startswith('<b class="x">') for t in sent) and any(
        t.endswith("</b>") for t in sent
    )
    translations = json.loads(capsys.readouterr().out)["translations"]
    assert "".join(t["source"] for t in translations) == page
    for rank in range(2):
        texts = [t["hypotheses"][rank]["text"] for t in translations]
        assert "".join(texts).replace("!", "") == upper_words(page)
    for t in translations:
        (sentence,) = t["sentences"]
        source_words = t["source"][sentence["source_start"] : sentence["source_end"]]
        target_words = t["hypotheses"][0]["text"][sentence["target_start"] : sentence["target_end"]]
        assert upper_words(source_words) == target_words and source_words.strip(), t


def test_a_part_too_long_for_the_tags_it_repeats_is_refused_for_them(
    stand_in, tmp_path, capsys, monkeypatch
):
    """A link's start tag, repeated in the part after a cut inside it, made that part longer
    than a text may be: the page was refused as holding "a sentence longer than 100
    characters", which it does not."""
    from service.runtime import requests

    servicer, address = stand_in
    monkeypatch.setattr(requests, "MAX_TEXT_CHARS", 100)
    link = '<a href="/' + "x" * 60 + '">'
    page = tmp_path / "p.html"
    page.write_text(f"<p>{link}Uno. Una frase algo más larga, de veinte.</a></p>", "utf-8")
    assert main(["translate", "--server", address, "--input", str(page), "--json"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f'error: {page}: the sentence "Una frase algo más larga, de veinte."')
    assert "72 of them repeat the tags of <a>" in error and servicer.requests == []


def test_a_long_xml_document_is_never_cut_inside_a_tag(stand_in, tmp_path):
    """`--text-format xml` cut a document past 100,000 characters as plain text, after its
    last space in reach: inside a tag (`<t id="404" | note="...">`), whose halves went to the
    model as words."""
    from service.runtime.markup import TAG

    servicer, address = stand_in
    note = "V" * 200
    items = "".join(f'<t id="{i}" note="{note} W">Frase {i} aquí.</t> ' for i in range(600))
    page = f"<doc>{items}</doc>"
    source, target = tmp_path / "d.xml", tmp_path / "en.xml"
    source.write_text(page, encoding="utf-8")
    argv = ["--input", str(source), "--text-format", "xml", "--output", str(target)]
    assert main(["translate", "--server", address, *argv]) == 0
    texts = [text for request in servicer.requests for text in request.texts]
    assert len(texts) > 1 and all(len(text) <= 100_000 for text in texts)
    assert all("<" not in re.sub(TAG, "", text) for text in texts), [t[-40:] for t in texts]
    assert [request.text_format for request in servicer.requests] == [
        translation_pb2.TEXT_FORMAT_XML
    ]
    # each part closes the root where it ends and opens it again where it starts
    sources = [text.removeprefix("<doc>") if i else text for i, text in enumerate(texts)]
    sources = [text.removesuffix("</doc>") for text in sources[:-1]] + sources[-1:]
    assert "".join(sources) == page and target.exists()
