"""Decoding strategies over an `Inference`: numpy in, numpy out, the same for every engine.

A step produces one token per row: a content token or `</s>`. `max_length` bounds the steps,
so a hypothesis that reaches it ends without `</s>`. Scores are sums of log-probabilities;
ranking divides them by (steps ** length_penalty).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from service.runtime.controls import Controls, InputControls, loop_start
from service.runtime.errors import InvalidArgument
from service.runtime.inference import Inference
from service.runtime.search import Candidates, RowControl, SearchRequest

MAX_BEAM_SIZE = 16
# when a beam search ends an input (`DecodingOptions.beam_stop`; `generate`'s early_stopping
# True, False and "never"): once beam_size hypotheses ended; once they did and the best live
# one, scored at its present length, cannot beat the worst of them; the same, scored at the
# length limit where a length penalty favours length
BEAM_STOPS = ("full", "estimate", "never")
MODEL_RULES = ("end_at_limit", "beam_stop")  # options a model's manifest sets, not a request
MAX_SUPPRESSED = 256  # token sequences one request suppresses at most
# the least sampling temperature and repetition penalty: a logit divided by less overflows
# float32 (and a log-probability divided by less underflows to -inf: a row with no finite
# score, whose distribution is NaN)
MIN_TEMPERATURE = 0.01
MIN_REPETITION_PENALTY = 0.01


def _at_least(value: float, least: float) -> bool:
    """`value` >= `least`, where a float32 field holding `least` (a proto's) passes too."""
    return value >= float(np.float32(least))


DEFAULT_MAX_LENGTH_RATIO = 2.0  # an output's steps at most 2 x its input's tokens + a margin


@dataclass(frozen=True)
class DecodingOptions:
    beam_size: int = 1  # 1 is greedy search
    max_length: int = 256  # decoding steps at most, `</s>` included
    length_penalty: float = 1.0  # ranking score = log-prob / steps ** length_penalty
    num_hypotheses: int = 1  # n-best size, at most beam_size (or samples drawn per input)
    temperature: float = 0.0  # > 0 samples from softmax(logits / temperature); 0 is search
    top_k: int = 0  # sample among the k most likely tokens only; 0 is all
    top_p: float = 1.0  # sample among the fewest tokens whose probability reaches top_p
    seed: int | None = None  # the same seed, input and model give the same samples
    min_length: int = 0  # output tokens at least before `</s>`
    no_repeat_ngram_size: int = 0  # no n-gram of this many tokens twice in an output; 0: off
    repetition_penalty: float = 1.0  # above 1: a token produced already is less likely
    suppress: tuple[tuple[int, ...], ...] = ()  # token sequences never produced
    # an input's steps at most this x its tokens + controls.LENGTH_MARGIN (inputs with a
    # length: texts); 0: max_length alone
    max_length_ratio: float = DEFAULT_MAX_LENGTH_RATIO
    end_at_limit: bool = False  # the last of max_length steps writes `</s>` (a model's rule)
    beam_stop: str = BEAM_STOPS[0]  # when a beam search ends an input (a model's rule)

    @property
    def sampling(self) -> bool:
        return self.temperature > 0

    @property
    def copies(self) -> int:
        """Batch rows an input takes at its start: one per hypothesis searched."""
        return self.num_hypotheses if self.sampling else self.beam_size

    def validate(self, max_length_limit: int) -> None:
        """Raises one InvalidArgument naming every bad field."""
        problems = self._sampling_problems()
        if not 1 <= self.beam_size <= MAX_BEAM_SIZE:
            problems.append(f"beam_size must be in 1..{MAX_BEAM_SIZE}, got {self.beam_size}")
        if not 1 <= self.max_length <= max_length_limit:
            problems.append(f"max_length must be in 1..{max_length_limit}, got {self.max_length}")
        if not 0.0 <= self.length_penalty <= 10.0:
            problems.append(f"length_penalty must be in 0..10, got {self.length_penalty}")
        if self.beam_stop not in BEAM_STOPS:
            problems.append(f"beam_stop must be one of {BEAM_STOPS}, got {self.beam_stop!r}")
        if not self.sampling and not 1 <= self.num_hypotheses <= self.beam_size:
            problems.append(
                f"num_hypotheses must be in 1..beam_size ({self.beam_size}), "
                f"got {self.num_hypotheses}"
            )
        problems += self._control_problems()
        if problems:
            raise InvalidArgument("; ".join(problems))

    def _control_problems(self) -> list[str]:
        problems = []
        # held to max_length where it is valid: a bad max_length is its own problem alone
        longest = max(self.max_length, 1)
        if not 0 <= self.min_length < longest:
            problems.append(
                f"min_length must be in 0..max_length - 1 ({longest - 1}), got {self.min_length}"
            )
        if not 0 <= self.no_repeat_ngram_size <= longest:
            problems.append(
                f"no_repeat_ngram_size must be in 0..max_length ({longest}), "
                f"got {self.no_repeat_ngram_size}"
            )
        if not (
            _at_least(self.repetition_penalty, MIN_REPETITION_PENALTY)
            and self.repetition_penalty <= 10.0
        ):
            problems.append(
                f"repetition_penalty must be in {MIN_REPETITION_PENALTY}..10, "
                f"got {self.repetition_penalty}"
            )
        if not 0.0 <= self.max_length_ratio <= 100.0:
            problems.append(f"max_length_ratio must be in 0..100, got {self.max_length_ratio}")
        if len(self.suppress) > MAX_SUPPRESSED:
            problems.append(f"suppress: {len(self.suppress)} entries, at most {MAX_SUPPRESSED}")
        return problems

    def _sampling_problems(self) -> list[str]:
        problems = []
        if not (
            self.temperature == 0.0
            or (_at_least(self.temperature, MIN_TEMPERATURE) and self.temperature <= 100.0)
        ):
            problems.append(
                f"temperature must be 0 (no sampling) or in {MIN_TEMPERATURE}..100, "
                f"got {self.temperature}"
            )
        if self.top_k < 0:
            problems.append(f"top_k must be 0 or more, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.sampling and self.beam_size != 1:
            problems.append("sampling (temperature > 0) needs beam_size 1")
        if self.sampling and not 1 <= self.num_hypotheses <= MAX_BEAM_SIZE:
            problems.append(f"num_hypotheses must be in 1..{MAX_BEAM_SIZE} when sampling")
        return problems


@dataclass
class Hypothesis:
    """One output sequence. `tokens` excludes `<s>` and `</s>`; the per-step lists include the
    `</s>` step when the hypothesis ended with one."""

    tokens: list[int]
    log_prob: float  # sum of token_log_probs
    score: float  # log_prob / steps ** length_penalty
    token_log_probs: list[float] = field(default_factory=list)
    alignment: np.ndarray | None = None  # (steps, S) cross-attention of each step
    finished: bool = True  # ended with `</s>` rather than at max_length

    def without_loop(
        self, source: Sequence[int], length_penalty: float, kept: int = 0
    ) -> Hypothesis:
        """This hypothesis cut where it starts to loop (`controls.loop_start`) after its first
        `kept` tokens (a forced prefix), unfinished: its tokens, log-probabilities and
        attention rows up to there; itself where it does not loop."""
        cut = loop_start(self.tokens, source, kept)
        if cut is None:
            return self
        log_probs = self.token_log_probs[:cut]
        total = float(np.sum(log_probs, dtype=np.float64))
        return Hypothesis(
            tokens=self.tokens[:cut],
            log_prob=total,
            score=total / max(cut, 1) ** length_penalty,
            token_log_probs=log_probs,
            alignment=None if self.alignment is None else self.alignment[:cut],
            finished=False,
        )


@dataclass
class _Row:
    """A greedy or sampled hypothesis: what it produced so far."""

    tokens: list[int]
    log_probs: list[float]
    attention: list[np.ndarray]

    def append(self, token: int, log_prob: float, attention: np.ndarray | None) -> None:
        """This row one token longer, in place."""
        self.tokens.append(token)
        self.log_probs.append(log_prob)
        if attention is not None:
            self.attention.append(attention)

    def finish(self, eos: int, penalty: float) -> Hypothesis:
        ended = bool(self.tokens) and self.tokens[-1] == eos
        total = float(np.sum(self.log_probs, dtype=np.float64))
        steps = max(len(self.tokens), 1)
        return Hypothesis(
            tokens=self.tokens[:-1] if ended else list(self.tokens),
            log_prob=total,
            score=total / steps**penalty,
            token_log_probs=list(self.log_probs),
            alignment=np.stack(self.attention) if self.attention else None,
            finished=ended,
        )


class Search(ABC):
    """The decoding state of a few inputs, advanced one step at a time.

    Its rows are inference rows: `sources` gives the input each row decodes and `tokens` what
    each row is fed next. `k` and `temperature` say which candidates a step must give each row
    (service.runtime.search); `advance` takes them, with the cross-attention of its rows when it was
    asked for, and returns the rows that go on (an index that may drop or repeat rows), with
    which the caller reorders the inference. Several searches can share one inference batch
    (continuous batching), each owning a block of rows.
    """

    sources: np.ndarray  # (R,) input of each row
    tokens: np.ndarray  # (R, 1) int64, each row's next input token
    steps: int  # steps taken
    k: int = 1  # candidates a row needs; 0: the whole vocabulary
    temperature: float | None = None  # sampling: candidates ranked after this temperature
    controls: Controls | None = None  # the decoding controls, when the options ask for any

    def request(self, attention: bool = True) -> SearchRequest:
        """The search request of this search's rows alone."""
        temperature = None
        if self.temperature is not None:
            temperature = np.full(self.rows, self.temperature, dtype=np.float32)
        return SearchRequest(self.k, temperature, attention, controls=self.row_controls())

    def row_controls(self) -> dict[int, RowControl]:
        """The controls of this search's rows at the next step, by row (only rows a
        control changes)."""
        return {}

    @property
    def rows(self) -> int:
        return len(self.sources)

    @property
    def done(self) -> bool:
        return self.rows == 0

    @abstractmethod
    def advance(self, candidates: Candidates, attention: np.ndarray | None) -> np.ndarray:
        """The candidates (at least `k` a row) and attention (R, S) or None of this search's
        rows -> rows to keep (int64)."""

    @abstractmethod
    def results(self) -> list[list[Hypothesis]]:
        """n-best per input, best first; complete once `done`."""

    @abstractmethod
    def best_tokens(self, item: int) -> list[int]:
        """The best hypothesis of input `item` so far, `</s>` excluded (for streaming)."""


class GreedySearch(Search):
    """One token per row and step, the most likely unless `choose` (candidates -> the column
    picked in each row) picks otherwise; `copies` rows per input; finished rows leave."""

    def __init__(
        self,
        batch,
        options: DecodingOptions,
        bos: int,
        eos: int,
        choose=None,
        copies=1,
        inputs: InputControls | None = None,
    ):
        self.options, self.eos, self.copies, self.steps = options, eos, copies, 0
        self.choose = choose  # None: the best candidate
        self.limit = None  # each hypothesis' step limit, where inputs differ
        if inputs is not None and inputs.max_lengths is not None:
            self.limit = np.repeat(np.asarray(inputs.max_lengths, dtype=np.int64), copies)
        if Controls.wanted(options, inputs):
            self.controls = Controls(options, inputs, eos)
        self.hypotheses = [_Row([], [], []) for _ in range(batch * copies)]
        self.finished: list[Hypothesis | None] = [None] * (batch * copies)
        self.active = np.arange(batch * copies)  # the hypothesis each row extends
        self.sources = self.active // copies
        self.tokens = np.full((batch * copies, 1), bos, dtype=np.int64)

    def advance(self, candidates: Candidates, attention: np.ndarray | None) -> np.ndarray:
        # one row per decoding input is the common case of a busy server: plain Python there
        if self.choose is None:
            best, log_probs = candidates.ids[:, 0], candidates.log_probs[:, 0]
        else:
            column = np.asarray(self.choose(candidates, self.sources), dtype=np.int64)[:, None]
            best = np.take_along_axis(candidates.ids, column, 1)[:, 0]
            log_probs = np.take_along_axis(candidates.log_probs, column, 1)[:, 0]
        rows, active = self.hypotheses, self.active.tolist()
        if attention is None:  # _Row.append without attention, inlined: hundreds of rows
            for h, token, log_prob in zip(active, best.tolist(), log_probs.tolist(), strict=True):
                row = rows[h]
                row.tokens.append(token)
                row.log_probs.append(log_prob)
        else:
            for i, (h, token, log_prob) in enumerate(
                zip(active, best.tolist(), log_probs.tolist(), strict=True)
            ):
                rows[h].append(token, log_prob, attention[i])
        self.steps += 1
        keep = best != self.eos
        if self.steps >= self.options.max_length:
            keep[:] = False
        elif self.limit is not None:
            keep &= self.limit[self.active] > self.steps
        if keep.all():
            self.tokens = best[:, None]
            return np.arange(len(keep))
        for h in self.active[~keep].tolist():
            self.finished[h] = rows[h].finish(self.eos, self.options.length_penalty)
        self.active, self.sources = self.active[keep], self.sources[keep]
        self.tokens = best[keep, None]
        return np.flatnonzero(keep)

    def row_controls(self) -> dict[int, RowControl]:
        if self.controls is None:
            return {}
        active = self.active.tolist()
        histories = [self.hypotheses[h].tokens for h in active]
        return self.controls.rows([h // self.copies for h in active], histories)

    def results(self) -> list[list[Hypothesis]]:
        penalty = self.options.length_penalty
        pairs = zip(self.finished, self.hypotheses, strict=True)
        done = [f or r.finish(self.eos, penalty) for f, r in pairs]
        n = self.copies
        return [sorted(done[i : i + n], key=lambda h: -h.score) for i in range(0, len(done), n)]

    def best_tokens(self, item: int) -> list[int]:
        tokens = self.hypotheses[item * self.copies].tokens
        return tokens[:-1] if tokens and tokens[-1] == self.eos else list(tokens)


def sampler(options: DecodingOptions):
    """Candidates ranked after temperature (the top_k best of each row, or the whole
    vocabulary), and the input each row samples (None: one input) -> the column of one
    sampled token per row, after top-k and top-p. Each input draws from a generator of its
    own seeded by the seed, so an input's samples do not depend on the inputs decoded beside
    it (how a request was cut into jobs, a stream or not: what a cached answer is keyed by).
    The draw reads the numbers in the candidates only, so a seed gives the same samples on
    every engine whose candidates are equal."""
    generators: dict[int, np.random.Generator] = {}

    def uniform(sources: np.ndarray | None, rows: int) -> np.ndarray:
        """Each row's uniform number, from its input's generator, an input's rows in order."""
        if sources is None:
            sources = np.zeros(rows, dtype=np.int64)
        drawn = np.empty(rows)
        for item in dict.fromkeys(sources.tolist()):
            generator = generators.get(item)
            if generator is None:
                generator = generators[item] = np.random.default_rng(options.seed)
            mine = np.flatnonzero(sources == item)
            drawn[mine] = generator.random(len(mine))
        return drawn

    def choose(candidates: Candidates, sources: np.ndarray | None = None) -> np.ndarray:
        sorted_probs = np.exp(candidates.scores)  # (B, k), best first
        keep = np.ones_like(sorted_probs, dtype=bool)
        if options.top_k:
            keep[:, options.top_k :] = False
        if options.top_p < 1.0:  # keep a token while the mass before it is below top_p
            before = np.cumsum(sorted_probs, axis=-1) - sorted_probs
            keep &= before < options.top_p
        probs = np.where(keep, sorted_probs, 0.0)
        probs /= probs.sum(axis=-1, keepdims=True)
        # every row's draw at once, the very draw of Generator.choice(len(p), p=p) row by row
        # (the same uniform numbers, the first index whose cumulative probability passes one)
        cdf = np.cumsum(probs, axis=-1, dtype=np.float64)
        if not np.isfinite(cdf[:, -1]).all():
            raise ValueError("probabilities contain NaN")
        cdf /= cdf[:, -1:]
        return (cdf <= uniform(sources, len(probs))[:, None]).sum(axis=-1)

    return choose


class SamplingSearch(GreedySearch):
    """`num_hypotheses` samples per input, best score first; log-probs are the model's own
    (before temperature)."""

    def __init__(
        self,
        batch: int,
        options: DecodingOptions,
        bos: int,
        eos: int,
        inputs: InputControls | None = None,
    ):
        super().__init__(batch, options, bos, eos, sampler(options), options.num_hypotheses, inputs)
        self.k, self.temperature = options.top_k, options.temperature


class _Step(NamedTuple):
    """What one beam step chose, by row index (a trace back, not a copy of every hypothesis).
    Its live rows, in the order of the next step's inference rows: `parent`, the row of this
    step each extends, and its `token`, `log_prob` and cross-attention (None when not asked
    for). Its ended hypotheses (an `</s>`), in input then rank order: `ended_item`, the input;
    `ended_parent`, the row each extends; its log-probability and cross-attention."""

    parent: np.ndarray  # (R,) int64
    token: np.ndarray  # (R,) int64
    log_prob: np.ndarray  # (R,) float
    attention: np.ndarray | None  # (R, S)
    ended_item: np.ndarray  # (E,) int64
    ended_parent: np.ndarray  # (E,) int64
    ended_log_prob: np.ndarray  # (E,) float
    ended_attention: np.ndarray | None  # (E, S)


class _Ranked(NamedTuple):
    """One beam step's choices for A inputs, best first: the live rows' (A, beam) `scores`,
    `beams` (the row of its input each extends), `tokens` and `log_probs`; and which of the
    best `beam` extensions are an `</s>` (`ends`, (A, beam)), with their beam and
    log-probability."""

    scores: np.ndarray
    beams: np.ndarray
    tokens: np.ndarray
    log_probs: np.ndarray
    ends: np.ndarray
    end_beams: np.ndarray
    end_log_probs: np.ndarray

    def inputs(self, start: int, stop: int) -> _Ranked:
        return _Ranked(*(x[start:stop] for x in self))


def rank_beams(beam: int, eos: int, ids, log_probs, scores: np.ndarray) -> _Ranked:
    """The candidates `ids`, `log_probs` (A * beam rows, 2 beam or more each, best first) of A
    inputs whose live scores are `scores` (A, beam) -> each input's step choices: its 2 beam
    best extensions (enough: a row's tokens past its 2 beam best cannot be among its input's
    2 beam best), equal scores in (beam, token) order; the `</s>` of finite score among the
    best `beam` end a hypothesis (one outside would not have been kept), the best `beam`
    others go on (at most one `</s>` a beam, so there are that many)."""
    width = 2 * beam
    shape = (len(scores), beam * width)
    ids = ids[:, :width].reshape(shape)
    log_probs = log_probs[:, :width].reshape(shape)
    totals = (scores[:, :, None] + log_probs.reshape(-1, beam, width)).reshape(shape)
    inputs, beam_of = np.arange(len(scores))[:, None], _beam_of(beam, width)
    best = _best(ids, totals, width, beam_of)
    # an `</s>` of no finite score (a candidate a grammar or a ban ruled out, filling the
    # k best of a narrow row) ends nothing
    is_eos = (ids[inputs, best] == eos) & np.isfinite(totals[inputs, best])
    live = best[inputs, np.argsort(is_eos, axis=1, kind="stable")[:, :beam]]
    ended = best[:, :beam]
    return _Ranked(
        totals[inputs, live],
        beam_of[live],
        ids[inputs, live].astype(np.int64, copy=False),
        log_probs[inputs, live],
        is_eos[:, :beam],
        beam_of[ended],
        log_probs[inputs, ended],
    )


@cache
def _beam_of(beam: int, width: int) -> np.ndarray:
    """(beam * width,) the beam of each of an input's candidates (a row's `width` in turn)."""
    return np.repeat(np.arange(beam), width)


def _best(ids: np.ndarray, scores: np.ndarray, width: int, beams: np.ndarray) -> np.ndarray:
    """(A, C) candidates' tokens and scores -> the index of each input's `width` best, best
    first, equal scores in (beam, token) order. A plain sort decides every input whose best
    width + 1 scores are distinct (all but rare ones); the others are sorted by (score, beam,
    token)."""
    order = np.argsort(-scores, axis=-1)[:, : width + 1]
    top = np.take_along_axis(scores, order, 1)
    tied = np.flatnonzero((top[:, 1:] == top[:, :-1]).any(axis=1) | np.isnan(top).any(axis=1))
    best = order[:, :width]
    if len(tied):
        beams = np.broadcast_to(beams, (len(tied), scores.shape[1]))
        best[tied] = np.lexsort((ids[tied], beams, -scores[tied]), axis=-1)[:, :width]
    return best


def rank_together(
    searches: list[Search], candidates: Candidates, sizes: list[int] | None = None
) -> list[_Ranked | None]:
    """Each beam search's step choices (`BeamSearch.advance_ranked`), ranked in one numpy
    pass for all the beam searches of one beam size, whose rows of `candidates` are their
    own in turn (`searches` in row order, `sizes` their rows when known); None for every
    other search."""
    groups: dict[tuple[int, int], list[int]] = {}
    if sizes is None:
        sizes = [search.rows for search in searches]
    starts = list(accumulate(sizes, initial=0))
    for i, search in enumerate(searches):
        if type(search) is BeamSearch and sizes[i]:
            groups.setdefault((search.beam, search.eos), []).append(i)
    ranked: list[_Ranked | None] = [None] * len(searches)
    for (beam, eos), members in groups.items():
        starts_of = np.array([starts[i] for i in members])
        counts = np.array([sizes[i] for i in members])
        before = np.cumsum(counts) - counts  # where each member's rows start among the group's
        rows = np.repeat(starts_of - before, counts) + np.arange(counts.sum())
        scores = np.concatenate([searches[i].scores for i in members])
        together = rank_beams(beam, eos, candidates.ids[rows], candidates.log_probs[rows], scores)
        if len(scores) == len(members):  # one input each (a busy server's): split in C
            parts = zip(*(list(x[:, None]) for x in together), strict=True)
            for i, fields in zip(members, parts, strict=True):
                ranked[i] = _Ranked(*fields)
            continue
        firsts, inputs = (before // beam).tolist(), (counts // beam).tolist()
        for i, first, size in zip(members, firsts, inputs, strict=True):
            ranked[i] = together.inputs(first, first + size)
    return ranked


_NOTHING_ENDED = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))


@cache
def _first_rows(inputs: int, beam: int) -> np.ndarray:
    """(inputs, 1) each input's first row."""
    return np.arange(inputs)[:, None] * beam


class BeamSearch(Search):
    """Beam search with `beam_size` live hypotheses (rows) per input.

    An `</s>` among the best `beam_size` candidates of a step finishes a hypothesis; an input
    is done once it has `beam_size` finished ones (or, by `options.beam_stop`, once besides
    its best live hypothesis cannot beat the worst of its best `beam_size` finished ones, as
    `generate` decides), and its rows leave. With beam_size 1 this is greedy search.

    A step is a few numpy calls over every input at once: each step keeps, per row, the row it
    extends and its token (`_Step`), and a hypothesis is traced back through them when it is
    asked for, instead of every extension copying its hypothesis' tokens.
    """

    def __init__(
        self,
        batch: int,
        options: DecodingOptions,
        bos: int,
        eos: int,
        inputs: InputControls | None = None,
    ):
        self.beam, self.options, self.eos, self.steps = options.beam_size, options, eos, 0
        self.limits = None  # each input's step limit, where inputs differ
        if inputs is not None and inputs.max_lengths is not None:
            self.limits = np.asarray(inputs.max_lengths, dtype=np.int64)
        self.cut: dict[int, list[Hypothesis]] = {}  # inputs ended by their own limit
        self.row_tokens: list[list[int]] = []  # each live row's tokens, kept for controls
        if Controls.wanted(options, inputs):
            self.controls = Controls(options, inputs, eos)
            self.row_tokens = [[] for _ in range(batch * self.beam)]
        self.batch, self.k = batch, 2 * self.beam
        self.active = np.arange(batch)  # inputs still searching, `beam` rows each
        self.sources = np.repeat(self.active, self.beam)
        self.tokens = np.full((batch * self.beam, 1), bos, dtype=np.int64)
        # each active input's live scores; only the first beam is live at the start (the
        # others would repeat it)
        self.scores = np.tile(np.array([0.0] + [-np.inf] * (self.beam - 1)), (batch, 1))
        self.ended = np.zeros(batch, dtype=np.int64)  # each active input's finished count
        # each active input's best `beam` finished scores, best first (where the stop rule
        # weighs them against the live ones)
        self.best_ended = None
        if options.beam_stop != "full":
            self.best_ended = np.full((batch, self.beam), -np.inf)
        self.history: list[_Step] = []
        self._traced: dict[int, tuple] = {}  # input -> the rows and tokens of its best_tokens

    def advance(self, candidates: Candidates, attention: np.ndarray | None) -> np.ndarray:
        ranked = rank_beams(self.beam, self.eos, candidates.ids, candidates.log_probs, self.scores)
        return self.advance_ranked(ranked, attention)

    def advance_ranked(self, ranked: _Ranked, attention: np.ndarray | None) -> np.ndarray:
        """`advance` by its inputs' choices, ranked already (`rank_beams`, maybe with other
        searches' inputs: `rank_together`). Most steps end no input, and take a short way."""
        n, ends = self.beam, ranked.ends
        ended = _NOTHING_ENDED
        going = None  # every input goes on
        if ends.any():
            at, rank = np.nonzero(ends)
            ended = (
                self.active[at],
                at * n + ranked.end_beams[at, rank],
                ranked.end_log_probs[at, rank],
            )
            self.ended = self.ended + ends.sum(axis=1)
            if self.best_ended is None:
                going = self.ended < n
            else:
                self._keep_best_ended(at, ranked.end_beams[at, rank], ended[2])
        if self.best_ended is not None:
            going = self._may_improve(ranked.scores)
        if going is not None and going.all():
            going = None
        if going is None:
            parent = (_first_rows(len(self.active), n) + ranked.beams).ravel()
            token, log_probs, self.scores = ranked.tokens.ravel(), ranked.log_probs, ranked.scores
        else:
            parent = (np.flatnonzero(going)[:, None] * n + ranked.beams[going]).ravel()
            token, log_probs = ranked.tokens[going].ravel(), ranked.log_probs[going]
            self.active, self.scores = self.active[going], ranked.scores[going]
            self.ended = self.ended[going]
            if self.best_ended is not None:
                self.best_ended = self.best_ended[going]
            self.sources = np.repeat(self.active, n)
        self.history.append(
            _Step(
                parent,
                token,
                log_probs.ravel(),
                None if attention is None else attention[parent],
                *ended,
                None if attention is None else attention[ended[1]],
            )
        )
        self.steps += 1
        if self.steps >= self.options.max_length:  # inputs still searching keep their live ones
            parent = token = parent[:0]
            self.sources = parent
        elif self.limits is not None:
            over = self.limits[self.active] <= self.steps
            if over.any():
                parent, token = self._cut(over)
        if self.controls is not None:
            tokens = self.row_tokens
            self.row_tokens = [
                tokens[p] + [t] for p, t in zip(parent.tolist(), token.tolist(), strict=True)
            ]
        self.tokens = token.reshape(-1, 1)
        return parent

    def _keep_best_ended(self, at: np.ndarray, beams: np.ndarray, log_probs: np.ndarray) -> None:
        """Each active input's best `beam` finished scores, with the hypotheses that end now
        (of the inputs `at`, extending their `beams` by `</s>` at `log_probs`)."""
        length = (self.steps + 1) ** self.options.length_penalty
        scores = (self.scores[at, beams] + log_probs) / length
        for a, score in zip(at.tolist(), scores.tolist(), strict=True):
            best = self.best_ended[a]
            if score > best[-1]:
                self.best_ended[a] = np.sort(np.append(best[:-1], score))[::-1]

    def _may_improve(self, live: np.ndarray) -> np.ndarray:
        """Which active inputs go on, by the stop rule that weighs the best `live` score (of
        each input's scores after this step, best first) against the worst of its best
        finished ones: an input with fewer than `beam` finished always goes on."""
        penalty = self.options.length_penalty
        length = self.steps + 1
        if self.options.beam_stop == "never" and penalty > 0:
            length = self.options.max_length
        worst = self.best_ended[:, -1]
        return ~(np.isfinite(worst) & (live[:, 0] / length**penalty <= worst))

    def _cut(self, over: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The active inputs `over` their own step limit end with their live hypotheses as
        they are (kept in `cut`); the step just taken keeps the others' rows alone -> its
        parents and tokens."""
        last = len(self.history) - 1
        for a in np.flatnonzero(over).tolist():
            beams = np.flatnonzero(np.isfinite(self.scores[a]))
            self.cut[int(self.active[a])] = self._hypotheses(last, a * self.beam + beams)
        going = ~over
        rows = np.repeat(going, self.beam)
        step = self.history[-1]
        attention = None if step.attention is None else step.attention[rows]
        self.history[-1] = step._replace(
            parent=step.parent[rows],
            token=step.token[rows],
            log_prob=step.log_prob[rows],
            attention=attention,
        )
        self.active, self.scores = self.active[going], self.scores[going]
        self.ended = self.ended[going]
        if self.best_ended is not None:
            self.best_ended = self.best_ended[going]
        self.sources = np.repeat(self.active, self.beam)
        return step.parent[rows], step.token[rows]

    def row_controls(self) -> dict[int, RowControl]:
        if self.controls is None:
            return {}
        return self.controls.rows(np.repeat(self.active, self.beam).tolist(), self.row_tokens)

    def _trace(self, last: int, rows: np.ndarray):
        """Tokens (R, last + 1), their log-probabilities and the steps' cross-attention (a list,
        steps in order) of the live `rows` of step `last` (-1: before the first step)."""
        tokens = np.empty((len(rows), last + 1), dtype=np.int64)
        log_probs = np.empty((len(rows), last + 1), dtype=np.float64)
        attention = []
        for s in range(last, -1, -1):
            step = self.history[s]
            tokens[:, s], log_probs[:, s] = step.token[rows], step.log_prob[rows]
            if step.attention is not None:
                attention.append(step.attention[rows])
            rows = step.parent[rows]
        return tokens, log_probs, attention[::-1]

    def _hypotheses(self, last: int, rows, ends=None) -> list[Hypothesis]:
        """The hypotheses of the live `rows` of step `last`, extended by `ends` (the `</s>` of
        step last + 1: its log-probabilities and attention) when they ended with one."""
        tokens, log_probs, attention = self._trace(last, np.asarray(rows, dtype=np.int64))
        if ends is not None:
            end_log_probs, end_attention = ends
            log_probs = np.concatenate([log_probs, end_log_probs[:, None]], axis=1)
            if end_attention is not None:
                attention.append(end_attention)
        penalty, hypotheses = self.options.length_penalty, []
        for i, row in enumerate(log_probs):
            total = float(np.sum(row, dtype=np.float64))
            hypotheses.append(
                Hypothesis(
                    tokens=tokens[i].tolist(),
                    log_prob=total,
                    score=total / max(len(row), 1) ** penalty,
                    token_log_probs=row.tolist(),
                    alignment=np.stack([a[i] for a in attention]) if attention else None,
                    finished=ends is not None,
                )
            )
        return hypotheses

    def _finished(self, item: int | None = None) -> list[list[Hypothesis]]:
        """Every input's finished hypotheses (or input `item`'s alone), in the order they
        ended."""
        finished: list[list[Hypothesis]] = [[] for _ in range(self.batch)]
        for last, step in enumerate(self.history):
            chosen = slice(None) if item is None else step.ended_item == item
            items = step.ended_item[chosen]
            if len(items):
                attention = None if step.ended_attention is None else step.ended_attention[chosen]
                ends = (step.ended_log_prob[chosen], attention)
                ended = self._hypotheses(last - 1, step.ended_parent[chosen], ends)
                for i, h in zip(items.tolist(), ended, strict=True):
                    finished[i].append(h)
        return finished

    def results(self) -> list[list[Hypothesis]]:
        """Inputs still searching at max_length keep their live hypotheses as they are."""
        finished = self._finished()
        for item, hypotheses in self.cut.items():
            finished[item].extend(hypotheses)
        last = len(self.history) - 1
        for a, item in enumerate(self.active.tolist()):
            beams = np.flatnonzero(np.isfinite(self.scores[a]))
            finished[item].extend(self._hypotheses(last, a * self.beam + beams))
        n = self.options.num_hypotheses
        return [sorted(f, key=lambda h: -h.score)[:n] for f in finished]

    def best_tokens(self, item: int) -> list[int]:
        if self.rows and item in self.active:  # its first live row, traced back
            row = int(np.flatnonzero(self.active == item)[0]) * self.beam
            # back only to where it meets the path last traced (a stream asks at every step)
            rows, tokens = self._traced.get(item, ((), ()))
            last, new_rows, new_tokens = len(self.history) - 1, [], []
            while last >= 0 and not (last < len(rows) and rows[last] == row):
                step = self.history[last]
                new_rows.append(row)
                new_tokens.append(int(step.token[row]))
                row, last = int(step.parent[row]), last - 1
            rows, tokens = (
                rows[: last + 1] + tuple(new_rows[::-1]),
                tokens[: last + 1] + tuple(new_tokens[::-1]),
            )
            self._traced[item] = (rows, tokens)
            return list(tokens)
        ended = self._finished(item)[item] + self.cut.get(item, [])
        return max(ended, key=lambda h: h.score).tokens


def make_search(
    batch: int, options: DecodingOptions, bos: int, eos: int, inputs: InputControls | None = None
) -> Search:
    """The search `options` ask for, over `batch` inputs (`inputs`: what differs between
    them)."""
    if options.sampling:
        return SamplingSearch(batch, options, bos, eos, inputs)
    if options.beam_size == 1:
        return GreedySearch(batch, options, bos, eos, inputs=inputs)
    return BeamSearch(batch, options, bos, eos, inputs)


def run(search: Search, inference: Inference, attention: bool = True) -> list[list[Hypothesis]]:
    """Decodes `search` to the end on an inference batch of its own; `attention`: keep each
    step's cross-attention (the hypotheses' alignment)."""
    if not np.array_equal(search.sources, np.arange(search.rows)):
        inference.reorder(search.sources)
    while not search.done:
        rows = search.rows
        candidates, seen = inference.search_step(search.tokens, search.request(attention))
        keep = search.advance(candidates, seen)
        if not search.done and not np.array_equal(keep, np.arange(rows)):
            inference.reorder(keep)
    return search.results()


def decode(
    inference: Inference,
    batch: int,
    options: DecodingOptions,
    bos: int,
    eos: int,
    attention: bool = True,
    inputs: InputControls | None = None,
) -> list[list[Hypothesis]]:
    """n-best hypotheses, best first, for each of `batch` inputs; without `attention` the
    hypotheses carry no alignment (and the cross-attention never leaves the engine)."""
    return run(make_search(batch, options, bos, eos, inputs), inference, attention)
