"""The translation kind: texts in, translations out (TranslationService), and the same
pipeline in process over any `Engine`."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field

import numpy as np

from service.runtime import glossary, languages, requests
from service.runtime.batching import source_batch
from service.runtime.controls import InputControls, length_limit
from service.runtime.decoding import MODEL_RULES, DecodingOptions, Hypothesis, decode
from service.runtime.documents import Document
from service.runtime.graphs import SpecialTokens
from service.runtime.hf_tokenizers import read_tokenizer
from service.runtime.inference import CachedInference, Engine, Inference
from service.runtime.kinds import Prepared, ServedModel
from service.runtime.languages import LanguageTokens
from service.runtime.markup import split_markup
from service.runtime.plurals import PluralRules
from service.runtime.protect import Masked, mask
from service.runtime.requests import ScoreRequest, TranslateRequest, raise_problems
from service.runtime.results import (
    Alignment,
    PartialText,
    ScoreResult,
    SentenceSpan,
    TargetScore,
    TokenCounts,
    TranslateResult,
    Translation,
    total,
)
from service.runtime.tokenizer import Tokenizer

# -- in process -------------------------------------------------------------------------------


def translate_ids(
    engine: Engine,
    token_ids: Sequence[list[int]],
    options: DecodingOptions,
    max_source_length: int,
    inference_type: type[Inference] = CachedInference,
    attention: bool = True,
) -> list[list[Hypothesis]]:
    """Decodes one batch of tokenized sources (without `</s>`), n-best per source (with their
    alignments unless `attention` is off: the step a server runs for requests without)."""
    tokens = engine.special_tokens
    src_ids, src_mask = source_batch(list(token_ids), max_source_length, tokens.eos)
    inference = inference_type(engine, engine.encode(src_ids, src_mask), len(token_ids))
    inputs = input_controls(options, token_ids)
    return decode(
        inference, len(token_ids), options, tokens.bos, tokens.eos, attention, inputs=inputs
    )


def scoring(target_ids: Sequence[list[int]], eos: int) -> tuple[DecodingOptions, InputControls]:
    """How to score targets (token ids without `</s>`): each one's tokens and `</s>` forced,
    one step each, the model's log-probability of each kept."""
    forced = tuple((*ids, eos) for ids in target_ids)
    limits = tuple(len(ids) for ids in forced)
    options = DecodingOptions(max_length=max(limits), max_length_ratio=0.0)
    return options, InputControls(max_lengths=limits, prefixes=forced)


def score_ids(
    engine: Engine,
    source_ids: Sequence[list[int]],
    target_ids: Sequence[list[int]],
    max_source_length: int,
) -> list[list[float]]:
    """The log-probability of every target token and of its `</s>`, given its source (one
    batch, by the same forced decode as the served Score)."""
    tokens = engine.special_tokens
    src_ids, src_mask = source_batch(list(source_ids), max_source_length, tokens.eos)
    inference = CachedInference(engine, engine.encode(src_ids, src_mask), len(source_ids))
    options, inputs = scoring(target_ids, tokens.eos)
    nbest = decode(
        inference, len(source_ids), options, tokens.bos, tokens.eos, attention=False, inputs=inputs
    )
    return [n[0].token_log_probs for n in nbest]


def translate_batches(
    engine: Engine,
    token_ids: Sequence[list[int]],
    options: DecodingOptions,
    max_source_length: int,
    batch_size: int = 32,
    inference_type: type[Inference] = CachedInference,
    group_by_length: bool = True,
    attention: bool = True,
) -> list[list[Hypothesis]]:
    """n-best hypotheses for every source, in input order, decoded `batch_size` at a time;
    batches group similar lengths unless `group_by_length` is off (then input order)."""
    order = list(range(len(token_ids)))
    if group_by_length:
        order.sort(key=lambda i: len(token_ids[i]))
    results: list[list[Hypothesis]] = [[] for _ in token_ids]
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        sources = [token_ids[i] for i in chunk]
        nbest = translate_ids(
            engine, sources, options, max_source_length, inference_type, attention
        )
        for i, hypotheses in zip(chunk, nbest, strict=True):
            results[i] = hypotheses
    return results


def translate_texts(
    engine: Engine,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    options: DecodingOptions,
    max_source_length: int,
    batch_size: int = 32,
) -> list[list[Hypothesis]]:
    """n-best hypotheses for every text, in input order."""
    token_ids = tokenizer.encode_batch(list(texts))
    return translate_batches(engine, token_ids, options, max_source_length, batch_size)


def loops_cut(
    results: Sequence[list[Hypothesis]],
    token_ids: Sequence[list[int]],
    options: DecodingOptions,
    controls: InputControls | None = None,
) -> list[list[Hypothesis]]:
    """Each input's hypotheses cut where they start to loop (Hypothesis.without_loop), when the
    length bound is on (the default): the bound ends a loop near the input's length, the cut
    where it began. An input's forced prefix (`controls`) stays whole: only what follows it
    is looked at. A cut n-best is ranked again, best first (a cut changes a score), and a
    search's holds each output once (hypotheses that differ only in their loops are one once
    cut); a sampling's keeps its samples alike."""
    if options.max_length_ratio <= 0:
        return list(results)
    penalty = options.length_penalty
    prefixes = controls.prefixes if controls is not None and controls.prefixes else None
    kept = [len(p) for p in prefixes] if prefixes else [0] * len(token_ids)
    cut = [
        [h.without_loop(ids, penalty, k) for h in nbest]
        for nbest, ids, k in zip(results, token_ids, kept, strict=False)  # a stream's first
    ]
    return [
        nbest
        if all(c is h for c, h in zip(nbest, was, strict=True))
        else _ranked(nbest, once=not options.sampling)
        for nbest, was in zip(cut, results, strict=False)
    ]


def _ranked(nbest: list[Hypothesis], once: bool) -> list[Hypothesis]:
    """`nbest` best first (equal scores in their order); `once`: each token sequence once,
    its best."""
    ranked = sorted(nbest, key=lambda h: -h.score)
    if not once:
        return ranked
    best: dict[tuple[int, ...], Hypothesis] = {}
    for h in ranked:
        best.setdefault(tuple(h.tokens), h)
    return list(best.values())


def translate_documents(
    engine: Engine,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    options: DecodingOptions,
    max_source_length: int,
    splitting: str = "sentences",
    batch_size: int = 32,
    text_format: str = "plain",
    terms: tuple[glossary.Term, ...] = (),
    glossaries: Sequence[tuple[glossary.Term, ...]] | None = None,
    source_language: str = "es",
    target_language: str = "en",
) -> list[str]:
    """The best translation of every text, cut into sentences (`splitting`), its protected
    items (and markup, in `text_format`; the glossary's `terms`, or each text's own of
    `glossaries`, their plurals those of the languages named: the translator of models/
    reads Spanish and writes English) taken out and put back, and put back together as the
    server does."""
    documents = [split_markup(text, splitting, text_format) for text in texts]
    markup = text_format != "plain"
    each = glossaries if glossaries is not None else [terms] * len(texts)
    plurals = PluralRules.of(source_language, target_language)
    masked, alternatives = with_alternatives(
        [
            mask(s, markup, g, plurals)
            for d, g in zip(documents, each, strict=True)
            for s in d.sentence_texts()
        ]
    )
    token_ids = tokenizer.encode_batch([m.text for m in masked])
    nbest = loops_cut(
        translate_batches(engine, token_ids, options, max_source_length, batch_size),
        token_ids,
        options,
    )
    sources = Sources(token_ids, documents, masked, markup, alternatives)
    best = iter(
        sources.text(tokenizer, p, nbest[p][0].tokens) for p in sources.chosen(tokenizer, nbest)
    )
    return [d.join([next(best) for _ in d.sentences])[0] for d in documents]


def with_alternatives(masked: Sequence[Masked]) -> tuple[list[Masked], dict[int, int]]:
    """The inputs of a request's sentences: each sentence masked, then each sentence with
    glossary terms once more without them, and which input is that sentence's alternative.
    Markers keep a term exactly but take its meaning from the words around it; the model's
    own translation keeps them and is kept where it already uses every term (`chosen`)."""
    inputs, alternatives = list(masked), {}
    for i, m in enumerate(masked):
        if m.plain is not None:
            alternatives[i] = len(inputs)
            inputs.append(m.plain)
    return inputs, alternatives


def input_controls(
    options: DecodingOptions,
    token_ids: Sequence[list[int]],
    prefixes: Sequence[tuple] = (),
    given: int = 0,
) -> InputControls | None:
    """Each source's step limit (max_length_ratio x its tokens) and forced start, whose first
    `given` tokens the model is given (a target language)."""
    limits = None
    if options.max_length_ratio > 0:
        limits = tuple(
            length_limit(options.max_length, options.max_length_ratio, len(ids))
            for ids in token_ids
        )
    forced = None
    if any(prefixes):
        forced = tuple(prefixes)
        if limits is not None:  # a forced start is never cut
            limits = tuple(
                min(options.max_length, max(limit, len(p) + 1))
                for limit, p in zip(limits, forced, strict=True)
            )
    if limits is None and forced is None:
        return None
    return InputControls(limits, forced, (given,) * len(token_ids) if given else None)


def translate_request(model, engine: Engine, request: TranslateRequest, batch_size: int = 32):
    """A typed request served in process, as a server serves it (the model's `prepare`, its
    inputs decoded `batch_size` at a time, its `response`), over any engine of its
    version."""
    import asyncio

    prepared = asyncio.run(model.prepare(request))
    results: list[list[Hypothesis]] = []
    for start in range(0, prepared.inputs, batch_size):
        part = prepared.subset(list(range(start, min(start + batch_size, prepared.inputs))))
        memory = engine.encode(**part.encoder_inputs)
        tokens = engine.special_tokens
        results += decode(
            CachedInference(engine, memory, part.inputs), part.inputs, part.options,
            tokens.bos, tokens.eos, attention=part.keep_alignment, inputs=part.controls,
        )  # fmt: skip
    return model.response(prepared, results)


# -- served -----------------------------------------------------------------------------------


@dataclass
class Sources:
    """What a translation's response needs again: each sentence's token ids and protected
    items, and each text's document (its sentences, in the same order, one after another)."""

    token_ids: list[list[int]]
    documents: list[Document]
    masked: list[Masked]
    markup: bool = False  # the texts are HTML or XML: the translations' own text escaped
    alternatives: dict[int, int] = dataclass_field(default_factory=dict)  # see `with_alternatives`
    languages: tuple[str, str] = ("", "")  # (source, target) as resolved
    # a stream's finished inputs, worked out once (`settled`, `rendered`)
    _settled: dict[int, list[Hypothesis]] = dataclass_field(
        default_factory=dict, repr=False, compare=False
    )
    _rendered: dict[int, tuple[str, list[str]]] = dataclass_field(
        default_factory=dict, repr=False, compare=False
    )

    def settled(
        self,
        results: Sequence[list[Hypothesis]],
        options: DecodingOptions,
        controls: InputControls | None = None,
    ) -> list[list[Hypothesis]]:
        """`loops_cut` of a stream's finished inputs, each input's cut once: a stream asks
        again for every finished input at each of its events, and a finished input's
        hypotheses do not change."""
        for i, nbest in enumerate(results):
            if i not in self._settled:
                own = None if controls is None else controls.subset([i])
                (self._settled[i],) = loops_cut([nbest], [self.token_ids[i]], options, own)
        return [self._settled[i] for i in range(len(results))]

    def rendered(
        self, tokenizer: Tokenizer, index: int, hypothesis: Hypothesis
    ) -> tuple[str, list[str]]:
        """The text and pieces of input `index`'s settled best `hypothesis`, worked out once."""
        if index not in self._rendered:
            text = self.text(tokenizer, index, hypothesis.tokens)
            self._rendered[index] = text, tokenizer.pieces(hypothesis.tokens)
        return self._rendered[index]

    def chosen(self, tokenizer: Tokenizer, results: Sequence[list[Hypothesis]]) -> list[int]:
        """The input whose hypotheses stand for each sentence of the first len(results)
        inputs: a sentence with glossary terms takes the model's own translation where it
        already holds every term's target, and its translation with markers otherwise."""
        count = min(len(results), sum(len(d.sentences) for d in self.documents))
        picks = list(range(count))
        for i, j in self.alternatives.items():
            if i < count and j < len(results) and results[j]:
                own = self.text(tokenizer, j, results[j][0].tokens)
                if self.masked[i].terms_used(own):
                    picks[i] = j
        return picks

    def applied(self, first: int, count: int) -> tuple[int, ...]:
        """The glossary entries put into sentences first .. first + count - 1, in order."""
        entries = {item.entry for m in self.masked[first : first + count] for item in m.items}
        return tuple(sorted(e for e in entries if e >= 0))

    def text(self, tokenizer: Tokenizer, index: int, tokens: list[int], partial=False) -> str:
        """Sentence `index`'s translation of `tokens`, its protected items put back (a
        `partial` one: a stream's, still growing)."""
        text = tokenizer.decode(tokens)
        if self.markup:
            text = html.escape(text, quote=False)
        return self.masked[index].restore(text, partial=partial)


def _sentences(
    request: TranslateRequest, documents: list[Document], markup: bool, plurals: PluralRules
):
    """Each sentence of the request's texts, in order: its field for messages ("texts[0]
    sentence 2" in a text of several), its protected items masked (its glossary terms
    found by `plurals`), whether it opens its text."""
    fields, masked, firsts = [], [], []
    for field, document in zip(request.fields, documents, strict=True):
        many = len(document.sentences) > 1
        for k, sentence in enumerate(document.sentence_texts()):
            fields.append(f"{field} sentence {k + 1}" if many else field)
            masked.append(mask(sentence, markup, request.glossary, plurals))
            firsts.append(k == 0)
    return fields, masked, firsts


def _prefix_problems(prefix: tuple[int, ...], given: tuple[int, ...], max_length: int):
    """The problem of a target prefix that leaves the model no step of its own once the
    tokens it is given (a target language) come first; the front checks the prefix alone."""
    most = max_length - 1 - len(given)
    if not (prefix and given) or len(prefix) <= most:
        return []
    return [
        f"target_prefix: {len(prefix)} tokens, at most max_length - {1 + len(given)} ({most}):"
        " the target language's token comes first"
    ]


@dataclass(frozen=True)
class _Texts:
    """The text of one document's sentence i by hypothesis h: its chosen input's (`Sources`)."""

    tokenizer: Tokenizer
    sources: Sources
    picks: list[int]  # the chosen input of each of the document's sentences
    first: int  # the document's first sentence among the request's
    # each text made, by (sentence, id of its hypothesis): the best is asked for again for
    # the spans (made for one response, whose results hold every hypothesis meanwhile)
    made: dict = dataclass_field(default_factory=dict, compare=False, repr=False)

    def __call__(self, i: int, h: Hypothesis) -> str:
        key = (i, id(h))
        if key not in self.made:
            self.made[key] = self.sources.text(self.tokenizer, self.picks[i], h.tokens)
        return self.made[key]


class TranslationModel(ServedModel):
    """A translator behind TranslationService: SentencePiece text in, `</s>` appended. A
    text is split into its sentences (`service.runtime.documents`), each decoded on its own."""

    kind = "transformer"

    def __init__(self, version, config):
        super().__init__(version, config)
        self.tokenizer = read_tokenizer(version)
        limit = version.manifest["limits"]["max_source_tokens"] - 1  # `</s>` is added
        self.max_input_tokens = min(config.max_input_tokens or limit, limit)
        self.max_text_chars = config.max_text_chars
        self.language_tokens = LanguageTokens.from_manifest(version.manifest)
        # the rules of the model's own decoding that every request follows (a Hugging Face
        # model's generate: export.hf.version)
        rules = version.manifest.get("generation", {})
        self.rules = {k: rules[k] for k in MODEL_RULES if k in rules}

    def resolve_languages(
        self, source: str, target: str, texts: Sequence[str], text_format: str = "plain"
    ):
        """(source, target) of a request: each as named (the model's own code, or as the
        edge names it: languages.own_code), checked against the model's; else the model's
        only one; else, for a source the model takes a token for, detected among its
        languages from the texts' words (`text_format`: their markup left out).
        InvalidArgument naming every problem."""
        declared, problems = self.languages, []
        source = languages.own_code(source, declared.source)
        target = languages.own_code(target, declared.target)
        if target and declared.target and target not in declared.target:
            problems.append(
                f"target_language: {languages.shown(target)} is not written by {self.key} "
                f"({languages.listed(declared.target)})"
            )
        elif not target and len(declared.target) == 1:
            target = declared.target[0]
        elif not target and self.language_tokens.target_token:
            problems.append(
                f"target_language: {self.key} writes {len(declared.target)} languages; name "
                f"one ({languages.listed(declared.target)})"
            )
        if source and declared.source and source not in declared.source:
            problems.append(
                f"source_language: {languages.shown(source)} is not read by {self.key} "
                f"({languages.listed(declared.source)})"
            )
        elif not source and len(declared.source) == 1:
            source = declared.source[0]
        elif not source and self.language_tokens.source_token and not problems:
            source = languages.detect(languages.sample(texts, text_format), declared.source)[0][0]
        raise_problems(problems)
        return source, target

    async def prepare(self, request: TranslateRequest) -> Prepared:
        markup = request.text_format != "plain"
        source, target = self.resolve_languages(
            request.source_language, request.target_language, request.texts, request.text_format
        )
        options = replace(request.options, **self.rules) if self.rules else request.options
        documents = [split_markup(t, request.splitting, request.text_format) for t in request.texts]
        plurals = PluralRules.of(source, target)  # the glossary's: the languages' own
        fields, masked, firsts = _sentences(request, documents, markup, plurals)
        masked, alternatives = with_alternatives(masked)
        fields += [fields[i] for i in alternatives]
        firsts += [firsts[i] for i in alternatives]
        told = self.language_tokens.source_ids
        token_ids = [
            told(ids, source, target)
            for ids in self.tokenizer.encode_batch([m.text for m in masked])
        ]
        given = self.language_tokens.decoder_prefix(target)
        raise_problems(
            [
                f"{field}: {len(ids)} tokens, at most {self.max_input_tokens}"
                for field, ids in zip(fields, token_ids, strict=True)
                if len(ids) > self.max_input_tokens
            ]
            + _prefix_problems(request.prefix, given, options.max_length)
        )
        prefixes = [given + (request.prefix if first else ()) for first in firsts]
        src_ids, src_mask = source_batch(
            token_ids, self.max_input_tokens + 1, self.special_tokens.eos
        )
        return Prepared(
            {"src_ids": src_ids, "src_mask": src_mask},
            options,
            fields,
            keep_alignment=request.return_alignment,
            keep_log_probs=request.return_log_probs,
            sources=Sources(
                token_ids, documents, masked, markup, alternatives, languages=(source, target)
            ),
            keys=[np.asarray(ids, np.int32).tobytes() for ids in token_ids],
            controls=input_controls(options, token_ids, prefixes, len(given)),
        )

    async def prepare_score(self, request: ScoreRequest) -> Prepared:
        """The pairs as forced decodes (`scoring`), every bad field named."""
        pairs, problems = request.pairs, []
        if not pairs:
            problems.append("pairs: at least one pair is needed")
        if len(pairs) > requests.MAX_TEXTS:
            problems.append(f"pairs: {len(pairs)} pairs, at most {requests.MAX_TEXTS}")
        source_language, target_language = self.resolve_languages(
            request.source_language, request.target_language, [s for s, _ in pairs]
        )
        given = self.language_tokens.decoder_prefix(target_language)

        def told(ids: list[int]) -> list[int]:
            return self.language_tokens.source_ids(ids, source_language, target_language)

        source_ids, target_ids = [], []
        for i, (source, target) in enumerate(pairs):
            field = f"pairs[{i}].source"
            source_ids.append(self._scored(field, source, self.max_input_tokens, problems, told))
            # a target leaves room for its `</s>` and the tokens the model is given
            limit = self.max_output_length - 1 - len(given)
            target_ids.append(self._scored(f"pairs[{i}].target", target, limit, problems))
        raise_problems(problems)
        options, controls = scoring([[*given, *ids] for ids in target_ids], self.special_tokens.eos)
        if given:
            controls = replace(controls, given=(len(given),) * len(target_ids))
        src_ids, src_mask = source_batch(
            source_ids, self.max_input_tokens + 1, self.special_tokens.eos
        )
        return Prepared(
            {"src_ids": src_ids, "src_mask": src_mask},
            options,
            [f"pairs[{i}]" for i in range(len(pairs))],
            keep_log_probs=True,
            sources=(target_ids, len(given)),
            keys=[np.asarray(ids, np.int32).tobytes() for ids in source_ids],
            controls=controls,
        )

    def _scored(
        self,
        field: str,
        text: str,
        limit: int,
        problems: list[str],
        told: Callable[[list[int]], list[int]] | None = None,
    ) -> list[int]:
        """The token ids of one side of a scored pair, its problem appended if any: a
        target's, or a source's as the model reads them (`told`: its language tokens, a
        text's own `>>xx<<` replaced), checked against `limit` once so read."""
        encode = self.tokenizer.encode if told else self.tokenizer.encode_target
        ids = encode(text) if text.strip() else []
        if not ids:
            problems.append(f"{field}: empty or only white space")
            return ids
        ids = told(ids) if told else ids
        if len(ids) > limit:
            problems.append(f"{field}: {len(ids)} tokens, at most {limit}")
        return ids

    def score_response(self, prepared: Prepared, results) -> ScoreResult:
        eos = self.special_tokens.eos
        scores = []
        targets, given = prepared.sources
        for target, nbest in zip(targets, results, strict=True):
            log_probs = nbest[0].token_log_probs[given:]  # not those of the given tokens
            total = float(np.sum(log_probs, dtype=np.float64))
            scores.append(
                TargetScore(
                    tokens=tuple(self.tokenizer.pieces([*target, eos])),
                    token_log_probs=tuple(log_probs),
                    log_prob=total,
                    mean_log_prob=total / len(log_probs),
                )
            )
        return ScoreResult(self.version.name, self.version.version, tuple(scores))

    def alignment(self, h: Hypothesis, source_ids: list[int]) -> Alignment:
        """Source tokens with `</s>`, target tokens with `</s>` when finished, the weights
        (target x source) row by row."""
        eos = self.special_tokens.eos
        source = [*source_ids, eos]
        target = h.tokens + ([eos] if h.finished else [])
        weights = np.asarray(h.alignment)[: len(target), : len(source)]
        return Alignment(
            tuple(self.tokenizer.pieces(source)),
            tuple(self.tokenizer.pieces(target)),
            tuple(weights.astype(float).ravel().tolist()),
        )

    def aligned(self, h: Hypothesis, source_ids: list[int], prepared: Prepared, text: str):
        """The hypothesis (`text`: its protected items back), with its alignment when asked
        for."""
        keep = prepared.keep_alignment and h.alignment is not None
        return self.hypothesis(
            h,
            prepared.keep_log_probs,
            text=text,
            alignment=self.alignment(h, source_ids) if keep else None,
        )

    def joined(self, document: Document, ranked: list[list[Hypothesis]], texts, log_probs):
        """The hypotheses of a text of several sentences: rank k joins every sentence's k-th
        hypothesis (as many ranks as the sentence with fewest; `texts(i, h)` is sentence i's
        text by h); the alignments go with the sentences' spans."""
        joined = []
        for rank in range(min(len(r) for r in ranked)):
            chosen = [r[rank] for r in ranked]
            text, _ = document.join([texts(i, h) for i, h in enumerate(chosen)])
            whole = Hypothesis(
                tokens=[t for h in chosen for t in h.tokens],
                score=sum(h.score for h in chosen),
                log_prob=sum(h.log_prob for h in chosen),
                finished=all(h.finished for h in chosen),
                token_log_probs=[p for h in chosen for p in h.token_log_probs],
            )
            joined.append(self.hypothesis(whole, log_probs, text=text))
        return joined

    def response(self, prepared: Prepared, results) -> TranslateResult:
        sources: Sources = prepared.sources
        results = loops_cut(results, sources.token_ids, prepared.options, prepared.controls)
        picks = sources.chosen(self.tokenizer, results)  # an input for each sentence
        translations, first = [], 0
        for document in sources.documents:
            count = len(document.sentences)
            texts = _Texts(self.tokenizer, sources, picks[first : first + count], first)
            translations.append(self._translation(prepared, document, results, texts))
            first += count
        counts = total([t.token_counts for t in translations])
        return TranslateResult(
            self.version.name, self.version.version, tuple(translations), counts,
            *sources.languages,
        )  # fmt: skip

    def _translation(self, prepared: Prepared, document: Document, results, texts) -> Translation:
        """One text's translation, of its sentences' inputs `texts.picks`."""
        sources: Sources = prepared.sources
        ids = [sources.token_ids[p] for p in texts.picks]
        ranked = [results[p] for p in texts.picks]
        if not ranked:  # markup with no text between its tags ("<p></p>"): the text as it is
            as_is = Hypothesis(tokens=[], log_prob=0.0, score=0.0, finished=True)
            hypotheses = [self.hypothesis(as_is, prepared.keep_log_probs, text=document.text)]
        elif len(ranked) == 1:  # what surrounds the one sentence kept, as around several
            hypotheses = [
                self.aligned(h, ids[0], prepared, document.join([texts(0, h)])[0])
                for h in ranked[0]
            ]
        else:
            hypotheses = self.joined(document, ranked, texts, prepared.keep_log_probs)
        spans = self._spans(document, ranked, ids, texts, prepared.keep_alignment)
        counts = TokenCounts(
            input_tokens=sum(len(i) + 1 for i in ids),
            output_tokens=sum(len(h.tokens) for r in ranked for h in r),
        )
        applied = sources.applied(texts.first, len(texts.picks))
        return Translation(tuple(hypotheses), tuple(spans), applied, counts)

    def _spans(self, document: Document, ranked, ids, texts, keep_alignment: bool):
        """Each sentence's span in the source and in the best translation, with its
        alignment when asked for in a text of several sentences."""
        _, targets = document.join([texts(i, r[0]) if r else "" for i, r in enumerate(ranked)])
        several = len(ranked) > 1 and keep_alignment
        spans = zip(document.sentences, targets, ranked, ids, strict=True)
        return [
            SentenceSpan(
                *source_span,
                *target_span,
                alignment=self.alignment(nbest[0], source)
                if several and nbest[0].alignment is not None
                else None,
            )
            for source_span, target_span, nbest, source in spans
        ]

    def partial_inputs(self, prepared: Prepared, results: list[list[Hypothesis]]) -> PartialText:
        """The stream's partial event once the first len(results) sentences of its one text
        are translated: the text so far, up to the last of them (each finished sentence cut
        and written once, `Sources.settled` and `rendered`: an event costs what is new)."""
        sources: Sources = prepared.sources
        (document,) = sources.documents
        results = sources.settled(results, prepared.options, prepared.controls)
        picks = sources.chosen(self.tokenizer, results)
        # a sentence with a glossary term is chosen once its own translation is back too:
        # shown before, it could change under the sentences shown after it
        waiting = [i for i, j in sources.alternatives.items() if j >= len(results)]
        picks = picks[: min(waiting, default=len(picks))]
        best = [results[p][0] for p in picks]
        rendered = [
            sources.rendered(self.tokenizer, p, h) for p, h in zip(picks, best, strict=True)
        ]
        text, _ = document.join([t for t, _ in rendered])
        return PartialText(
            text=text,
            tokens=tuple(piece for _, pieces in rendered for piece in pieces),
            steps=sum(len(h.tokens) + h.finished for h in best),
        )

    def partial(self, prepared: Prepared, tokens: list[int], steps: int) -> PartialText:
        sources: Sources = prepared.sources
        text = sources.text(self.tokenizer, 0, tokens, partial=True)
        document = sources.documents[0]
        if sources.markup:  # the markup around the one sentence
            text = document.join([text])[0]
        else:  # what precedes it: every partial a prefix of the result
            text = document.text[: document.sentences[0][0]] + text
        return PartialText(text, tuple(self.tokenizer.pieces(tokens)), steps)

    @staticmethod
    def golden_inputs(version, entry: dict) -> dict[str, np.ndarray]:
        limit = version.manifest["limits"]["max_source_tokens"]
        eos = SpecialTokens.from_manifest(version.manifest["special_tokens"]).eos
        src_ids, src_mask = source_batch([entry["source_ids"]], limit, eos)
        return {"src_ids": src_ids, "src_mask": src_mask}

    @staticmethod
    def golden_controls(entry: dict, options: DecodingOptions) -> InputControls | None:
        return input_controls(options, [entry["source_ids"]])


MODEL = TranslationModel
