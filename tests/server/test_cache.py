"""The response cache over real gRPC: repeats answered without decoding, sentences cached as
sentences, sampling only with a seed, the bound on entries."""

from __future__ import annotations

import pytest

from service import client

TOKENS = "attnserve_generated_tokens_total"
HITS = "attnserve_response_cache_hits_total"
MISSES = "attnserve_response_cache_misses_total"


@pytest.fixture(scope="module")
def cached(start_server):
    return start_server("--workers", "1", "--response-cache-entries", "64")


def test_a_repeated_request_is_answered_from_the_cache(cached, test_sentences):
    texts = test_sentences[:3]
    first = client.translate(cached.channel, texts, beam_size=2, timeout=60)
    tokens, hits = cached.value(TOKENS), cached.value(HITS)
    again = client.translate(cached.channel, texts, beam_size=2, timeout=60)
    assert again == first
    assert cached.value(TOKENS) == tokens  # nothing decoded
    assert cached.value(HITS) == hits + 3
    other = client.translate(cached.channel, texts[:1], beam_size=3, timeout=60)  # new options
    assert cached.value(TOKENS) > tokens and other.translations[0].hypotheses


def test_a_documents_sentences_are_cached_as_sentences(cached, test_sentences):
    boilerplate = "Gracias por su compra."
    document = f"{test_sentences[4]} {boilerplate}\n\n{test_sentences[5]} {boilerplate}\n"
    response = client.translate(cached.channel, document, max_length=100, timeout=60)
    (translation,) = response.translations
    text = translation.hypotheses[0].text
    spans = [text[s.target_start : s.target_end] for s in translation.sentences]
    assert len(spans) == 4 and spans[1] == spans[3]  # the repeat decoded once, used twice
    tokens, hits = cached.value(TOKENS), cached.value(HITS)
    alone = client.translate(cached.channel, boilerplate, max_length=100, timeout=60)
    assert alone.translations[0].hypotheses[0].text == spans[1]
    assert cached.value(TOKENS) == tokens and cached.value(HITS) == hits + 1
    stream = list(client.translate_stream(cached.channel, document, max_length=100, timeout=60))
    assert stream[-1].result == response and cached.value(TOKENS) == tokens
    misses = cached.value(MISSES)
    fresh = "Este párrafo nuevo se repite."
    client.translate(cached.channel, f"{fresh}\n\n{fresh}\n\n{fresh}", timeout=60)
    assert cached.value(MISSES) == misses + 1  # looked up once, decoded once


def test_sampling_is_cached_only_with_a_seed(cached, test_sentences):
    text = test_sentences[6]
    for _ in range(2):
        tokens = cached.value(TOKENS)
        client.translate(cached.channel, text, temperature=0.9, timeout=60)
        assert cached.value(TOKENS) > tokens  # drawn anew every time
    seeded = client.translate(cached.channel, text, temperature=0.9, seed=5, timeout=60)
    tokens = cached.value(TOKENS)
    again = client.translate(cached.channel, text, temperature=0.9, seed=5, timeout=60)
    assert again == seeded and cached.value(TOKENS) == tokens


def test_the_cache_holds_at_most_its_entries(start_server, test_sentences):
    small = start_server("--workers", "1", "--response-cache-entries", "2")
    for text in test_sentences[:3]:
        client.translate(small.channel, text, timeout=60)
    assert small.value("attnserve_response_cache_entries") == 2
    tokens = small.value(TOKENS)
    client.translate(small.channel, test_sentences[0], timeout=60)  # the oldest, dropped
    assert small.value(TOKENS) > tokens
