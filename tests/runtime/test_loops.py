"""The loop cut: with the length bound on (the default), a translation that starts to repeat
itself is cut where the loop begins, unless its source repeats itself as much."""

from __future__ import annotations

import numpy as np

from service.runtime.controls import LOOP_SPAN, loop_start
from service.runtime.decoding import DecodingOptions, Hypothesis
from service.runtime.translation import loops_cut


def hypothesis(tokens: list[int], finished: bool = True) -> Hypothesis:
    steps = len(tokens) + finished
    log_probs = [-0.1 * (i + 1) for i in range(steps)]
    return Hypothesis(
        tokens=tokens,
        log_prob=sum(log_probs),
        score=sum(log_probs) / steps,
        token_log_probs=log_probs,
        alignment=np.arange(steps * 4, dtype=np.float32).reshape(steps, 4),
        finished=finished,
    )


def test_a_loop_starts_at_the_third_close_occurrence_of_a_trigram():
    assert loop_start([7, 1, 2, 3, 1, 2, 3, 1, 2, 3, 9], [5, 6]) == 7
    assert loop_start([4, 4, 4, 4, 4], [5]) == 2
    assert loop_start([1, 2, 3, 1, 2, 3, 1, 2], [5]) is None  # twice and a part
    # three occurrences spread over a long text are not a loop
    far = [1, 2, 3] + [10 + i for i in range(LOOP_SPAN)]
    assert loop_start(far + far + [1, 2, 3], [5]) is None


def test_a_source_that_repeats_itself_keeps_its_repeats():
    assert loop_start([4, 4, 4, 4, 4], [8, 8, 8, 8, 8]) is None
    assert loop_start([4, 4, 4, 4, 4], [8, 8, 8, 8]) == 2  # the source's 3-gram twice


def test_the_cut_keeps_what_came_before_it_and_is_unfinished():
    h = hypothesis([7, 1, 2, 3, 1, 2, 3, 1, 2, 3, 9])
    cut = h.without_loop([5, 6], length_penalty=1.0)
    assert cut.tokens == [7, 1, 2, 3, 1, 2, 3] and not cut.finished
    assert cut.token_log_probs == h.token_log_probs[:7]
    assert cut.log_prob == sum(h.token_log_probs[:7])
    assert cut.score == cut.log_prob / 7
    np.testing.assert_array_equal(cut.alignment, h.alignment[:7])
    whole = hypothesis([1, 2, 3])
    assert whole.without_loop([5], 1.0) is whole


def test_only_the_length_bound_turns_the_cut_on():
    looping = [[hypothesis([4, 4, 4, 4, 4])], [hypothesis([1, 2])]]
    cut = loops_cut(looping, [[5], [6]], DecodingOptions())
    assert [n[0].tokens for n in cut] == [[4, 4], [1, 2]]
    unbounded = loops_cut(looping, [[5], [6]], DecodingOptions(max_length_ratio=0.0))
    assert [n[0].tokens for n in unbounded] == [[4, 4, 4, 4, 4], [1, 2]]


def test_a_cut_is_scored_alike_whether_log_probabilities_were_asked_for_or_not():
    """A worker drops log-probabilities the client did not ask for, but keeps a looping
    hypothesis' own: the front's cut scores it by them. Before, the cut of a stripped
    hypothesis said score 0 and log_prob 0 (a certain output) unless they were asked for."""
    from service.worker.messages import Job
    from service.worker.scheduler import _strip

    def sent(tokens: list[int], asked: bool) -> Hypothesis:
        h = hypothesis(tokens)
        _strip(h, Job(0, {}, DecodingOptions(), keep_log_probs=asked))
        return h

    looping = [7, 1, 2, 3, 1, 2, 3, 1, 2, 3, 9]
    asked, unasked = (loops_cut([[sent(looping, a)]], [[5, 6]], DecodingOptions()) for a in (1, 0))
    assert unasked[0][0].tokens == asked[0][0].tokens == looping[:7]
    assert unasked[0][0].score == asked[0][0].score < 0
    assert (
        unasked[0][0].log_prob
        == asked[0][0].log_prob
        == sum(hypothesis(looping).token_log_probs[:7])
    )
    assert sent([7, 1, 2, 3, 9], asked=False).token_log_probs == []  # no loop: dropped
    unbounded = Job(0, {}, DecodingOptions(max_length_ratio=0.0))  # no cut: dropped
    h = hypothesis(looping)
    _strip(h, unbounded)
    assert h.token_log_probs == []


def _scored(tokens: list[int], log_probs: list[float]) -> Hypothesis:
    total = sum(log_probs)
    return Hypothesis(tokens, total, total / len(log_probs), log_probs)


def test_a_cut_n_best_stays_best_first_and_holds_each_output_once():
    """The cut changes a hypothesis' score and can make two hypotheses of a beam one: the
    n-best comes back re-ranked, each output once. Before, it kept the search's order (a
    worse hypothesis first) and as many copies of one cut output as hypotheses cut to it."""
    looping = [7, 1, 2, 3, 1, 2, 3, 1, 2, 3]
    costly_start = [-0.5] * 7 + [-0.001] * 4  # cheap once it loops, costly where it is cut
    best = _scored([*looping, 9], costly_start)  # -0.29, cut to looping[:7]: -0.5
    twin = _scored([*looping, 8], costly_start[:-1] + [-0.1])  # cut to the same
    short = _scored([5, 6], [-0.4] * 3)  # -0.4, no loop
    (cut,) = loops_cut([[best, twin, short]], [[5, 6]], DecodingOptions(beam_size=3))
    assert [h.tokens for h in cut] == [[5, 6], looping[:7]]
    assert [h.score for h in cut] == sorted((h.score for h in cut), reverse=True)
    # samples are drawn apart: two alike are two samples, ranked
    sampling = DecodingOptions(temperature=1.0, num_hypotheses=3)
    (drawn,) = loops_cut([[best, twin, short]], [[5, 6]], sampling)
    assert [h.tokens for h in drawn] == [[5, 6], looping[:7], looping[:7]]


def test_a_forced_prefix_stays_whole_and_only_what_follows_it_is_cut():
    """ "ha ha ha ha ha" as target_prefix: the output starts with it, as promised; a loop
    after it is cut where it starts, the prefix counted no part of it."""
    from service.runtime.controls import InputControls

    prefix = [4, 4, 4, 4, 4]
    given = [[hypothesis([*prefix, 9, 8])], [hypothesis([*prefix, 7, 7, 7, 7, 7])]]
    controls = InputControls(prefixes=(tuple(prefix), tuple(prefix)))
    cut = loops_cut(given, [[5], [6]], DecodingOptions(), controls)
    assert [n[0].tokens for n in cut] == [[*prefix, 9, 8], [*prefix, 7, 7]]
    assert cut[0][0] is given[0][0] and not cut[1][0].finished
    unforced = loops_cut(given, [[5], [6]], DecodingOptions())
    assert [n[0].tokens for n in unforced] == [[4, 4], [4, 4]]
    assert loop_start([*prefix, 1], [5], kept=5) is None and loop_start([*prefix], [5]) == 2


def test_a_stream_cuts_and_writes_each_finished_sentence_once(exported_translator, monkeypatch):
    """A streamed text's partial events: each the same as worked out afresh, while each
    finished sentence is cut (and written) once over the whole stream, not once an event."""
    import asyncio

    from service.front.config import ServerConfig
    from service.front.translate import parse_translate_stream, partial_message
    from service.runtime.translation import TranslationModel
    from service.wire.v1 import translation_pb2

    version, _ = exported_translator
    model = TranslationModel(version, ServerConfig())
    request = translation_pb2.TranslateStreamRequest(
        text=" ".join(f"La casa número {i} es roja." for i in range(12))
    )
    prepared = asyncio.run(model.prepare(parse_translate_stream(request, model)))
    ids = prepared.sources.token_ids
    assert prepared.inputs == len(ids) >= 10
    results = [[hypothesis(list(source[:-1]))] for source in ids]
    results[2] = [hypothesis([50, 60, 70] * 4)]  # a loop: cut to [50, 60, 70] * 2
    cut = Hypothesis.without_loop
    calls = []
    monkeypatch.setattr(Hypothesis, "without_loop", lambda h, *a: calls.append(1) or cut(h, *a))
    events = [
        partial_message(model.partial_inputs(prepared, results[:k])) for k in range(1, len(ids))
    ]
    assert len(calls) == len(ids) - 1  # once each, over the whole stream
    again = parse_translate_stream(request, model)
    fresh = [
        partial_message(model.partial_inputs(asyncio.run(model.prepare(again)), results[:k]))
        for k in range(1, len(ids))
    ]
    assert events == fresh
    pieces = list(events[-1].partial.tokens)
    assert len(pieces) == sum(len(r[0].tokens) for r in results[:-1]) - 6  # the loop's cut


def test_a_streamed_sentence_with_a_glossary_term_waits_for_its_own_translation(
    exported_translator,
):
    """A sentence holding a glossary term is decoded twice (with the term's marker and as
    the model would write it) and its text is chosen once both are back: a partial event
    shows it only then, so that every partial is a prefix of the result."""
    import asyncio

    from service.front.config import ServerConfig
    from service.front.translate import parse_translate_stream
    from service.runtime.translation import TranslationModel
    from service.wire.v1 import translation_pb2

    model = TranslationModel(exported_translator[0], ServerConfig())
    request = translation_pb2.TranslateStreamRequest(
        text="Mi casa es grande. El gato duerme.",
        glossary=[translation_pb2.GlossaryEntry(source="casa", target="home")],
    )
    prepared = asyncio.run(model.prepare(parse_translate_stream(request, model)))
    assert prepared.inputs == 3 and prepared.sources.alternatives == {0: 2}
    encode = model.tokenizer.encode_target
    outputs = ["My ZZ1 is big.", "The cat sleeps.", "My home is large."]
    results = [[hypothesis(encode(text))] for text in outputs]
    final = model.response(prepared, results).translations[0].hypotheses[0].text
    assert final == "My home is large. The cat sleeps."  # the model's own, holding "home"
    for k in range(1, len(results)):
        partial = model.partial_inputs(prepared, results[:k]).text
        assert final.startswith(partial), (k, partial)
