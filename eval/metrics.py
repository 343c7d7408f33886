"""Extraction metrics: small registered functions comparing a generated suffix with the true one.

Each metric is registered (lm-eval style) with its ``name``, whether higher is better, and how per-window values
aggregate (``mean`` for all of these; booleans become rates). Metrics take ``(gen_ids, truth_ids, gen_text,
truth_text)`` and most use only the ids. Definitions:

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
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from rapidfuzz.distance import LCSseq, Levenshtein
from rouge_score import rouge_scorer

Ids = Sequence[int]


@dataclasses.dataclass(frozen=True)
class Metric:
    """A registered metric: ``fn(gen_ids, truth_ids, gen_text, truth_text) -> value``."""

    name: str
    fn: Callable[[Ids, Ids, str, str], float | int | bool]
    higher_is_better: bool
    aggregation: str = "mean"


METRICS: dict[str, Metric] = {}


def register_metric(name: str, higher_is_better: bool, aggregation: str = "mean"):
    """Decorator adding ``fn`` to :data:`METRICS` under ``name``."""

    def wrap(fn):
        if name in METRICS:
            raise ValueError(f"metric {name!r} is registered twice")
        METRICS[name] = Metric(name, fn, higher_is_better, aggregation)
        return fn

    return wrap


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


@register_metric("exact_match", higher_is_better=True)
def exact_match(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> bool:
    return list(gen) == list(truth)


@register_metric("token_match", higher_is_better=True)
def token_match(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> float:
    if not truth:
        return 0.0
    return sum(g == t for g, t in zip(gen, truth)) / len(truth)


@register_metric("longest_match_prefix", higher_is_better=True)
def longest_match_prefix(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> int:
    n = 0
    for g, t in zip(gen, truth):
        if g != t:
            break
        n += 1
    return n


@register_metric("rouge_l", higher_is_better=True)
def rouge_l(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> float:
    return f1_from_lcs(int(LCSseq.similarity(list(gen), list(truth))), len(gen), len(truth))


@register_metric("rouge_l_words", higher_is_better=True)
def rouge_l_words(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> float:
    g, t = gen_text.split(), truth_text.split()
    return f1_from_lcs(int(LCSseq.similarity(g, t)), len(g), len(t))


_PAPER_ROUGE = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)


@register_metric("rouge_l_paper", higher_is_better=True)
def rouge_l_paper(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> float:
    return float(_PAPER_ROUGE.score(truth_text, gen_text)["rougeL"].fmeasure)


@register_metric("lcs_len", higher_is_better=True)
def lcs_len(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> int:
    return longest_common_substring(list(gen), list(truth))


@register_metric("edit_distance", higher_is_better=False)
def edit_distance(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "") -> float:
    return float(Levenshtein.normalized_distance(list(gen), list(truth)))


def compute_metrics(gen: Ids, truth: Ids, gen_text: str = "", truth_text: str = "",
                    names: Sequence[str] | None = None) -> dict[str, float | int | bool]:
    """Every registered metric (or ``names``) for one window -> ``{name: value}``."""
    chosen = METRICS if names is None else {n: METRICS[n] for n in names}
    return {name: m.fn(gen, truth, gen_text, truth_text) for name, m in chosen.items()}
