"""Decoding strategies over an `Inference`: numpy in, numpy out, the same for every engine.

A step produces one token per row: a content token or `</s>`. `max_length` bounds the steps,
so a hypothesis that reaches it ends without `</s>`. Scores are sums of log-probabilities;
ranking divides them by (steps ** length_penalty).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from service.errors import InvalidArgument
from service.inference import Inference
from service.search import Candidates, SearchRequest

MAX_BEAM_SIZE = 16


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

    @property
    def sampling(self) -> bool:
        return self.temperature > 0

    def validate(self, max_length_limit: int) -> None:
        """Raises one InvalidArgument naming every bad field."""
        problems = self._sampling_problems()
        if not 1 <= self.beam_size <= MAX_BEAM_SIZE:
            problems.append(f"beam_size must be in 1..{MAX_BEAM_SIZE}, got {self.beam_size}")
        if not 1 <= self.max_length <= max_length_limit:
            problems.append(f"max_length must be in 1..{max_length_limit}, got {self.max_length}")
        if not 0.0 <= self.length_penalty <= 10.0:
            problems.append(f"length_penalty must be in 0..10, got {self.length_penalty}")
        if not self.sampling and not 1 <= self.num_hypotheses <= self.beam_size:
            problems.append(
                f"num_hypotheses must be in 1..beam_size ({self.beam_size}), "
                f"got {self.num_hypotheses}"
            )
        if problems:
            raise InvalidArgument("; ".join(problems))

    def _sampling_problems(self) -> list[str]:
        problems = []
        if not 0.0 <= self.temperature <= 100.0:
            problems.append(f"temperature must be in 0..100, got {self.temperature}")
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


@dataclass
class _Row:
    """A live hypothesis: what it produced so far."""

    tokens: list[int]
    log_probs: list[float]
    attention: list[np.ndarray]

    def extend(self, token: int, log_prob: float, attention: np.ndarray | None) -> _Row:
        """A new row one token longer (beams: one row may be extended several ways)."""
        seen = self.attention if attention is None else self.attention + [attention]
        return _Row(self.tokens + [token], self.log_probs + [log_prob], seen)

    def append(self, token: int, log_prob: float, attention: np.ndarray | None) -> None:
        """This row one token longer, in place (a row extended one way only)."""
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
    (service.search); `advance` takes them, with the cross-attention of its rows when it was
    asked for, and returns the rows that go on (an index that may drop or repeat rows), with
    which the caller reorders the inference. Several searches can share one inference batch
    (continuous batching), each owning a block of rows.
    """

    sources: np.ndarray  # (R,) input of each row
    tokens: np.ndarray  # (R, 1) int64, each row's next input token
    steps: int  # steps taken
    k: int = 1  # candidates a row needs; 0: the whole vocabulary
    temperature: float | None = None  # sampling: candidates ranked after this temperature
    single: bool = False  # one row that takes its best candidate (GreedySearch.advance_single)

    def request(self, attention: bool = True) -> SearchRequest:
        """The search request of this search's rows alone."""
        temperature = None
        if self.temperature is not None:
            temperature = np.full(self.rows, self.temperature, dtype=np.float32)
        return SearchRequest(self.k, temperature, attention)

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

    def __init__(self, batch, options: DecodingOptions, bos: int, eos: int, choose=None, copies=1):
        self.options, self.eos, self.copies, self.steps = options, eos, copies, 0
        self.choose = choose  # None: the best candidate
        self.hypotheses = [_Row([], [], []) for _ in range(batch * copies)]
        self.finished: list[Hypothesis | None] = [None] * (batch * copies)
        self.active = np.arange(batch * copies)  # the hypothesis each row extends
        self.sources = self.active // copies
        self.tokens = np.full((batch * copies, 1), bos, dtype=np.int64)
        # one row taking the best candidate: the scheduler advances it without numpy
        self.single = choose is None and batch * copies == 1

    @property
    def tokens(self) -> np.ndarray:
        if self._tokens is None:  # a single row's next token, kept as an int until asked
            self._tokens = np.array([[self._token]], dtype=np.int64)
        return self._tokens

    @tokens.setter
    def tokens(self, value: np.ndarray) -> None:
        self._tokens, self._token = value, None

    @property
    def next_token(self) -> int:
        """A `single` search's next input token (a live one's)."""
        return int(self._tokens[0, 0]) if self._token is None else self._token

    def advance_single(self, token: int, log_prob: float) -> bool:
        """`advance` of a `single` search by its row's best candidate, without attention;
        whether the row goes on. Plain Python: a busy server's step holds hundreds of these,
        and numpy's per-call cost would be most of their time (the next token stays an int:
        the scheduler makes one array of every single row's, `next_token`)."""
        row = self.hypotheses[0]
        row.tokens.append(token)  # _Row.append without attention, inlined
        row.log_probs.append(log_prob)
        self.steps += 1
        if token != self.eos and self.steps < self.options.max_length:
            self._tokens, self._token = None, token
            return True
        self.finished[0] = row.finish(self.eos, self.options.length_penalty)
        self.active, self.sources = self.active[:0], self.sources[:0]
        self.tokens = np.zeros((0, 1), dtype=np.int64)
        return False

    def advance(self, candidates: Candidates, attention: np.ndarray | None) -> np.ndarray:
        # one row per decoding input is the common case of a busy server: plain Python there
        if self.choose is None:
            best, log_probs = candidates.ids[:, 0], candidates.log_probs[:, 0]
        else:
            column = np.asarray(self.choose(candidates), dtype=np.int64)[:, None]  # (R, 1)
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
        if keep.all():
            self.tokens = best[:, None]
            return np.arange(len(keep))
        for h in self.active[~keep].tolist():
            self.finished[h] = rows[h].finish(self.eos, self.options.length_penalty)
        self.active, self.sources = self.active[keep], self.sources[keep]
        self.tokens = best[keep, None]
        return np.flatnonzero(keep)

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
    vocabulary) -> the column of one sampled token per row, after top-k and top-p. The draw
    reads the numbers in the candidates only, so a seed gives the same samples on every engine
    whose candidates are equal."""
    rng = np.random.default_rng(options.seed)

    def choose(candidates: Candidates) -> np.ndarray:
        sorted_probs = np.exp(candidates.scores)  # (B, k), best first
        keep = np.ones_like(sorted_probs, dtype=bool)
        if options.top_k:
            keep[:, options.top_k :] = False
        if options.top_p < 1.0:  # keep a token while the mass before it is below top_p
            before = np.cumsum(sorted_probs, axis=-1) - sorted_probs
            keep &= before < options.top_p
        probs = np.where(keep, sorted_probs, 0.0)
        probs /= probs.sum(axis=-1, keepdims=True)
        return np.array([rng.choice(len(p), p=p) for p in probs], dtype=np.int64)

    return choose


class SamplingSearch(GreedySearch):
    """`num_hypotheses` samples per input, best score first; log-probs are the model's own
    (before temperature)."""

    def __init__(self, batch: int, options: DecodingOptions, bos: int, eos: int):
        super().__init__(batch, options, bos, eos, sampler(options), options.num_hypotheses)
        self.k, self.temperature = options.top_k, options.temperature


class _Beams:
    """The search state of a batch: `beam` live hypotheses and the finished ones, per input."""

    def __init__(self, batch: int, options: DecodingOptions, eos: int):
        self.beam, self.eos, self.penalty = options.beam_size, eos, options.length_penalty
        self.live = [[_Row([], [], []) for _ in range(self.beam)] for _ in range(batch)]
        # only the first beam is live at the start: the others would repeat it
        self.scores = np.tile(np.array([0.0] + [-np.inf] * (self.beam - 1)), (batch, 1))  # (B, k)
        self.finished: list[list[Hypothesis]] = [[] for _ in range(batch)]

    def best_candidates(self, active: np.ndarray, candidates: Candidates):
        """Candidates of the A * beam live rows (2 beam a row: enough, since a row's tokens
        past its 2 beam best cannot be among its input's 2 beam best) -> per input, its
        2 beam best extensions, best first (equal scores in (beam, token) order), as
        (A, 2 beam) arrays of beam, token, log-probability and score."""
        n, width = self.beam, 2 * self.beam
        shape = (len(active), n * width)
        ids = candidates.ids[:, :width].reshape(shape)
        log_probs = candidates.log_probs[:, :width].reshape(shape)
        scores = (self.scores[active, :, None] + log_probs.reshape(-1, n, width)).reshape(shape)
        beams = np.broadcast_to(np.repeat(np.arange(n), width), shape)
        order = np.lexsort((ids, beams, -scores), axis=-1)[:, :width]
        return tuple(np.take_along_axis(x, order, 1) for x in (beams, ids, log_probs, scores))

    def advance(self, a, item, best, attention) -> list[tuple[int, int]]:
        """Sorts input `item`'s best extensions (its rows start at a * beam) into finished
        and live hypotheses. Returns (previous beam, new token) of each new live row."""
        n = self.beam
        chosen, live, scores = [], [], []
        for rank, (beam, token, log_prob, score) in enumerate(zip(*best, strict=True)):
            beam, token = int(beam), int(token)
            row = a * n + beam
            seen = None if attention is None else attention[row]
            extended = self.live[item][beam].extend(token, float(log_prob), seen)
            if token == self.eos:
                if rank < n:  # an `</s>` outside the best `beam` would not have been kept
                    self.finished[item].append(extended.finish(self.eos, self.penalty))
            elif len(chosen) < n:
                chosen.append((beam, token))
                live.append(extended)
                scores.append(score)
        self.live[item] = live
        self.scores[item, : len(scores)] = scores
        return chosen

    def done(self, item: int) -> bool:
        return len(self.finished[item]) >= self.beam

    def results(self, active: np.ndarray, n: int) -> list[list[Hypothesis]]:
        """Inputs still searching at max_length keep their live hypotheses as they are."""
        for item in active:
            for beam in range(self.beam):
                if np.isfinite(self.scores[item, beam]):
                    self.finished[item].append(self.live[item][beam].finish(self.eos, self.penalty))
        return [sorted(f, key=lambda h: -h.score)[:n] for f in self.finished]


class BeamSearch(Search):
    """Beam search with `beam_size` live hypotheses (rows) per input.

    An `</s>` among the best `beam_size` candidates of a step finishes a hypothesis; an input
    is done once it has `beam_size` finished ones, and its rows leave. With beam_size 1 this is
    greedy search.
    """

    def __init__(self, batch: int, options: DecodingOptions, bos: int, eos: int):
        self.beam, self.options, self.steps = options.beam_size, options, 0
        self.k = 2 * self.beam
        self.beams = _Beams(batch, options, eos)
        self.active = np.arange(batch)  # inputs still searching, `beam` rows each
        self.sources = np.repeat(self.active, self.beam)
        self.tokens = np.full((batch * self.beam, 1), bos, dtype=np.int64)

    def advance(self, candidates: Candidates, attention: np.ndarray | None) -> np.ndarray:
        n, beams = self.beam, self.beams
        best = beams.best_candidates(self.active, candidates)
        rows, next_tokens, still = [], [], []
        for a, item in enumerate(self.active):
            chosen = beams.advance(a, item, [x[a] for x in best], attention)
            if not beams.done(item):
                still.append(item)
                rows.extend(a * n + beam for beam, _ in chosen)
                next_tokens.extend(token for _, token in chosen)
        self.active = np.asarray(still, dtype=np.int64)
        self.steps += 1
        if self.steps >= self.options.max_length:  # inputs still searching keep their live ones
            rows, next_tokens = [], []
        self.sources = np.repeat(self.active, n) if rows else np.zeros(0, dtype=np.int64)
        self.tokens = np.asarray(next_tokens, dtype=np.int64).reshape(-1, 1)
        return np.asarray(rows, dtype=np.int64)

    def results(self) -> list[list[Hypothesis]]:
        return self.beams.results(self.active, self.options.num_hypotheses)

    def best_tokens(self, item: int) -> list[int]:
        if item in self.active and self.rows:
            return list(self.beams.live[item][0].tokens)
        return max(self.beams.finished[item], key=lambda h: h.score).tokens


def make_search(batch: int, options: DecodingOptions, bos: int, eos: int) -> Search:
    """The search `options` ask for, over `batch` inputs."""
    if options.sampling:
        return SamplingSearch(batch, options, bos, eos)
    if options.beam_size == 1:
        return GreedySearch(batch, options, bos, eos)
    return BeamSearch(batch, options, bos, eos)


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


def greedy_search(
    inference: Inference, batch: int, options: DecodingOptions, bos: int, eos: int, choose=None
) -> list[list[Hypothesis]]:
    return run(GreedySearch(batch, options, bos, eos, choose), inference)


def sampling_search(
    inference: Inference, batch: int, options: DecodingOptions, bos: int, eos: int
) -> list[list[Hypothesis]]:
    return run(SamplingSearch(batch, options, bos, eos), inference)


def beam_search(
    inference: Inference, batch: int, options: DecodingOptions, bos: int, eos: int
) -> list[list[Hypothesis]]:
    return run(BeamSearch(batch, options, bos, eos), inference)


def decode(
    inference: Inference,
    batch: int,
    options: DecodingOptions,
    bos: int,
    eos: int,
    attention: bool = True,
) -> list[list[Hypothesis]]:
    """n-best hypotheses, best first, for each of `batch` inputs; without `attention` the
    hypotheses carry no alignment (and the cross-attention never leaves the engine)."""
    return run(make_search(batch, options, bos, eos), inference, attention)
