"""Membership inference: per-document attack scores and their ROC evaluation.

Every attack turns a document into one number, oriented so that **members score higher** (losses are negated), so a
single ROC convention serves all of them:

* ``loss``        -- minus the mean next-token NLL (Yeom et al. 2018).
* ``zlib_mimir``  -- minus the *mean* NLL (nats/token) divided by the zlib-compressed byte length of the decoded
                     text: the form of Carlini et al. (2021)'s code as reimplemented by MIMIR (Duan et al. 2024).
                     The denominator grows with length while the numerator does not, so this score tracks
                     document length as much as memorisation.
* ``zlib_ratio``  -- minus the *total* NLL in bits divided by the zlib-compressed length in bits: how many times
                     longer the model's code for the text is than zlib's. Both are totals, so it is length-normalised.
* ``lowercase``   -- minus NLL(text) / NLL(lowercased text) (Carlini et al. 2021), over the first
                     ``lowercase_tokens`` tokens of the document (all of it when shorter or unset): the one attack
                     that scores a second text, so its extra pass is bounded (``benchmarks/long_scoring.py``).
* ``reference``   -- NLL under a ``reference_model`` minus NLL under the target (calibration by a model that never
                     saw the data; Carlini et al. 2021 / 2022).
* ``recall``      -- ReCaLL (Xie et al. 2024): LL(x | P) / LL(x), the ratio of the document's average
                     log-likelihood conditioned on a nonmember prefix P to its unconditional one. A member's
                     likelihood drops more when a nonmember context is put before it, so the ratio (of two negative
                     numbers) is larger for members. P: the first ``recall_shots`` nonmember documents joined, its
                     last ``recall_prefix_tokens`` tokens; both likelihoods are over the same targets (tokens 1 .. of
                     the document, as many as fit in the scoring window after P); the nonmembers that form P are not
                     scored (NaN: dropped from the ROC), as MIMIR keeps its prefix out of the evaluation.
                     :mod:`goldfish.eval.recall`: P is read once per model; LL(x) is the target pass's own where
                     the document fits (the same targets), so ReCaLL costs one pass over each document.
* ``dc_pdd``      -- DC-PDD (Zhang et al. 2024): per target token of its first occurrence in the document,
                     alpha_i = p(x_i) * -log f(x_i), clipped at ``dc_pdd_clip`` (0.01, the paper's a), averaged.
                     f is a token frequency distribution of a reference corpus, Laplace-smoothed
                     ((1 + count) / (total + V)): here the nonmember documents' tokens (MIMIR uses C4, which would
                     need a download), leaving a nonmember's own tokens out of its reference. Members score higher
                     (MIMIR returns minus this mean, as its scores are lower for members).
* ``min_k_<k>``   -- mean of the lowest k % token log-probs (Shi et al. 2024).
* ``min_k_pp_<k>`` -- Min-K %++ (Zhang et al. 2024): each token's log-prob standardised by the mean
                     mu_t = E_{z~p_t}[log p_t(z)] and std sigma_t of log p under the model's own next-token
                     distribution at that position, then the mean of the lowest k %.

Per-token log-probs come from :mod:`goldfish.eval.scoring` (bounded memory for any document length: windows of the
model's context with a stride, token-budget batches, chunked logits). :func:`score_documents` reduces each document to
its scores right after its pass (:func:`target_pass`) and, given a ``cache`` (a dict-like; :class:`goldfish.eval.run`
passes one backed by a JSONL file), stores them there and skips documents already in it, so a killed run resumes
without rescoring. With ``keep_tokens`` the pass also keeps each target's log-prob and top-1 correctness in the cache:
an experiment's attacks analysis (``goldfish.experiment.analyses.attacks``) reads them there instead of scoring the
documents again, so eval's membership task and the experiment's ``attacks.json`` are one pipeline, one pass per
document.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import zlib
from typing import Any, Callable, MutableMapping, Sequence

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

from goldfish.errors import UserError

from .attack_names import ATTACK_SPECS, ratio_key
from .recall import recall_score, recall_scores  # noqa: F401  (ReCaLL: eval/recall.py; named here as before)
from .scoring import (
    DEFAULT_CHUNK,
    DEFAULT_TOKEN_BUDGET,
    ScoreMemo,
    document_key,
    iter_token_statistics,
    scoring_window,
)
from .stats import auc_pvalue, bootstrap_auc, tpr_at_fpr

log = logging.getLogger(__name__)

MAX_ROC_POINTS = 200  # ROC curves are down-sampled to this many points for results.json
FPR_TARGETS = {"tpr_at_1pct_fpr": 0.01, "tpr_at_0.1pct_fpr": 0.001}


def _vocab_size(model: Any) -> int:
    return int(model.get_input_embeddings().num_embeddings)


def _check_docs(docs: Sequence[Sequence[int]], vocab_size: int) -> None:
    for i, doc in enumerate(docs):
        if len(doc) < 2:
            raise UserError(
                f"document {i} has {len(doc)} token(s); membership scores need at least 2 (drop empty documents)"
            )
        hi, lo = max(doc), min(doc)
        if hi >= vocab_size or lo < 0:
            bad = hi if hi >= vocab_size else lo
            raise UserError(
                f"document {i} holds token id {bad} outside the model vocabulary [0, {vocab_size}); "
                "tokenize with the model's own tokenizer"
            )


# ------------------------------------------------------------------------------------------------- the attacks


def min_k_count(n_tokens: int, ratio: float) -> int:
    """How many of ``n_tokens`` the Min-K% mean uses: floor(ratio * n) as in Shi et al.'s code, but at least 1."""
    return max(1, int(math.floor(ratio * n_tokens + 1e-9)))


def lowest_k_mean(values: np.ndarray, ratio: float) -> float:
    """Mean of the lowest ``ratio`` fraction of ``values`` (the Min-K% reduction)."""
    k = min_k_count(len(values), ratio)
    return float(np.mean(np.partition(values, k - 1)[:k]))


def _check_ratios(min_k_ratios: Sequence[float]) -> list[float]:
    ratios = [float(r) for r in min_k_ratios]
    problems = [f"min_k ratio {r} must be in (0, 1] (e.g. 0.2 for 20 %)" for r in ratios if not 0 < r <= 1]
    keys = [ratio_key("min_k", r) for r in ratios]
    if len(set(keys)) != len(keys):
        problems.append(f"min_k ratios {ratios} round to duplicate percentages {keys}; use distinct whole percents")
    if problems:
        raise UserError("; ".join(problems))
    return ratios


def zlib_length(text: str) -> int:
    """zlib-compressed length in bytes of UTF-8 ``text`` (Carlini et al.'s 'zlib entropy'); at least 1."""
    return max(1, len(zlib.compress(text.encode("utf-8"))))


def lowercase_docs(docs: Sequence[Sequence[int]], texts: list[str], tokenizer: Any) -> list[list[int]]:
    """Re-tokenize the lowercased text; a leading special token (BOS) of the original is kept."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    lowered = []
    for doc, text in zip(docs, texts):
        ids = list(tokenizer.encode(text.lower(), add_special_tokens=False))
        if doc and doc[0] in special:
            ids = [doc[0]] + ids
        lowered.append(ids)
    return lowered


def token_counts(docs: Sequence[Sequence[int]], vocab_size: int) -> np.ndarray:
    """(V,) int64 occurrences of each token id over ``docs``: the reference corpus of :func:`dc_pdd_score`."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for d in docs:
        np.add.at(counts, np.asarray(d, dtype=np.int64), 1)
    return counts


def dc_pdd_score(tokens: Sequence[int], logp: Sequence[float], counts: np.ndarray, clip: float = 0.01) -> float:
    """DC-PDD (Zhang et al. 2024) of one document, higher for members.

    ``logp[j]``: log p(tokens[j + 1] | tokens[:j + 1]) (the targets 1 .. L-1); ``counts``: (V,) token counts of the
    reference corpus, smoothed to f = (1 + count) / (sum + V). Over each target token id's first occurrence:
    alpha = p * -log f, clipped at ``clip``; the score is the mean of alpha."""
    counts = np.asarray(counts, dtype=np.float64)
    freq = (1.0 + counts) / (counts.sum() + len(counts))
    targets = np.asarray(tokens[1:], dtype=np.int64)
    _, first = np.unique(targets, return_index=True)
    first = np.sort(first)
    alpha = np.exp(np.asarray(logp, dtype=np.float64)[first]) * -np.log(freq[targets[first]])
    return float(np.minimum(alpha, clip).mean()) if len(alpha) else float("nan")


def _scored_pass(
    model: Any,
    docs: Sequence[Sequence[int]],
    name: str,
    ratios: Sequence[float],
    cache: MutableMapping[str, dict] | None,
    loop: dict,
    head: int | None = None,
    keep_tokens: bool = False,
    memo: ScoreMemo | None = None,
) -> list[dict]:
    """Per document ``{"nll": mean NLL, "nll_sum": total NLL, "min_k_<k>": ..., "min_k_pp_<k>": ...}`` (Min-K only
    when ``ratios``; with ``head``, ``"nll_head"``: the mean NLL of the targets among the first ``head`` tokens; with
    ``keep_tokens``, ``"logp"`` and ``"correct"``: each target's log-probability and top-1 correctness, 0 or 1),
    reusing and filling ``cache``; ``memo``: the model's :class:`goldfish.eval.scoring.ScoreMemo`."""
    cache = {} if cache is None else cache
    what = f"{name}|{loop.get('window')}|{loop.get('stride')}|{','.join(map(str, ratios))}"
    what += f"|{head}" if head else ""
    what += "|tokens" if keep_tokens else ""
    keys = [document_key(d, what) for d in docs]
    todo = [i for i, k in enumerate(keys) if k not in cache]
    stats = iter_token_statistics(
        model, [docs[i] for i in todo], want_pp=bool(ratios), want_rank=keep_tokens, desc=name, memo=memo, **loop
    )
    for j, st in stats:
        row = {"nll": float(-st.logp.mean()), "nll_sum": float(-st.logp.sum())}
        if head:
            row["nll_head"] = float(-st.logp[: head - 1].mean())
        for r in ratios:
            row[ratio_key("min_k", r)] = lowest_k_mean(st.logp, r)
            row[ratio_key("min_k_pp", r)] = lowest_k_mean(st.z, r)
        if keep_tokens:
            row["logp"], row["correct"] = st.logp.tolist(), st.correct.astype(np.int8).tolist()
        cache[keys[todo[j]]] = row
    return [cache[k] for k in keys]


def target_pass(
    model: Any,
    docs: Sequence[Sequence[int]],
    *,
    min_k_ratios: Sequence[float] = (0.2,),
    head: int | None = None,
    window: int | None = None,
    stride: int | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    chunk: int = DEFAULT_CHUNK,
    cache: MutableMapping[str, dict] | None = None,
    keep_tokens: bool = False,
    reference_model: Any = None,
    progress: bool = True,
    logger: Any = None,
    memo: ScoreMemo | None = None,
) -> list[dict]:
    """The one teacher-forced pass of the target model over whole documents that every membership score is reduced
    from (:func:`score_documents`; an experiment's attacks analysis reads its per-token values, ``keep_tokens``):
    per document ``{"nll", "nll_sum", "min_k_<k>", "min_k_pp_<k>"}``, ``"nll_head"`` (the first ``head`` tokens,
    for the lowercase attack) and with ``keep_tokens`` ``"logp"`` and ``"correct"`` per target. ``window`` is
    capped by the models' context (:func:`goldfish.eval.scoring.scoring_window`); ``cache``: rows already scored
    with the same settings are reused, new ones added; ``memo``: segments the model already scored (extraction's
    whole-document windows) are read from it (:class:`goldfish.eval.scoring.ScoreMemo`)."""
    window = scoring_window(window, model, reference_model)
    if window < 2:
        raise UserError(f"window={window} must be >= 2 tokens")
    loop = dict(window=window, stride=stride, token_budget=token_budget, chunk=chunk, progress=progress, logger=logger)
    return _scored_pass(model, docs, "target", _check_ratios(min_k_ratios), cache, loop, head, keep_tokens, memo)


def _column(rows: list[dict], key: str) -> np.ndarray:
    return np.array([r[key] for r in rows], dtype=np.float64)


# ------------------------------------------------------------------------------------------ the attack registry


@dataclasses.dataclass
class AttackInputs:
    """What an attack reads: the target pass' per-document ``rows`` (:func:`target_pass`; per-token ``logp`` when an
    attack asks for ``token_scores``), their mean NLL, the scoring loop's settings and cache, and the optional
    inputs an attack may need (``needs``)."""

    model: Any
    docs: Sequence[Sequence[int]]
    rows: list[dict]
    nll: np.ndarray
    ratios: Sequence[float]
    loop: dict
    cache: MutableMapping[str, dict] | None
    head: int | None
    tokenizer: Any = None
    reference_model: Any = None
    recall_prefix: Sequence[int] | None = None
    recall_skip: Sequence[int] = ()
    dc_pdd_counts: np.ndarray | None = None
    dc_pdd_clip: float = 0.01
    dc_pdd_leave_out: bool = False
    _texts: list[str] | None = None

    def texts(self) -> list[str]:
        if self._texts is None:
            self._texts = [self.tokenizer.decode(list(d), skip_special_tokens=True) for d in self.docs]
        return self._texts


@dataclasses.dataclass(frozen=True)
class Attack:
    """A registered membership attack: ``score(inputs) -> {key: (n,) scores}``, members higher; it runs when every
    input it ``needs`` is given; ``keys(ratios)`` names its scores before any is computed; ``token_scores``: it reads
    the per-token log-probs of the target pass."""

    name: str
    score: Callable[[AttackInputs], dict[str, np.ndarray]]
    needs: tuple[str, ...] = ()
    keys: Callable[[Sequence[float]], list[str]] = lambda ratios: []
    token_scores: bool = False


ATTACKS: dict[str, Attack] = {}  # name -> attack, in the order the membership table lists them


def register_attack(name: str):
    """Register ``fn(inputs) -> {key: scores}`` as attack ``name``, declared in ``attack_names.ATTACK_SPECS``: its
    needs, keys and ``token_scores`` come from that spec, so the experiment config knows it without this module."""
    spec = ATTACK_SPECS.get(name)
    if spec is None:
        raise ValueError(f"attack {name!r} is not declared: add its AttackSpec to goldfish.eval.attack_names first")

    def wrap(fn: Callable[[AttackInputs], dict[str, np.ndarray]]):
        ATTACKS[name] = Attack(name, fn, spec.needs, spec.keys, spec.token_scores)
        return fn

    return wrap


@register_attack("loss")
def _loss(x: AttackInputs) -> dict[str, np.ndarray]:
    return {"loss": -x.nll}


@register_attack("min_k")
def _min_k(x: AttackInputs) -> dict[str, np.ndarray]:
    return {ratio_key(p, r): _column(x.rows, ratio_key(p, r)) for r in x.ratios for p in ("min_k", "min_k_pp")}


@register_attack("zlib")
def _zlib(x: AttackInputs) -> dict[str, np.ndarray]:
    zbytes = np.array([zlib_length(t) for t in x.texts()], dtype=np.float64)
    return {"zlib_mimir": -x.nll / zbytes, "zlib_ratio": -(_column(x.rows, "nll_sum") / math.log(2)) / (8 * zbytes)}


@register_attack("lowercase")
def _lowercase(x: AttackInputs) -> dict[str, np.ndarray]:
    head, tok = x.head, x.tokenizer
    heads = [list(d[:head]) for d in x.docs] if head else x.docs
    lowered = lowercase_docs(
        heads, [tok.decode(d, skip_special_tokens=True) for d in heads] if head else x.texts(), tok
    )
    return {
        "lowercase": -_column(x.rows, "nll_head" if head else "nll") / _lowercase_nll(x.model, lowered, x.cache, x.loop)
    }


@register_attack("reference")
def _reference(x: AttackInputs) -> dict[str, np.ndarray]:
    ref = _scored_pass(x.reference_model, x.docs, "reference", (), x.cache, x.loop)
    return {"reference": _column(ref, "nll") - x.nll}


@register_attack("recall")
def _recall(x: AttackInputs) -> dict[str, np.ndarray]:
    return {
        "recall": recall_scores(
            x.model, x.docs, x.recall_prefix, skip=x.recall_skip, cache=x.cache, loop=x.loop, nll=x.nll
        )
    }


@register_attack("dc_pdd")
def _dc_pdd(x: AttackInputs) -> dict[str, np.ndarray]:
    counts = np.asarray(x.dc_pdd_counts, dtype=np.int64)
    return {
        "dc_pdd": np.array(
            [
                dc_pdd_score(
                    d,
                    r["logp"],
                    counts - token_counts([d], len(counts)) if x.dc_pdd_leave_out else counts,
                    x.dc_pdd_clip,
                )
                for d, r in zip(x.docs, x.rows)
            ],
            dtype=np.float64,
        )
    }


def score_documents(
    model: Any,
    docs: list[list[int]],
    *,
    reference_model: Any = None,
    min_k_ratios: Sequence[float] = (0.2,),
    tokenizer: Any = None,
    window: int | None = None,
    stride: int | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    chunk: int = DEFAULT_CHUNK,
    lowercase_tokens: int | None = None,
    cache: MutableMapping[str, dict] | None = None,
    keep_tokens: bool = False,
    progress: bool = True,
    logger: Any = None,
    recall_prefix: Sequence[int] | None = None,
    recall_skip: Sequence[int] = (),
    dc_pdd_counts: np.ndarray | None = None,
    dc_pdd_clip: float = 0.01,
    dc_pdd_leave_out: bool = False,
    memo: ScoreMemo | None = None,
) -> dict[str, np.ndarray]:
    """Membership scores of each token-id document, higher = more likely a training member.

    Keys: those of every registered attack (``attack_names.ATTACK_SPECS``: ``AttackSpec.keys``, one per Min-K ratio
    for ``min_k``) whose ``needs`` are given -- a ``tokenizer`` (HF-style ``encode``/``decode``) for the zlib and
    lowercase attacks, a ``reference_model`` (same vocabulary) for ``reference``. Each value is a float64 array of shape
    (len(docs),). Whole documents are scored: one longer than ``window`` (default ``scoring.DEFAULT_WINDOW``; capped by
    the smaller context of the two models) is scored in windows advancing by ``stride`` (default 3/4 of the window), see
    :mod:`goldfish.eval.scoring`. ``token_budget``
    bounds the padded tokens per forward pass and ``chunk`` the positions per logits block. ``lowercase_tokens``
    bounds the text the lowercase attack compares (its first that many tokens; None: all). ``cache`` (dict-like)
    keeps each document's reduced scores per pass; documents found there are not scored again; with
    ``keep_tokens`` the target pass also keeps each target's log-probability and top-1 correctness there
    (:func:`target_pass`). ``recall_prefix`` (token ids of nonmember text) adds ``recall``, NaN for the documents
    in ``recall_skip``; ``dc_pdd_counts`` (the reference corpus' :func:`token_counts`) adds ``dc_pdd``, with
    ``dc_pdd_leave_out`` each document's own tokens taken out of the counts first (the documents are that corpus).
    ``memo`` (:class:`goldfish.eval.scoring.ScoreMemo` of ``model``): the target pass reads the segments the model
    already scored from it.
    """
    ratios = _check_ratios(min_k_ratios)
    given = {
        "tokenizer": tokenizer,
        "reference_model": reference_model,
        "recall_prefix": recall_prefix,
        "dc_pdd_counts": dc_pdd_counts,
    }
    runnable = [a for a in ATTACKS.values() if all(given[n] is not None for n in a.needs)]
    if not docs:
        return {k: np.zeros(0) for a in runnable for k in a.keys(ratios)}
    _check_docs(docs, _vocab_size(model))
    head = lowercase_tokens if tokenizer is not None else None
    rows = target_pass(
        model,
        docs,
        min_k_ratios=ratios,
        head=head,
        window=window,
        stride=stride,
        token_budget=token_budget,
        chunk=chunk,
        cache=cache,
        keep_tokens=keep_tokens or any(a.token_scores for a in runnable),
        reference_model=reference_model,
        progress=progress,
        logger=logger,
        memo=memo,
    )
    loop = dict(
        window=scoring_window(window, model, reference_model),
        stride=stride,
        token_budget=token_budget,
        chunk=chunk,
        progress=progress,
        logger=logger,
    )
    ctx = AttackInputs(
        model=model,
        docs=docs,
        rows=rows,
        nll=_column(rows, "nll"),
        ratios=ratios,
        loop=loop,
        cache=cache,
        head=head,
        recall_skip=recall_skip,
        dc_pdd_clip=dc_pdd_clip,
        dc_pdd_leave_out=dc_pdd_leave_out,
        **given,
    )
    scores: dict[str, np.ndarray] = {}
    for attack in runnable:
        scores.update(attack.score(ctx))
    return scores


def _lowercase_nll(model, lowered: list[list[int]], cache, loop: dict) -> np.ndarray:
    """NLL of each lowercased text; NaN where lowercasing leaves fewer than 2 tokens (evaluate_attacks drops it)."""
    ok = [i for i, d in enumerate(lowered) if len(d) >= 2]
    nll = np.full(len(lowered), np.nan)
    rows = _scored_pass(model, [lowered[i] for i in ok], "lowercase", (), cache, loop)
    nll[ok] = _column(rows, "nll") if rows else []
    return nll


# ---------------------------------------------------------------------------------------------- ROC evaluation


def downsample_roc(fpr: np.ndarray, tpr: np.ndarray, max_points: int = MAX_ROC_POINTS) -> tuple[list, list]:
    """At most ``max_points`` ROC points, evenly spaced along the curve's vertices, endpoints kept."""
    if len(fpr) > max_points:
        idx = np.unique(np.round(np.linspace(0, len(fpr) - 1, max_points)).astype(int))
        fpr, tpr = fpr[idx], tpr[idx]
    return [float(x) for x in fpr], [float(x) for x in tpr]


def _finite(name: str, values: Any, split: str) -> np.ndarray:
    """The finite scores. NaN marks a document the attack does not score by design (ReCaLL's prompt documents, a
    text too short once lowercased): said at INFO; an infinite score is a numerical failure: a WARNING."""
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    unscored, infinite = np.isnan(arr), np.isinf(arr)
    if unscored.any():
        log.info("attack %s: %d %s document(s) not scored (NaN) left out of its ROC", name, int(unscored.sum()), split)
    if infinite.any():
        log.warning("attack %s: dropping %d infinite %s score(s)", name, int(infinite.sum()), split)
    return arr[~(unscored | infinite)]


def evaluate_attack(members: Any, nonmembers: Any, *, n_bootstrap: int = 1000, seed: int = 0, name: str = "") -> dict:
    """ROC-AUC (+ bootstrap 95 % CI), TPR at 1 % / 0.1 % FPR and a down-sampled ROC curve for one attack."""
    m, n = _finite(name, members, "member"), _finite(name, nonmembers, "nonmember")
    if len(m) == 0 or len(n) == 0:
        given = np.size(members), np.size(nonmembers)
        fix = "add nonmembers" if 0 in given else "the model's log-probabilities are NaN or infinite: check its weights"
        raise UserError(
            f"attack {name!r} has {len(m)} finite member scores (of {given[0]}) and {len(n)} finite "
            f"nonmember scores (of {given[1]}); an ROC needs both ({fix})"
        )
    y = np.concatenate([np.ones(len(m)), np.zeros(len(n))])
    s = np.concatenate([m, n])
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    result: dict[str, Any] = {"auc": float(roc_auc_score(y, s)), "auc_ci_low": None, "auc_ci_high": None}
    if n_bootstrap > 0:
        low, high = np.percentile(bootstrap_auc(m, n, n_bootstrap, seed), [2.5, 97.5])
        result.update(auc_ci_low=float(low), auc_ci_high=float(high))
    p = auc_pvalue(m, n)  # exact where the separation is perfect (the bootstrap interval is then degenerate)
    result.update(auc_p_value=p["p_value"], auc_log10_p=p["log10_p"], auc_p_method=p["method"])
    for key, target in FPR_TARGETS.items():
        found = tpr_at_fpr(m, n, target)  # below 1 / n nonmembers: the TPR at zero false positives, noted
        result[key], result[f"{key}_note"] = found["roc_tpr"], found["note"]
    result["roc_fpr"], result["roc_tpr"] = downsample_roc(fpr, tpr)
    result["n_members"], result["n_nonmembers"] = len(m), len(n)
    return result


def evaluate_attacks(member_scores: dict, nonmember_scores: dict, *, n_bootstrap: int = 1000, seed: int = 0) -> dict:
    """Evaluate every attack present in both score dicts: ``{name: evaluate_attack(...)}`` (schema "attacks").

    The bootstrap of each attack uses the same ``seed``, so results do not depend on which attacks were run.
    """
    if n_bootstrap < 0:
        raise UserError(f"n_bootstrap={n_bootstrap} must be >= 0 (0 disables the confidence interval)")
    names = [k for k in member_scores if k in nonmember_scores]
    return {
        k: evaluate_attack(member_scores[k], nonmember_scores[k], n_bootstrap=n_bootstrap, seed=seed, name=k)
        for k in names
    }


def membership_section(member_scores: dict, nonmember_scores: dict, *, n_bootstrap: int = 1000, seed: int = 0) -> dict:
    """The whole ``membership`` section of results.json: counts, per-attack evaluation and the raw scores."""
    first = next(iter(member_scores.values()), [])
    first_n = next(iter(nonmember_scores.values()), [])
    return {
        "n_members": len(first),
        "n_nonmembers": len(first_n),
        "attacks": evaluate_attacks(member_scores, nonmember_scores, n_bootstrap=n_bootstrap, seed=seed),
        "scores": {
            k: {"members": [float(x) for x in member_scores[k]], "nonmembers": [float(x) for x in nonmember_scores[k]]}
            for k in member_scores
            if k in nonmember_scores
        },
    }
