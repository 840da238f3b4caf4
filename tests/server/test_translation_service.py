"""TranslationService over real gRPC: outputs, streaming, concurrency, errors, deadlines."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from helpers import LONG, LONG_TEXTS
from servers import Server, rpc_error

from service import client
from service.runtime.decoding import DecodingOptions
from service.runtime.onnx_engine import OnnxEngine
from service.runtime.tokenizer import Tokenizer
from service.runtime.translation import translate_ids
from service.wire.v1 import decoding_pb2, translation_pb2

SEARCHES = {
    "greedy": (DecodingOptions(max_length=160), {"max_length": 160}),
    "beam4-nbest2": (
        DecodingOptions(beam_size=4, num_hypotheses=2, max_length=160),
        {"beam_size": 4, "num_hypotheses": 2, "max_length": 160},
    ),
}


@pytest.fixture(scope="module")
def tokenizer(exported_translator) -> Tokenizer:
    return Tokenizer(exported_translator[0].tokenizer_file)


@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_translate_equals_the_pytorch_reference(
    server, shipped_translator, tokenizer, test_sentences, search
):
    from models.reference import TorchEngine

    options, fields = SEARCHES[search]
    texts = test_sentences[:6]
    response = client.translate(server.channel, texts, timeout=60, **fields)
    model, _ = shipped_translator
    ids = tokenizer.encode_batch(texts)
    expected = translate_ids(TorchEngine(model), ids, options, 512)
    assert (response.model, response.version) == ("translator", "1")
    for translation, nbest, source in zip(response.translations, expected, ids, strict=True):
        got = [list(h.tokens) for h in translation.hypotheses]
        assert got == [tokenizer.pieces(h.tokens) for h in nbest]
        assert [h.text for h in translation.hypotheses] == [
            tokenizer.decode(h.tokens) for h in nbest
        ]
        for message, h in zip(translation.hypotheses, nbest, strict=True):
            assert message.score == pytest.approx(h.score, abs=1e-3)
            assert message.finished == h.finished
        assert translation.token_counts.input_tokens == len(source) + 1
    assert response.token_counts.input_tokens == sum(len(s) + 1 for s in ids)


def test_log_probs_and_alignment_come_with_tokens_on_both_axes(server, tokenizer):
    response = client.translate(
        server.channel, ["Yo soy de Canadá."], return_log_probs=True, return_alignment=True
    )
    (h,) = response.translations[0].hypotheses
    assert len(h.token_log_probs) == len(h.tokens) + 1  # the `</s>` step included
    assert sum(h.token_log_probs) == pytest.approx(h.log_prob, abs=1e-3)
    source = tokenizer.pieces(tokenizer.encode("Yo soy de Canadá.")) + ["</s>"]
    assert list(h.alignment.source_tokens) == source
    assert list(h.alignment.target_tokens) == list(h.tokens) + ["</s>"]
    weights = client.alignment_matrix(h.alignment)
    assert weights.shape == (len(h.tokens) + 1, len(source))
    assert weights.sum(axis=1) == pytest.approx(1.0, abs=1e-4)
    plain = client.translate(server.channel, ["Yo soy de Canadá."]).translations[0].hypotheses[0]
    assert not plain.token_log_probs and not plain.HasField("alignment")


@pytest.mark.parametrize("search", sorted(SEARCHES))
def test_stream_grows_token_by_token_and_ends_with_the_unary_result(server, search):
    _, fields = SEARCHES[search]
    text = "En el principio creó Dios los cielos y la tierra."
    events = list(client.translate_stream(server.channel, text, timeout=60, **fields))
    partials = [e.partial for e in events[:-1]]
    assert all(e.HasField("partial") for e in events[:-1]) and events[-1].HasField("result")
    steps = [p.steps for p in partials]  # one per step unless the client fell behind
    assert steps == sorted(set(steps)) and steps[0] >= 1
    unary = client.translate(server.channel, [text], timeout=60, **fields)
    assert events[-1].result == unary
    best = list(unary.translations[0].hypotheses[0].tokens)
    if search == "greedy":  # greedy partials are prefixes of the final output
        for p in partials:
            assert list(p.tokens) == best[: len(p.tokens)]
        assert list(partials[-1].tokens) == best
    else:  # the best live beam may be overtaken by a finished one: only its length is known
        assert all(len(p.tokens) == p.steps for p in partials)


def test_32_concurrent_clients_with_mixed_lengths_all_get_correct_results(
    server, exported_translator, tokenizer, test_sentences
):
    """Mixed searches and lengths share the running batches; each answer equals the same
    request decoded alone in process."""
    engine = OnnxEngine(exported_translator[0], "fp32")
    requests = []
    for i in range(32):
        text = " ".join(test_sentences[i % 12 : i % 12 + 1 + i % 3])
        fields = {"max_length": 8 + (i * 37) % 121}
        if i % 4 == 1:
            fields["beam_size"] = 3
        requests.append((text, fields))
    expected = [
        translate_ids(engine, [tokenizer.encode(text)], DecodingOptions(**fields), 512)[0][0].tokens
        for text, fields in requests
    ]
    start = threading.Barrier(32)

    def call(request):
        text, fields = request
        start.wait()
        response = client.translate(  # one to three sentences, decoded as one sequence
            server.channel, [text], timeout=120, sentence_splitting="none", **fields
        )
        return list(response.translations[0].hypotheses[0].tokens)

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(call, requests))
    assert results == [tokenizer.pieces(tokens) for tokens in expected]


def _request(**kw) -> translation_pb2.TranslateRequest:
    options = kw.pop("options", {})
    kw.setdefault("texts", ["Hola."])
    return translation_pb2.TranslateRequest(options=decoding_pb2.DecodingOptions(**options), **kw)


BAD_REQUESTS = {
    "empty text": (_request(texts=[""]), "INVALID_ARGUMENT", "texts[0]"),
    "white space only": (_request(texts=["Hola.", " \n\t "]), "INVALID_ARGUMENT", "texts[1]"),
    "invisible characters only": (
        _request(texts=["\ufeff\u200b \u00ad"]),
        "INVALID_ARGUMENT",
        "texts[0]: empty or only white space",
    ),
    "text beyond the character limit": (
        _request(texts=["palabra " * 12_501]),
        "INVALID_ARGUMENT",
        "texts[0]: 100008 characters, at most 100000",
    ),
    "text beyond the token limit": (
        _request(texts=["¿ " * 600]),
        "INVALID_ARGUMENT",
        "tokens, at most 511",
    ),
    "beam 0": (_request(options={"beam_size": 0}), "INVALID_ARGUMENT", "beam_size"),
    "max length beyond the limit": (
        _request(options={"max_length": 100000}),
        "INVALID_ARGUMENT",
        "max_length must be in 1..512",
    ),
    "invalid UTF-8 bytes": (
        _request(texts=[], utf8_texts=[b"Hola", b"caf\xc3"]),
        "INVALID_ARGUMENT",
        "utf8_texts[1]: invalid UTF-8",
    ),
    "min_length not below max_length": (
        _request(options={"max_length": 5, "min_length": 5}),
        "INVALID_ARGUMENT",
        "min_length must be in 0..max_length - 1",
    ),
    "n-gram longer than the output": (
        _request(options={"max_length": 5, "no_repeat_ngram_size": 6}),
        "INVALID_ARGUMENT",
        "no_repeat_ngram_size",
    ),
    "penalty of 0": (
        _request(options={"repetition_penalty": 0.0}),
        "INVALID_ARGUMENT",
        "repetition_penalty must be in 0.01..10",
    ),
    "penalty that overflows a logit": (
        _request(options={"repetition_penalty": 1e-40}),
        "INVALID_ARGUMENT",
        "repetition_penalty must be in 0.01..10",
    ),
    "temperature that underflows every score": (
        _request(options={"sampling": {"temperature": 1e-40, "seed": 1}}),
        "INVALID_ARGUMENT",
        "temperature must be 0 (no sampling) or in 0.01..100",
    ),
    "negative length ratio": (
        _request(options={"max_length_ratio": -1.0}),
        "INVALID_ARGUMENT",
        "max_length_ratio",
    ),
    "empty suppressed word": (
        _request(options={"suppress": ["gato", " "]}),
        "INVALID_ARGUMENT",
        "suppress[1]: empty",
    ),
    "prefix beyond max_length": (
        _request(options={"max_length": 3, "target_prefix": "the big black cat"}),
        "INVALID_ARGUMENT",
        "target_prefix",
    ),
    "unknown model": (_request(model="klingon"), "NOT_FOUND", "model: no model named 'klingon'"),
    "unknown version": (_request(version="7"), "NOT_FOUND", "version"),
    # echoed whole, its message passed the 8 KiB a client reads: RESOURCE_EXHAUSTED
    "model name of 20,000 characters": (
        _request(model="ñ" * 20_000),
        "NOT_FOUND",
        "model: no model named 'ññ",
    ),
}


@pytest.mark.slow
def test_bad_requests_are_refused_with_the_field_named_and_others_unaffected(server):
    """Every bad request while a long one is in flight; the long one still succeeds."""
    with ThreadPoolExecutor(1) as pool:
        long = pool.submit(client.translate, server.channel, LONG_TEXTS[:1], timeout=60, **LONG)
        time.sleep(0.2)
        for name, (request, code, words) in BAD_REQUESTS.items():
            error = rpc_error(lambda r=request: server.stub.Translate(r, timeout=10))
            assert error.code().name == code, name
            assert words in error.details(), (name, error.details())
        stream = translation_pb2.TranslateStreamRequest(utf8_text=b"\xff")
        error = rpc_error(lambda: list(server.stub.TranslateStream(stream, timeout=10)))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "utf8_text" in error.details()
        both = _request(texts=["  "], options={"beam_size": 0})
        details = rpc_error(lambda: server.stub.Translate(both, timeout=10)).details()
        assert "texts[0]" in details and "beam_size" in details  # every bad field at once
        assert not long.done()
        response = long.result()
    assert len(response.translations[0].hypotheses) == 16


def _settled_rows(server) -> float:
    return server.wait_for(
        lambda: server.value("attnserve_batch_rows_in_use") == 0 or None,
        what="batch rows to be freed",
    ) and server.value("attnserve_batch_rows_in_use")


@pytest.mark.parametrize("texts", [LONG_TEXTS, LONG_TEXTS[:1]], ids=["jobs", "one job"])
def test_deadline_exceeded_frees_the_batch_rows(server, texts):
    """A unary call past its deadline: its jobs' rows go free, those of several texts (their
    tasks gathered) and the one of a single text (awaited by the handler itself)."""
    tokens_before = server.value("attnserve_generated_tokens_total")
    started = time.monotonic()
    error = rpc_error(lambda: client.translate(server.channel, texts, timeout=0.4, **LONG))
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert _settled_rows(server) == 0
    freed_after = time.monotonic() - started
    generated = server.value("attnserve_generated_tokens_total") - tokens_before
    full = len(texts) * LONG["num_hypotheses"] * LONG["max_length"]
    assert 0 < generated < full / 2, (generated, full, freed_after)
    server.wait_for(
        lambda: server.value("attnserve_request_duration_seconds_count", code="DEADLINE_EXCEEDED"),
        what="the call counted as DEADLINE_EXCEEDED",
    )


def test_client_cancel_frees_the_batch_rows(server):
    tokens_before = server.value("attnserve_generated_tokens_total")
    events = client.translate_stream(server.channel, LONG_TEXTS[0], timeout=60, **LONG)
    for _, event in zip(range(3), events, strict=False):
        assert event.HasField("partial")
    assert server.value("attnserve_batch_rows_in_use") == 16
    events.close()  # leaving the stream cancels the call
    assert _settled_rows(server) == 0
    generated = server.value("attnserve_generated_tokens_total") - tokens_before
    assert 0 < generated < LONG["num_hypotheses"] * LONG["max_length"] / 2
    server.wait_for(
        lambda: server.value("attnserve_request_duration_seconds_count", code="CANCELLED"),
        what="the call counted as CANCELLED",
    )


def test_a_unary_call_of_one_job_cancelled_by_its_client_frees_its_rows(server):
    """A unary call of one text (its result awaited by the handler, no task) that the client
    cancels mid-decode: the job stops at its next step, its rows go free, and the call counts
    as CANCELLED."""
    from service.wire.v1 import translation_pb2_grpc

    stub = translation_pb2_grpc.TranslationServiceStub(server.channel)
    cancelled = server.value("attnserve_request_duration_seconds_count", code="CANCELLED")
    tokens_before = server.value("attnserve_generated_tokens_total")
    request = translation_pb2.TranslateRequest(
        texts=LONG_TEXTS[:1], options=client.decoding_options(**LONG)
    )
    call = stub.Translate.future(request, timeout=60)
    server.wait_for(lambda: server.value("attnserve_batch_rows_in_use") == 16, what="running")
    assert call.cancel()
    assert _settled_rows(server) == 0
    generated = server.value("attnserve_generated_tokens_total") - tokens_before
    assert 0 < generated < LONG["num_hypotheses"] * LONG["max_length"] / 2
    server.wait_for(
        lambda: (
            server.value("attnserve_request_duration_seconds_count", code="CANCELLED") > cancelled
        ),
        what="the call counted as CANCELLED",
    )


@pytest.mark.slow
def test_a_full_queue_is_resource_exhausted(start_server):
    """max_queued_requests 1 and 16 batch rows: the third request finds the queue full. This
    server keeps its cache as device-resident OrtValues (the GPU code path, on the CPU)."""
    small = start_server(
        "--workers",
        "1",
        "--max-batch-rows",
        "16",
        "--max-queued-requests",
        "1",
        "--io-binding",
        "true",
    )
    long = dict(LONG, num_hypotheses=16)
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(client.translate, small.channel, LONG_TEXTS[:1], **long)
        small.wait_for(lambda: small.value("attnserve_batch_rows_in_use") == 16, what="running")
        queued = pool.submit(client.translate, small.channel, LONG_TEXTS[:1], **long)
        small.wait_for(lambda: small.value("attnserve_requests_queued") == 1, what="queued")
        error = rpc_error(lambda: client.translate(small.channel, ["Hola."], timeout=10))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_queued_requests" in error.details()
        assert running.result(timeout=60) and queued.result(timeout=60)


@pytest.mark.gpu
@pytest.mark.parametrize("step", ["inline", "thread"])
def test_a_cuda_server_keeps_its_static_step_and_answers_like_the_cpu_server(
    translator_repository, tmp_path, test_sentences, step
):
    """Its static step passes the start-up check with the step inline and on its thread
    (each bucket's CUDA graph recorded alone, on the thread that replays it), and it answers
    greedy and beam 4 as a CPU server does, over HTTP as over gRPC."""
    made = {}
    try:
        cuda = ("--device", "cuda", "--step", step, "--http-listen", "127.0.0.1:0")
        for name, flags in (("cpu", ()), ("cuda", cuda)):
            (tmp_path / name).mkdir()
            made[name] = Server(translator_repository, tmp_path / name, *flags)
        for server in made.values():
            server.wait()
        texts = test_sentences[:16]
        for beam_size in (1, 4):
            on_gpu, on_cpu = (
                client.translate(made[n].channel, texts, beam_size=beam_size, timeout=60)
                for n in ("cuda", "cpu")
            )
            same = sum(
                a.hypotheses[0].text == b.hypotheses[0].text
                for a, b in zip(on_gpu.translations, on_cpu.translations, strict=True)
            )
            assert same >= 14, beam_size  # kernels differ in rounding; a near tie may flip
        log = made["cuda"].log_file.read_text()
        assert "steps with cache static" in log, log
        assert "failed to run here" not in log, log
        import httpx  # here: a GPU machine may lack it (bench/gpu_pylib.sh carries it)

        with httpx.Client(base_url=made["cuda"].http_url, timeout=60) as web:
            answer = web.post("/translate", json={"q": texts[0], "source": "es", "target": "en"})
        assert answer.status_code == 200, answer.text
        over_grpc = client.translate(made["cuda"].channel, texts[:1], timeout=60)
        assert answer.json()["translatedText"] == over_grpc.translations[0].hypotheses[0].text
    finally:
        for server in made.values():
            server.stop()


@pytest.mark.slow
def test_a_response_beyond_four_megabytes_arrives(server, test_sentences):
    """16 samples of 300 steps with their alignments over a 300-token source: about 6 MB."""
    text = " ".join(test_sentences)[:1500]
    response = client.translate(
        server.channel,
        [text],
        sentence_splitting="none",
        temperature=5.0,
        num_hypotheses=16,
        max_length=300,
        seed=5,
        return_alignment=True,
        timeout=120,
    )
    assert response.ByteSize() > 4 * 1024 * 1024
    hypotheses = response.translations[0].hypotheses
    assert len(hypotheses) == 16 and all(h.alignment.weights for h in hypotheses)


def test_a_request_of_more_texts_than_a_batch_holds_is_decoded_in_several_jobs(
    server, shipped_translator, tokenizer, test_sentences
):
    """40 texts x beam 4 need 160 rows, a batch has 64: the texts are independent sequences,
    decoded in three jobs (on any worker) and answered in order, as in process."""
    from models.reference import TorchEngine

    suffixes = [chr(97 + i % 26) + chr(97 + i // 26) for i in range(40)]  # "aa", "ba", ...
    texts = [f"{test_sentences[i % len(test_sentences)]} {s}" for i, s in enumerate(suffixes)]
    response = client.translate(
        server.channel, texts, beam_size=4, max_length=80, timeout=120, sentence_splitting="none"
    )
    model, _ = shipped_translator
    ids = tokenizer.encode_batch(texts)
    options = DecodingOptions(beam_size=4, max_length=80)
    expected = translate_ids(TorchEngine(model), ids, options, 512)
    assert len(response.translations) == 40
    got = [list(t.hypotheses[0].tokens) for t in response.translations]
    assert got == [tokenizer.pieces(nbest[0].tokens) for nbest in expected]
    assert response.token_counts.input_tokens == sum(len(s) + 1 for s in ids)


def _document(test_sentences: list[str], paragraphs: int) -> str:
    """Paragraphs of three test sentences each, apart by a blank line, some lines indented."""
    rows = []
    for p in range(paragraphs):
        chosen = [test_sentences[(3 * p + k) % len(test_sentences)] for k in range(3)]
        rows.append(("  " if p % 3 == 0 else "") + " ".join(chosen))
    return "\n\n".join(rows) + "\n"


def test_a_long_text_is_translated_sentence_by_sentence_keeping_its_layout(server, test_sentences):
    from service.runtime.documents import split_text

    text = _document(test_sentences, 40)
    assert len(text) > 4096  # over the old limit of one text
    (translation,) = client.translate(server.channel, text, timeout=120).translations
    document = split_text(text)
    assert len(translation.sentences) == len(document.sentences) > 80
    best = translation.hypotheses[0].text
    assert best.count("\n\n") == 39 and best.endswith("\n") and best.startswith("  ")
    sentences = document.sentence_texts()
    alone = client.translate(server.channel, sentences, sentence_splitting="none", timeout=120)
    for span, (start, end), each in zip(
        translation.sentences, document.sentences, alone.translations, strict=True
    ):
        assert (span.source_start, span.source_end) == (start, end)
        # each sentence decoded on its own, as if it came alone
        assert best[span.target_start : span.target_end] == each.hypotheses[0].text
    assert translation.token_counts.input_tokens == alone.token_counts.input_tokens
    aligned = client.translate(server.channel, text[:1200], return_alignment=True, timeout=120)
    (aligned,) = aligned.translations
    assert len(aligned.sentences) > 1 and not aligned.hypotheses[0].HasField("alignment")
    for span in aligned.sentences:  # each sentence's own alignment, its source tokens
        weights = client.alignment_matrix(span.alignment)
        assert weights.shape == (
            len(span.alignment.target_tokens),
            len(span.alignment.source_tokens),
        )
        assert span.alignment.source_tokens[-1] == "</s>"


def test_a_text_of_several_sentences_streams_sentence_by_sentence(server, test_sentences):
    text = "\n".join(test_sentences[:4])
    events = list(client.translate_stream(server.channel, text, timeout=60))
    partials = [e.partial.text for e in events[:-1]]
    final = events[-1].result
    assert final == client.translate(server.channel, text, timeout=60)
    best = final.translations[0].hypotheses[0].text
    assert len(partials) == 3  # after each sentence but the last, in order
    assert all(best.startswith(p) for p in partials)
    assert [p.count("\n") for p in partials] == [0, 1, 2]


def test_splitting_can_be_coarser_and_limits_name_the_sentence(server, test_sentences):
    two = "Hola, Ana. ¿Vienes mañana a la estación?"
    spans = {}
    for way in ("sentences", "lines", "none"):
        response = client.translate(server.channel, two, sentence_splitting=way)
        spans[way] = len(response.translations[0].sentences)
    assert spans == {"sentences": 2, "lines": 1, "none": 1}
    too_long = "Hola. " + " ".join(["palabra"] * 600) + "."
    error = rpc_error(lambda: client.translate(server.channel, too_long, timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "texts[0] sentence 2:" in error.details() and "tokens, at most" in error.details()
    huge = "Hola. " * 20_000
    error = rpc_error(lambda: client.translate(server.channel, huge, timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"texts[0]: {len(huge)} characters, at most 100000" in error.details()
    bad = translation_pb2.TranslateRequest(texts=["Hola."], sentence_splitting=9)
    error = rpc_error(lambda: server.stub.Translate(bad, timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "sentence_splitting" in error.details()


def test_what_must_not_be_translated_comes_back_exactly(server):
    text = (
        "Visita https://ejemplo.com/página o escribe a ana.lopez@correo.es 😺. "
        "El archivo %s tiene {count} líneas desde el 12/05/2024."
    )
    (translation,) = client.translate(server.channel, text, timeout=60).translations
    best = translation.hypotheses[0].text
    for item in ("https://ejemplo.com/página", "ana.lopez@correo.es", "😺", "%s", "{count}"):
        assert best.count(item) == 1, (item, best)
    assert "12/05/2024" in best and "ZZ" not in best  # no marker left behind
    events = list(client.translate_stream(server.channel, "Lee `git pull` ahora 🚀.", timeout=60))
    assert all("ZZ" not in e.partial.text for e in events[:-1])  # partials restored too
    final = events[-1].result.translations[0].hypotheses[0].text
    assert "`git pull`" in final and "🚀" in final


def test_the_documents_benchmark_compares_one_text_with_its_sentences(server):
    from bench.documents import document, measure

    text = document(1500)
    report = measure(server.address, text, rounds=1)
    assert report["characters"] == len(text) >= 1500 and report["sentences"] > 5
    assert report["same_translations"]  # the document's translation is its sentences' joined
    assert report["document_sentences_per_s"] > 0 and report["ratio"] > 0


def test_decoding_controls_change_what_the_server_returns(server, tokenizer):
    """A prefix starts the translation, a suppressed word never comes, a minimum length
    holds, no token repeats, and the default length bound ends a looping input."""
    text = "El gato está durmiendo en el sofá."

    def best(source: str = text, **options):
        response = client.translate(server.channel, [source], timeout=60, **options)
        return response.translations[0].hypotheses[0]

    plain = best()
    assert "cat" in plain.text
    assert best(target_prefix="A tiny").text.startswith("A tiny")
    assert "cat" not in best(suppress=["cat"]).text
    assert len(best(min_length=len(plain.tokens) + 6).tokens) >= len(plain.tokens) + 6
    unique = best(beam_size=4, no_repeat_ngram_size=1).tokens
    assert len(unique) == len(set(unique))
    two = best(text + " " + text, target_prefix="So,")
    assert two.text.startswith("So,") and two.text.count("So,") == 1  # the first sentence's
    garbage = "jajajajajaja qqq jajaja"
    assert len(best(garbage).tokens) <= 2 * len(tokenizer.encode(garbage)) + 10


def test_score_gives_the_log_probability_of_each_target_token(server, tokenizer):
    """Score's numbers are the forced decode's: the translation the server chose scores its
    own hypothesis' log-probabilities, a worse one scores lower, bad pairs are named."""
    text = "El gato está durmiendo en el sofá."
    best = client.translate(server.channel, [text], timeout=60, return_log_probs=True)
    chosen = best.translations[0].hypotheses[0]
    wrong = "Sofa the cat sleeping is on."
    response = client.score(server.channel, [(text, chosen.text), (text, wrong)], timeout=60)
    right, bad = response.scores
    assert list(right.tokens) == [*chosen.tokens, "</s>"]
    np.testing.assert_allclose(right.token_log_probs, chosen.token_log_probs, atol=1e-4)
    assert right.log_prob == pytest.approx(sum(right.token_log_probs), abs=1e-4)
    assert right.mean_log_prob == pytest.approx(right.log_prob / len(right.tokens))
    assert bad.mean_log_prob < right.mean_log_prob - 0.5
    request = translation_pb2.ScoreRequest(
        pairs=[
            translation_pb2.ScorePair(source="", target="x"),
            translation_pb2.ScorePair(source="Hola", target=" "),
        ]
    )
    error = rpc_error(lambda: server.stub.Score(request, timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "pairs[0].source" in error.details() and "pairs[1].target" in error.details()
    empty = rpc_error(lambda: server.stub.Score(translation_pb2.ScoreRequest(), timeout=10))
    assert "pairs: at least one" in empty.details()


def test_html_comes_back_with_its_markup_and_only_its_text_translated(server):
    from service.runtime.markup import well_formed

    page = (
        '<p>El gato está <b>durmiendo</b> en el <a href="/sofa?a=1&amp;b=2">sofá</a>.</p>\n'
        "<ul><li>Hola &amp; adiós</li><li>Buenos días.</li></ul><!-- no tocar. -->"
    )
    response = client.translate(server.channel, [page], timeout=60, text_format="html")
    text = response.translations[0].hypotheses[0].text
    assert well_formed(text), text
    for kept in ('<a href="/sofa?a=1&amp;b=2">', "<b>", "</b>", "&amp;", "<!-- no tocar. -->"):
        assert kept in text, (kept, text)
    assert text.startswith("<p>") and "</p>\n<ul><li>" in text and text.endswith("-->")
    assert "cat" in text and "gato" not in text
    plain = client.translate(server.channel, [page], timeout=60).translations[0]
    assert plain.hypotheses[0].text != text  # as plain text the markup is words
    streamed = list(client.translate_stream(server.channel, page, timeout=60, text_format="html"))
    assert streamed[-1].result.translations[0].hypotheses[0].text == text
    bad = translation_pb2.TranslateRequest(texts=["Hola."], text_format=9)
    error = rpc_error(lambda: server.stub.Translate(bad, timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "text_format" in error.details()


def test_a_glossary_puts_its_terms_in_the_translation_and_reports_them(server):
    texts = ["Cambia tu contraseña cada mes.", "El gato duerme."]
    glossary = {"contraseña": "passphrase", "perro": "hound"}
    response = client.translate(server.channel, texts, timeout=60, glossary=glossary)
    changed, untouched = response.translations
    assert "passphrase" in changed.hypotheses[0].text
    assert list(changed.glossary_applied) == [0] and list(untouched.glossary_applied) == []
    bad = translation_pb2.TranslateRequest(
        texts=["Hola."], glossary=[translation_pb2.GlossaryEntry(source="", target="x")]
    )
    error = rpc_error(lambda: server.stub.Translate(bad, timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "glossary[0].source" in error.details()


def test_markup_with_no_text_comes_back_as_it_is_beside_texts_translated(server):
    """HTML whose tags hold no text ("<p></p>", "&nbsp;", a comment) has no sentence to
    decode: it comes back as it is, unary and streamed, beside texts that are translated."""
    empty = ["<p></p>", "<br>", "&nbsp;", "<!-- hola -->", "<b> </b>"]
    texts = [*empty, "<p>El gato duerme.</p>"]
    response = client.translate(server.channel, texts, timeout=60, text_format="html")
    got = [t.hypotheses[0].text for t in response.translations]
    assert got[:-1] == empty and "cat" in got[-1] and got[-1].startswith("<p>")
    assert [t.token_counts.output_tokens for t in response.translations[:-1]] == [0] * 5
    events = list(
        client.translate_stream(server.channel, "<p></p>", timeout=60, text_format="html")
    )
    assert [e.WhichOneof("event") for e in events] == ["result"]
    assert events[0].result.translations[0].hypotheses[0].text == "<p></p>"


def test_html_of_one_sentence_keeps_the_markup_around_it(server):
    page = "<p>El gato está <b>durmiendo</b>.</p>"
    response = client.translate(server.channel, [page], timeout=60, text_format="html")
    text = response.translations[0].hypotheses[0].text
    assert text.startswith("<p>") and text.endswith("</p>") and "<b>" in text, text
    events = list(client.translate_stream(server.channel, page, timeout=60, text_format="html"))
    assert all(e.partial.text.startswith("<p>") for e in events[:-1])
    assert events[-1].result.translations[0].hypotheses[0].text == text
