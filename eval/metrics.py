"""Extraction metrics: small registered functions comparing a generated suffix with the true one, and the registry
that every per-window measure of ``results.json`` is summarised through.

Each metric is registered (lm-eval style) with its ``name``, whether higher is better, how per-window values
aggregate (:data:`AGGREGATIONS`: ``rate`` for verdicts -- the fraction of true windows, with a Wilson interval;
``mean`` for the rest -- a normal interval clipped to the metric's ``bounds``) and whether it exists only when a
decoding option is on. The summaries (``goldfish.eval.aggregate``) are built from this registry alone: register a
metric and it is in every row of ``summary``. Metrics of the greedy generation take ``(gen_ids, truth_ids, gen_text,
truth_text)`` and most use only the ids; measures computed by another pass (the one-pass scores, beam search,
sampling) are registered without a function (:func:`register_measure`). Definitions:

* ``exact_match``: the generation equals the truth token for token (the verbatim-extraction verdict).
* ``token_match``: fraction of the S positions where generation and truth agree (Pythia's memorization score,
  Biderman et al. 2023).
* ``longest_match_prefix``: length of the correct run from the first suffix token up to the first mistake.
* ``rouge_l``: ROUGE-L F1 on token ids = F1 of the longest common *subsequence* (same as ``rouge-score``'s
  ``rougeL`` given the ids as tokens); ``rouge_l_words``: the same on whitespace-separated words of the decoded
  texts (case kept; no stemming).
* ``rouge_l_paper``: ROUGE-L F1 as the Goldfish paper's evaluation computes it: the ``rouge-score`` package's
  ``rougeL`` with its default tokenizer (lower-cased, runs of ``[a-z0-9]`` as words) and *no* stemming. The paper's
  ``eval/data_extraction.py`` (github.com/ahans30/goldfish-loss, commit 70bfad8) calls ``evaluate.load("rouge")
  .compute(predictions=[gen], references=[truth])`` per document and averages; that is ``RougeScorer(rouge_types,
  use_stemmer=False).score(truth, gen)["rougeL"].fmeasure`` (``evaluate``'s default is ``use_stemmer=False``).
  The paper decoded with ``skip_special_tokens=True``; here the texts keep special tokens, which changes the value
  only where one is generated or in the truth.
* ``lcs_len``: longest common *substring* (contiguous run of tokens present in both).
* ``edit_distance``: Levenshtein distance on token sequences divided by the longer length (0 = identical, 1 =
  nothing in common), via ``rapidfuzz``.

Measures of other passes (definitions in ``goldfish.eval.extraction`` and ``eval/extraction_task.py``):
``onepass_exact``, ``extraction_strength``, ``onepass_token_acc``, ``suffix_logprob``, ``np_extraction``;
``beam_exact_match`` (``decoding.beam > 1``) and ``sample_rate`` (``decoding.samples > 0``).

Every metric carries the words a report shows for it: ``label`` (a plot's axis and title) and ``short`` (a table
column). :data:`HEADLINE` names the metrics an experiment reports per cell and may make its headline
(``headline_metric``), in the order its tables show them; :data:`ROUGE` the two ROUGE-Ls shown side by side.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

from rapidfuzz.distance import LCSseq, Levenshtein
from rouge_score import rouge_scorer

Ids = Sequence[int]


AGGREGATIONS = ("mean", "rate")  # how a summary reduces a metric's window values (see the module docstring)
Bounds = tuple[float, float]


@dataclasses.dataclass(frozen=True)
class Metric:
    """A registered per-window measure: ``fn(gen_ids, truth_ids, gen_text, truth_text) -> value`` (None: written into
    the window by another pass), its direction, its aggregation, the range its value can take, and whether windows
    carry it only when a decoding option is on (``optional``: then summarised only where some window has it)."""

    name: str
    fn: Callable[[Ids, Ids, str, str], float | int | bool] | None
    higher_is_better: bool
    aggregation: str = "mean"
    bounds: Bounds = (-math.inf, math.inf)
    optional: bool = False
    label: str = ""  # a plot's words for it (default: the name with spaces)
    short: str = ""  # a table column's words for it (default: the label)

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", self.label or self.name.replace("_", " "))
        object.__setattr__(self, "short", self.short or self.label)

    @property
    def summary_key(self) -> str:
        """The name of its summary column: a rate is ``<name>_rate`` (``exact_match`` -> ``exact_match_rate``)."""
        return self.name if self.aggregation != "rate" or self.name.endswith("_rate") else f"{self.name}_rate"


METRICS: dict[str, Metric] = {}


def _register(metric: Metric) -> None:
    if metric.name in METRICS:
        raise ValueError(f"metric {metric.name!r} is registered twice")
    if metric.aggregation not in AGGREGATIONS:
        raise ValueError(f"metric {metric.name!r}: aggregation {metric.aggregation!r} is not one of {AGGREGATIONS}")
    METRICS[metric.name] = metric


def register_metric(
    name: str,
    higher_is_better: bool,
    aggregation: str = "mean",
    bounds: Bounds = (-math.inf, math.inf),
    label: str = "",
    short: str = "",
):
    """Decorator adding a metric of the greedy generation, ``fn(gen_ids, truth_ids, gen_text, truth_text)``, to
    :data:`METRICS` under ``name``: computed for every window, summarised in every row of ``summary``; ``label`` and
    ``short``: its words in plots and table columns."""

    def wrap(fn):
        _register(Metric(name, fn, higher_is_better, aggregation, bounds, label=label, short=short))
        return fn

    return wrap


def register_measure(
    name: str,
    higher_is_better: bool,
    aggregation: str = "mean",
    bounds: Bounds = (-math.inf, math.inf),
    optional: bool = False,
    label: str = "",
    short: str = "",
) -> None:
    """Register a per-window measure that another pass writes into the window records (one pass, beam, samples),
    so the summaries aggregate it like every metric."""
    _register(Metric(name, None, higher_is_better, aggregation, bounds, optional, label, short))


def f1_from_lcs(lcs: int, n_pred: int, n_ref: int) -> float:
    """ROUGE-L F1 (beta = 1) from the LCS length and both lengths; 0 when either side is empty."""
    if lcs == 0 or n_pred == 0 or n_ref == 0:
        return 0.0
    precision, recall = lcs / n_pred, lcs / n_ref
    return 2 * precision * recall / (precision + recall)


def longest_common_substring(a: Ids, b: Ids) -> int:
    """Length of the longest contiguous run shared by ``a`` and ``b`` (O(len(a)·len(b)) dynamic programme)."""
    best = 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, start=1):
            if x == y:
                cur[j] = prev[j - 1] + 1
                if cur[j] > best:
                    best = cur[j]
        prev = cur
    return best


@register_metric(
    "exact_match", higher_is_better=True, aggregation="rate", label="exact-match rate", short="exact match"
)
def exact_match(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> bool:
    return list(gen) == list(truth)


@register_metric("token_match", higher_is_better=True, bounds=(0.0, 1.0))
def token_match(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> float:
    if not truth:
        return 0.0
    return sum(g == t for g, t in zip(gen, truth)) / len(truth)


@register_metric("longest_match_prefix", higher_is_better=True, bounds=(0.0, math.inf))
def longest_match_prefix(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> int:
    n = 0
    for g, t in zip(gen, truth):
        if g != t:
            break
        n += 1
    return n


@register_metric(
    "rouge_l", higher_is_better=True, bounds=(0.0, 1.0), label="ROUGE-L (token ids)", short="ROUGE-L tokens"
)
def rouge_l(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> float:
    return f1_from_lcs(int(LCSseq.similarity(list(gen), list(truth))), len(gen), len(truth))


@register_metric("rouge_l_words", higher_is_better=True, bounds=(0.0, 1.0))
def rouge_l_words(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> float:
    g, t = gen_text.split(), truth_text.split()
    return f1_from_lcs(int(LCSseq.similarity(g, t)), len(g), len(t))


_PAPER_ROUGE = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)


@register_metric(
    "rouge_l_paper",
    higher_is_better=True,
    bounds=(0.0, 1.0),
    label="ROUGE-L (rouge-score, the paper's)",
    short="ROUGE-L rouge-score",
)
def rouge_l_paper(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> float:
    return float(_PAPER_ROUGE.score(truth_text, gen_text)["rougeL"].fmeasure)


@register_metric("lcs_len", higher_is_better=True, bounds=(0.0, math.inf))
def lcs_len(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> int:
    return longest_common_substring(list(gen), list(truth))


@register_metric("edit_distance", higher_is_better=False, bounds=(0.0, 1.0))
def edit_distance(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> float:
    return float(Levenshtein.normalized_distance(list(gen), list(truth)))


# measures of the one-pass scores (goldfish.eval.extraction) and of the adaptive decoders (eval/run.py)
register_measure("onepass_exact", True, "rate")
register_measure("extraction_strength", True, bounds=(0.0, 1.0))
register_measure("onepass_token_acc", True, bounds=(0.0, 1.0))
register_measure("suffix_logprob", True, bounds=(-math.inf, 0.0))
register_measure("np_extraction", True, bounds=(0.0, 1.0))
register_measure("beam_exact_match", True, "rate", optional=True)
register_measure("sample_rate", True, bounds=(0.0, 1.0), optional=True)


# the metrics an experiment reports per cell (and may headline), in the order its tables show them: verbatim
# extraction, the paper's ROUGE-L (rouge-score on words), ROUGE-L on token ids, token match
HEADLINE = ("exact_match", "rouge_l_paper", "rouge_l", "token_match")
ROUGE = ("rouge_l_paper", "rouge_l")  # the ROUGE-Ls shown side by side: the paper's first, token ids beside it


def compute_metrics(
    gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "", names: Sequence[str] | None = None
) -> dict[str, float | int | bool]:
    """Every registered metric of the generation (or ``names``) for one window -> ``{name: value}``."""
    chosen = {n: m for n, m in METRICS.items() if m.fn is not None} if names is None else {n: METRICS[n] for n in names}
    return {name: m.fn(gen, truth, gen_text, truth_text) for name, m in chosen.items()}
