"""`translate` (over gRPC, or here with the PyTorch checkpoint) and `score` (over gRPC).
Either engine's translations are read into `results`, so both print the same lines and JSON."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from attnserve.cli import remote
from attnserve.cli.figures import write_alignment
from attnserve.cli.options import (
    TORCH_DECODING,
    add_decoding,
    add_engine,
    add_server,
    check_engine,
    check_figure,
    check_output,
    positive,
    utf8,
)
from attnserve.cli.render import (
    encodes_all,
    lines,
    output,
    progress,
    read_lines,
    read_text,
    show,
)
from attnserve.cli.results import TokenCounts, Translation, Translations
from attnserve.cli.subcommand import Failure, Subcommand
from models.shipped import SHIPPED_TRANSLATOR
from service.runtime.documents import SPLITTING
from service.runtime.markup import FORMATS, Part, within

# in their format
FILES = (".html", ".htm", ".srt", ".epub", ".docx", ".pptx", ".odt", ".odp", ".pdf")
TEXT_FILES = (".html", ".htm", ".srt")  # of those, written to standard output without --output
# the text format of a document --input by its suffix, where --text-format does not say
MARKUP_SUFFIXES = {".html": "html", ".htm": "html", ".xhtml": "html", ".xml": "xml"}
XML_SUFFIXES = (".xhtml", ".xml")  # XML documents, whose CDATA sections are text

TIMEOUT = 60.0  # seconds, the default deadline of a translate or score call
CONCURRENCY = 4  # calls in flight by default
# translate's options that mean something over gRPC only
GRPC_ONLY = (
    "server",
    "stream",
    "alignment",
    "timeout",
    "model",
    "model_version",
    "source_language",
    "target_language",
    "input",
    "lines",
    "sentence_splitting",
    "concurrency",
    "output",
    "tls",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "token_file",
    "target_prefix",
    "suppress",
    "text_format",
    "glossary",
)


class Translate(Subcommand):
    name = "translate"
    help = "translate Spanish text to English (over gRPC, or locally with --engine torch)"
    description = (
        "Decoding options not given are left to the server over gRPC; with --engine torch "
        "they default as the server's do: beam size 1 (greedy), max length 256, length "
        "penalty 1, n-best 1, no sampling. One line per text, or RANK<TAB>SCORE<TAB>TEXT per "
        "hypothesis when there are several; a backslash, line break or tab of a text is "
        "written \\\\, \\n, \\r or \\t, so that each text stays one line. A failed call "
        "prints `error: CODE: details` on stderr and exits with status 1."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "texts",
            nargs="*",
            type=utf8,
            help="texts; read one a line from --input or stdin when none",
        )
        _add_inputs(parser)
        add_engine(parser)
        add_server(parser, TIMEOUT)
        parser.add_argument(
            "--model", type=utf8, help="model name (default: the server's translator)"
        )
        parser.add_argument(
            "--model-version", type=utf8, help="model version (default: the newest loaded)"
        )
        parser.add_argument(
            "--source-language",
            type=utf8,
            help="the texts' language (default: the model's only one, or detected where it "
            "takes a language token)",
        )
        parser.add_argument(
            "--target-language",
            type=utf8,
            help="the language to write (a multilingual model needs it); with no --model the "
            "server picks the translator that covers the languages",
        )
        parser.add_argument(
            "--stream",
            action="store_true",
            help="show each translation growing step by step on stderr, one text after another",
        )
        parser.add_argument(
            "--alignment",
            type=Path,
            metavar="OUT.png",
            help="write the best hypothesis' cross-attention heatmap (OUT-1.png, ... for several)",
        )
        parser.add_argument(
            "--checkpoint",
            type=Path,
            help="--engine torch: the checkpoint (also a run's last.pt, best.pt, "
            "snapshots/step-*.pt)",
        )
        parser.add_argument("--n-best", type=int, help="hypotheses per text")
        parser.add_argument(
            "--json",
            action="store_true",
            help="one JSON object: every hypothesis with its scores, log-probs and alignment, "
            "the same whichever engine decodes",
        )
        add_decoding(parser, None)

    def check(self, args: argparse.Namespace) -> None:
        check_engine(self.parser, args, GRPC_ONLY, TORCH_DECODING, SHIPPED_TRANSLATOR)
        if args.engine == "grpc":  # None above: given or not, with the torch engine
            args.sentence_splitting = args.sentence_splitting or SPLITTING[0]
            args.concurrency = args.concurrency or CONCURRENCY
        check_output(self.parser, args.output)
        check_figure(self.parser, args.alignment, "--alignment")
        _check_inputs(self.parser, args)

    def run(self, args: argparse.Namespace) -> int:
        if args.engine == "grpc":
            return remote.client_call(_translate, args)
        from attnserve.cli import local  # torch

        texts = args.texts or read_lines(None)
        if texts is None:
            return 2
        show(local.translate(args, texts), args.json)
        return 0


def _check_inputs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses inputs and outputs that do not go together, rather than ignoring one."""
    if args.input is not None and args.texts:
        parser.error("texts or --input, not both")
    if args.stream and args.output is not None:
        parser.error("--stream: not with --output (the translations grow on the terminal)")
    if args.input is not None and not args.lines:  # a document
        if args.stream:
            parser.error("--stream with --input: one text a line (--lines)")
        if args.alignment is not None:
            parser.error("--alignment: not with a document --input (texts, or --lines)")


def _add_inputs(parser: argparse.ArgumentParser) -> None:
    """Where the texts come from, how the server cuts them, and where translations go."""
    parser.add_argument(
        "--input",
        type=Path,
        help="a file translated as one document: its paragraphs, blank lines and line breaks "
        "kept; a .docx, .pptx, .odt, .odp, .pdf, .srt, .epub or .html file written back in "
        "its format, its formatting kept (one text a line with --lines)",
    )
    parser.add_argument(
        "--lines", action="store_true", help="--input holds one text a line, each translated apart"
    )
    parser.add_argument(
        "--sentence-splitting",
        choices=SPLITTING,
        help="where the server cuts a text into inputs decoded apart (default: sentences, and "
        "line breaks)",
    )
    parser.add_argument(
        "--text-format",
        choices=FORMATS,
        help="html, xml: the markup is kept and only the text between it translated "
        "(default: plain; html for an .html, .htm or .xhtml --input, xml for an .xml one)",
    )
    parser.add_argument(
        "--glossary",
        type=Path,
        help="SOURCE<TAB>TARGET terms, one a line: each source term found is translated as given",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="write the translations here, one a line (a translated --input document: the "
        "document)",
    )
    parser.add_argument(
        "--concurrency",
        type=positive,
        help=f"calls in flight (64 texts a call; default {CONCURRENCY})",
    )


def _translate(channel, args: argparse.Namespace) -> int:
    try:
        options = remote.request_options(args, args.json or args.alignment is not None)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    call = _translate_call(args, options)
    if args.input is not None and not args.lines:
        return _translate_document(channel, args, call)
    texts = args.texts or read_lines(args.input)
    if texts is None:
        return 2
    if not texts:  # no call; --output holds what was translated: nothing (or --json's object)
        with output(args.output) as out:
            show(_untranslated(args), args.json, out)
        return 0
    if args.stream:
        translations = _translate_stream(channel, args, texts, call)
    else:
        translations = _translate_batches(channel, args, texts, call)
    if args.alignment is not None:
        for index, translation in enumerate(translations):
            write_alignment(args.alignment, index, len(texts), translation)
    return 0


def _untranslated(args: argparse.Namespace) -> Translations:
    """The results of a call never made, there being nothing to translate: no translation, of
    the model and version asked for ("": the server's)."""
    return Translations(args.model or "", args.model_version or "", (), TokenCounts(0, 0))


def _translate_call(args: argparse.Namespace, options) -> dict:
    """`remote.call_options` and where the server cuts the texts."""
    return {
        **remote.call_options(args, options, TIMEOUT),
        "sentence_splitting": args.sentence_splitting,
        "text_format": args.text_format or FORMATS[0],
        "glossary": _glossary(args.glossary) if args.glossary else [],
        "source_language": args.source_language or "",
        "target_language": args.target_language or "",
    }


def _translate_stream(channel, args: argparse.Namespace, texts: list[str], call: dict) -> list:
    from service import client

    def stream(text: str):
        return client.translate_stream(channel, text, **call)

    def read(response, index: int):
        return remote.translations(response, texts[index : index + 1], index)

    return remote.stream_each(stream, texts, read, "text", args.json, sys.stderr)


def _translate_batches(channel, args: argparse.Namespace, texts: list[str], call: dict) -> list:
    """Every text, 64 a call with --concurrency calls in flight; printed once all are back."""
    from service import client

    many = len(texts) > client.TEXTS_PER_CHUNK
    with progress(len(texts), "translated", "text", many) as shown:
        response = client.translate_batches(
            channel, texts, concurrency=args.concurrency, progress=shown, **call
        )
    results = remote.translations(response, texts)
    with output(args.output) as out:
        show(results, args.json, out)
    return list(results.translations)


def _translate_document(channel, args: argparse.Namespace, call: dict) -> int:
    """--input as one document: cut at paragraph breaks (HTML after its blocks and sentences,
    XML after its sentences, outside their markup) into texts of at most the server's default
    max_text_chars, translated in one call, put back together (--json: each text's
    translation as the document holds it, _as_written); a formatted file in its format
    (_translate_file)."""
    from service import client

    suffix = args.input.suffix.lower()
    if suffix in FILES and not (args.json and suffix in (".html", ".htm")):
        return _translate_file(channel, args, call)
    if suffix in MARKUP_SUFFIXES and args.text_format is None:  # unless --text-format says not
        call = {**call, "text_format": MARKUP_SUFFIXES[suffix]}
    from service.runtime.files import decoded_text

    try:  # as its bytes say: line breaks (CRLF too) kept, a byte order mark kept out
        bom, encoding, text = decoded_text(args.input.read_bytes())
    except (OSError, UnicodeDecodeError) as error:
        print(f"error: {args.input}: {error}", file=sys.stderr)
        return 2
    if suffix in XML_SUFFIXES and call.get("text_format") != "plain":
        from service.runtime import markup

        text = markup.cdata_as_text(text)  # in XML a CDATA section is text: translated
    try:  # markup never cut inside a tag, a comment or a script
        parts = _document_parts(text, call.get("text_format"))
    except ValueError as error:
        print(f"error: {args.input}: {error}", file=sys.stderr)
        return 2
    sent = [p for p in parts if p.source.strip()]
    texts = [p.text for p in sent]
    if texts:
        response = client.translate(channel, texts, **call)
        results = _as_written(remote.translations(response, texts), sent)
    else:
        results = _untranslated(args)
    translated = iter(results.translations)
    whole = "".join(
        next(translated).hypotheses[0].text if p.source.strip() else p.source for p in parts
    )
    if args.output is not None and not args.json:
        return _written(args.output, bom + whole.encode(encoding))
    with output(args.output) as out:
        if args.json:
            show(results, True, out)
        else:
            out.write(whole)
    return 0


def _document_parts(text: str, text_format: str | None) -> list[Part]:
    """The texts of a document, each within the server's default max_text_chars: HTML cut
    after blocks and sentences outside its markup (files.texts.html_parts), XML after sentences
    outside its markup (markup.parts), other text after paragraph breaks
    (client.document_parts)."""
    from service import client
    from service.runtime import markup
    from service.runtime.files.texts import html_parts
    from service.runtime.requests import MAX_TEXT_CHARS

    if text_format == "html":
        return html_parts(text, MAX_TEXT_CHARS)
    if text_format == "xml":
        return markup.parts(text, MAX_TEXT_CHARS, "xml")
    return [Part(part) for part in client.document_parts(text)]


def _as_written(results: Translations, parts: list[Part]) -> Translations:
    """The translations of a document's `parts` as the document holds them: each source
    without the tags its part added at a cut (Part.opened, Part.closed), each hypothesis
    without them where it kept them (Part.unwrapped), each sentence's span moved to match."""
    translations = zip(results.translations, parts, strict=True)
    return replace(results, translations=tuple(_part_as_written(t, p) for t, p in translations))


def _part_as_written(translation: Translation, part: Part) -> Translation:
    if not part.opened and not part.closed:
        return translation
    spans = [part.unwrapped(h.text) for h in translation.hypotheses]
    hypotheses = tuple(
        replace(h, text=h.text[begin:end])
        for h, (begin, end) in zip(translation.hypotheses, spans, strict=True)
    )
    opened, length = len(part.opened), len(part.source)
    begin, end = spans[0] if spans else (0, 0)  # the sentences' targets: the best hypothesis
    sentences = tuple(
        replace(
            s,
            source_start=within(s.source_start, opened, length),
            source_end=within(s.source_end, opened, length),
            target_start=within(s.target_start, begin, end - begin),
            target_end=within(s.target_end, begin, end - begin),
        )
        for s in translation.sentences
    )
    return replace(translation, source=part.source, hypotheses=hypotheses, sentences=sentences)


def _translate_file(channel, args: argparse.Namespace, call: dict) -> int:
    """A formatted file (service.runtime.files) read into paragraphs of runs, translated 64
    paragraphs a call (with alignments where a paragraph has several runs, which cut each
    translation back into them), written to --output in its format."""
    from google.protobuf.json_format import MessageToDict

    from service import client
    from service.runtime import files

    suffix = args.input.suffix.lower()
    if args.json or (args.output is None and suffix not in TEXT_FILES):
        print(f"error: a {suffix} --input is written to --output FILE (no --json)", file=sys.stderr)
        return 2
    try:
        document = files.read_file(suffix, args.input.read_bytes())
    except (OSError, ValueError, UnicodeDecodeError, ImportError) as error:
        print(f"error: {args.input}: {error}", file=sys.stderr)
        return 2
    total, size, done = len(document.paragraphs), client.TEXTS_PER_CHUNK, 0
    languages = ("", "")  # the source's and the target's, as the server answers them
    with progress(total, "translated", "paragraph", total > size) as shown:
        for batch in document.batches(size):
            options = type(call["options"])()
            options.CopyFrom(call["options"])
            options.return_alignment = batch.aligned
            response = client.translate(
                channel,
                batch.texts,
                **{**call, "options": options, "text_format": document.text_format},
            )
            batch.write([MessageToDict(t) for t in response.translations])
            languages = (response.source_language, response.target_language)
            done += len(batch.paragraphs)
            if shown is not None:
                shown(done)
    document.declare(*languages)  # the translation says its language where the file can
    if args.output is None:  # a text file's translation to standard output, as text
        sys.stdout.write(files.decoded_text(document.save())[2])  # in its encoding, no BOM
        return 0
    return _written(args.output, document.save())


def _written(path: Path, data: bytes) -> int:
    """`data` into `path` -> the exit status (2 and one line on stderr where it cannot be
    written)."""
    try:
        path.write_bytes(data)
    except OSError as error:
        print(f"error: --output {path}: {error}", file=sys.stderr)
        return 2
    return 0


def _glossary(path: Path) -> list[tuple[str, str]]:
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as error:
        raise Failure(f"--glossary: {error}") from error
    return _pairs(text, "--glossary ")


def _pairs(text: str, where: str) -> list[tuple[str, str]]:
    """The SOURCE<TAB>TARGET pairs of `text`'s non-empty lines; `where` begins the error of a
    line without a tab ("--glossary ", or "")."""
    pairs = []
    for number, line in enumerate(lines(text), 1):
        if line.strip():
            source, tab, target = line.partition("\t")
            if not tab:
                raise Failure(f"{where}line {number}: SOURCE<TAB>TARGET expected")
            pairs.append((source, target))
    return pairs


class Score(Subcommand):
    name = "score"
    help = "the log-probability of given translations (over gRPC)"
    description = (
        "Reads SOURCE<TAB>TARGET pairs, one a line, from --input or stdin and prints each "
        "pair's mean and total log-probability (MEAN<TAB>TOTAL), or the whole response with "
        "--json."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_server(parser, TIMEOUT)
        parser.add_argument("--input", type=Path, help="pairs, one a line (default: stdin)")
        names = {"type": utf8, "default": ""}
        parser.add_argument("--model", **names, help="model name (default: the server's)")
        parser.add_argument("--model-version", **names, help="model version (default: newest)")
        parser.add_argument("--source-language", **names, help="the sources' language")
        parser.add_argument("--target-language", **names, help="the targets' language")
        parser.add_argument("--json", action="store_true", help="the response as JSON")

    def run(self, args: argparse.Namespace) -> int:
        return remote.client_call(_score, args)


def _score(channel, args: argparse.Namespace) -> int:
    from service import client

    try:
        text = read_text(args.input)
    except (OSError, UnicodeDecodeError) as error:
        print(f"error: {args.input or 'standard input'}: {error}", file=sys.stderr)
        return 2
    pairs = _pairs(text, "")
    if not pairs:
        print("error: no pairs to score", file=sys.stderr)
        return 2
    response = client.score_batches(  # as many calls as the server's limit on pairs asks
        channel,
        pairs,
        model=args.model,
        version=args.model_version,
        timeout=args.timeout or TIMEOUT,
        source_language=args.source_language,
        target_language=args.target_language,
    )
    if args.json:
        print(remote.proto_json(response, not encodes_all(sys.stdout)))
        return 0
    for score in response.scores:
        print(f"{score.mean_log_prob:.4f}\t{score.log_prob:.4f}")
    return 0


COMMANDS = (Translate, Score)
