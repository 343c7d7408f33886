"""Membership inference: per-document attack scores and their ROC evaluation.

Every attack turns a document into one number, oriented so that **members score higher** (losses are negated), so a
single ROC convention serves all of them:

* ``loss``       -- minus the mean next-token NLL (Yeom et al. 2018).
* ``zlib``       -- minus NLL / zlib-compressed byte length of the decoded text (Carlini et al. 2021): text that is
                    easy for the model but hard for zlib is suspicious.
* ``lowercase``  -- minus NLL(text) / NLL(lowercased text) (Carlini et al. 2021).
* ``reference``  -- NLL under a ``reference_model`` minus NLL under the target (calibration by a model that never saw
                    the data; Carlini et al. 2021 / 2022).
* ``min_k_<k>``  -- mean of the lowest k % token log-probs (Shi et al. 2024).
* ``min_k_pp_<k>`` -- Min-K %++ (Zhang et al. 2024): each token's log-prob standardised by the mean
                    mu_t = E_{z~p_t}[log p_t(z)] and std sigma_t of log p under the model's own next-token
                    distribution at that position, then the mean of the lowest k %.

One forward pass per batch serves all model-based scores (right padding + attention mask); the statistics are
computed in fp32 one row and one time-chunk at a time so the (T, V) fp32 buffer stays bounded for large vocabularies.
"""

from __future__ import annotations

import logging
import math
import time
import zlib
from typing import Any, Sequence

import numpy as np
import torch
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score, roc_curve
from tqdm.auto import tqdm

from goldfish.errors import UserError

log = logging.getLogger(__name__)

_TIME_CHUNK = 512  # positions per fp32 log-softmax chunk: bounds memory at 512 * V * 4 bytes
MAX_ROC_POINTS = 200  # ROC curves are down-sampled to this many points for results.json
FPR_TARGETS = {"tpr_at_1pct_fpr": 0.01, "tpr_at_0.1pct_fpr": 0.001}


# ------------------------------------------------------------------------------------------ per-token statistics


def _vocab_size(model: Any) -> int:
    return int(model.get_input_embeddings().num_embeddings)


def _model_device(model: Any) -> torch.device:
    return next(model.parameters()).device


def context_length(model: Any) -> int | None:
    """The longest sequence the model was built for (``max_position_embeddings`` / ``n_positions``), if known."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def truncate_documents(docs: Sequence[Sequence[int]], max_length: int | None) -> list[list[int]]:
    """The first ``max_length`` tokens of each document (MIA benchmarks such as WikiMIA score a fixed-length
    beginning too); longer documents would run past the model's position range."""
    docs = [list(d) for d in docs]
    if max_length is None:
        return docs
    long = sum(len(d) > max_length for d in docs)
    if long:
        log.warning("membership: %d document(s) longer than %d tokens are scored on their first %d tokens",
                    long, max_length, max_length)
    return [d[:max_length] for d in docs]


def _row_stats(logits: torch.Tensor, targets: torch.Tensor, want_pp: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Token log-probs of ``targets`` (T,) under ``logits`` (T, V), and Min-K%++ z-scores when ``want_pp``."""
    logp_parts, z_parts = [], []
    for t0 in range(0, targets.shape[0], _TIME_CHUNK):
        lp = logits[t0 : t0 + _TIME_CHUNK].float().log_softmax(-1)  # (t, V) fp32
        tgt = targets[t0 : t0 + _TIME_CHUNK]
        token_lp = lp.gather(-1, tgt[:, None]).squeeze(-1)  # (t,)
        logp_parts.append(token_lp)
        if want_pp:
            p = lp.exp()
            mu = (p * lp).sum(-1)  # (t,) E_{z~p}[log p(z)]  (= minus the entropy)
            # (t,) Var_{z~p}[log p(z)], centred: E[lp^2] - mu^2 cancels catastrophically in fp32 for flat p
            var = (p * (lp - mu[:, None]).square()).sum(-1)
            z_parts.append((token_lp - mu) / var.clamp(min=1e-12).sqrt())
    logp = torch.cat(logp_parts).cpu().numpy().astype(np.float64)
    z = torch.cat(z_parts).cpu().numpy().astype(np.float64) if want_pp else None
    return logp, z


@torch.inference_mode()
def token_statistics(
    model: Any,
    docs: Sequence[Sequence[int]],
    *,
    batch_size: int = 8,
    device: torch.device | str | None = None,
    want_pp: bool = True,
    desc: str = "membership scores",
    progress: bool = True,
    logger: Any = None,
) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Per document: (log p of tokens 1..L-1 given their prefix, Min-K%++ z-scores or None), in input order.

    Documents are sorted by length before batching (less padding) and padded on the right with an attention mask, so
    each row's logits equal those of the document alone. ``logger`` (e.g. a ``goldfish.io.JsonlLogger``) receives
    one record per batch: ``{"event": "membership_batch", "pass", "docs", "tokens", "seconds"}``.
    """
    device = torch.device(device) if device is not None else _model_device(model)
    _check_docs(docs, _vocab_size(model))
    order = sorted(range(len(docs)), key=lambda i: -len(docs[i]))
    out: list[tuple[np.ndarray, np.ndarray | None]] = [None] * len(docs)  # type: ignore[list-item]
    was_training = model.training
    model.eval()
    try:
        show = None if progress else True  # tqdm: None = only on a terminal
        for b0 in tqdm(range(0, len(order), batch_size), desc=desc, disable=show, unit="batch"):
            t0 = time.perf_counter()
            idx = order[b0 : b0 + batch_size]
            lengths = [len(docs[i]) for i in idx]
            ids = torch.zeros(len(idx), max(lengths), dtype=torch.long)
            mask = torch.zeros_like(ids)
            for r, i in enumerate(idx):
                ids[r, : lengths[r]] = torch.as_tensor(list(docs[i]), dtype=torch.long)
                mask[r, : lengths[r]] = 1
            ids, mask = ids.to(device), mask.to(device)
            logits = model(input_ids=ids, attention_mask=mask).logits  # (B, T, V)
            for r, i in enumerate(idx):
                n = lengths[r]
                out[i] = _row_stats(logits[r, : n - 1], ids[r, 1:n], want_pp)
            if logger is not None:
                logger.log({"event": "membership_batch", "pass": desc, "docs": len(idx), "tokens": sum(lengths),
                            "seconds": round(time.perf_counter() - t0, 4)})
    finally:
        model.train(was_training)
    return out


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


def ratio_key(prefix: str, ratio: float) -> str:
    """Score name for a Min-K ratio, e.g. ``("min_k", 0.2) -> "min_k_20"``."""
    return f"{prefix}_{int(round(ratio * 100))}"


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


def _lowercase_docs(docs: Sequence[Sequence[int]], texts: list[str], tokenizer: Any) -> list[list[int]]:
    """Re-tokenize the lowercased text; a leading special token (BOS) of the original is kept."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    lowered = []
    for doc, text in zip(docs, texts):
        ids = list(tokenizer.encode(text.lower(), add_special_tokens=False))
        if doc and doc[0] in special:
            ids = [doc[0]] + ids
        lowered.append(ids)
    return lowered


def _mean_nll(stats: list[tuple[np.ndarray, np.ndarray | None]]) -> np.ndarray:
    return np.array([-s[0].mean() for s in stats], dtype=np.float64)


def _lowercase_nll(model, docs, texts, tokenizer, limit: int | None, **loop: Any) -> np.ndarray:
    """NLL of each lowercased text; NaN where lowercasing leaves fewer than 2 tokens (evaluate_attacks drops it)."""
    lowered = [d[:limit] if limit else d for d in _lowercase_docs(docs, texts, tokenizer)]
    ok = [i for i, d in enumerate(lowered) if len(d) >= 2]
    nll = np.full(len(docs), np.nan)
    stats = token_statistics(model, [lowered[i] for i in ok], want_pp=False, desc="lowercase", **loop)
    nll[ok] = _mean_nll(stats)
    return nll


def score_documents(
    model: Any,
    docs: list[list[int]],
    *,
    batch_size: int = 8,
    device: torch.device | str | None = None,
    reference_model: Any = None,
    min_k_ratios: Sequence[float] = (0.2,),
    tokenizer: Any = None,
    max_length: int | None = None,
    progress: bool = True,
    logger: Any = None,
) -> dict[str, np.ndarray]:
    """Membership scores of each token-id document, higher = more likely a training member.

    Keys: ``loss``, ``min_k_<k>``, ``min_k_pp_<k>`` (one per ratio), plus ``zlib`` and ``lowercase`` when a
    ``tokenizer`` (HF-style ``encode``/``decode``) is given and ``reference`` when a ``reference_model`` (same
    vocabulary) is given. Each value is a float64 array of shape (len(docs),). Documents longer than
    ``max_length`` (default: the model's context length) are scored on their first ``max_length`` tokens in every
    pass (zlib and lowercase use the decoded truncated text). ``progress`` toggles the tqdm bars
    (shown only on a terminal); ``logger`` gets one JSONL record per batch (see :func:`token_statistics`).
    """
    ratios = _check_ratios(min_k_ratios)
    if batch_size < 1:
        raise UserError(f"batch_size={batch_size} must be >= 1")
    if max_length is not None and max_length < 2:
        raise UserError(f"max_length={max_length} must be >= 2 tokens")
    if not docs:
        keys = ["loss"] + [ratio_key(p, r) for r in ratios for p in ("min_k", "min_k_pp")]
        keys += ["zlib", "lowercase"] * (tokenizer is not None) + ["reference"] * (reference_model is not None)
        return {k: np.zeros(0) for k in keys}
    limits = [context_length(m) for m in (model, reference_model) if m is not None]
    limit = max_length if max_length is not None else min((c for c in limits if c), default=None)
    docs = truncate_documents(docs, limit)
    loop = dict(batch_size=batch_size, progress=progress, logger=logger)
    stats = token_statistics(model, docs, device=device, want_pp=True, **loop)
    nll = _mean_nll(stats)
    scores: dict[str, np.ndarray] = {"loss": -nll}
    for r in ratios:
        scores[ratio_key("min_k", r)] = np.array([lowest_k_mean(lp, r) for lp, _ in stats])
        scores[ratio_key("min_k_pp", r)] = np.array([lowest_k_mean(z, r) for _, z in stats])
    if tokenizer is not None:
        texts = [tokenizer.decode(list(d), skip_special_tokens=True) for d in docs]
        scores["zlib"] = -nll / np.array([zlib_length(t) for t in texts], dtype=np.float64)
        scores["lowercase"] = -nll / _lowercase_nll(model, docs, texts, tokenizer, limit, device=device, **loop)
    if reference_model is not None:
        ref_device = device if device is not None else _model_device(reference_model)
        ref = token_statistics(reference_model, docs, device=ref_device, want_pp=False, desc="reference", **loop)
        scores["reference"] = _mean_nll(ref) - nll
    return scores


# ---------------------------------------------------------------------------------------------- ROC evaluation


def bootstrap_auc(members: np.ndarray, nonmembers: np.ndarray, n_bootstrap: int, seed: int) -> np.ndarray:
    """AUCs of ``n_bootstrap`` stratified resamples (members and nonmembers resampled separately, so both classes
    are always present), vectorised over resamples with :func:`rank_auc`."""
    rng = np.random.default_rng(seed)
    n_m, n_n = len(members), len(nonmembers)
    aucs = np.empty(n_bootstrap)
    chunk = max(1, 2_000_000 // (n_m + n_n))  # resamples per vectorised chunk (bounded memory)
    for b0 in range(0, n_bootstrap, chunk):
        b = min(chunk, n_bootstrap - b0)
        m = members[rng.integers(0, n_m, size=(b, n_m))]  # (b, n_m)
        n = nonmembers[rng.integers(0, n_n, size=(b, n_n))]  # (b, n_n)
        aucs[b0 : b0 + b] = rank_auc(m, n)
    return aucs


def rank_auc(members: np.ndarray, nonmembers: np.ndarray) -> np.ndarray:
    """Row-wise ROC-AUC of (b, n_m) member vs (b, n_n) nonmember scores via the Mann-Whitney U statistic
    (average ranks, so a tie counts 1/2 -- the same value as scikit-learn's ``roc_auc_score``)."""
    n_m, n_n = members.shape[1], nonmembers.shape[1]
    ranks = rankdata(np.concatenate([members, nonmembers], axis=1), axis=1)  # (b, n_m + n_n)
    return (ranks[:, :n_m].sum(1) - n_m * (n_m + 1) / 2) / (n_m * n_n)


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, target: float) -> float:
    """Largest TPR among ROC points with FPR <= ``target`` (conservative, no interpolation; as in Carlini et al.
    2022). With n nonmembers the FPR resolution is 1/n, so below that this is the TPR at zero false positives."""
    ok = fpr <= target + 1e-12
    return float(tpr[ok].max()) if ok.any() else 0.0


def downsample_roc(fpr: np.ndarray, tpr: np.ndarray, max_points: int = MAX_ROC_POINTS) -> tuple[list, list]:
    """At most ``max_points`` ROC points, evenly spaced along the curve's vertices, endpoints kept."""
    if len(fpr) > max_points:
        idx = np.unique(np.round(np.linspace(0, len(fpr) - 1, max_points)).astype(int))
        fpr, tpr = fpr[idx], tpr[idx]
    return [float(x) for x in fpr], [float(x) for x in tpr]


def _finite(name: str, values: Any, split: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    bad = ~np.isfinite(arr)
    if bad.any():
        log.warning("attack %s: dropping %d non-finite %s score(s)", name, int(bad.sum()), split)
    return arr[~bad]


def evaluate_attack(members: Any, nonmembers: Any, *, n_bootstrap: int = 1000, seed: int = 0, name: str = "") -> dict:
    """ROC-AUC (+ bootstrap 95 % CI), TPR at 1 % / 0.1 % FPR and a down-sampled ROC curve for one attack."""
    m, n = _finite(name, members, "member"), _finite(name, nonmembers, "nonmember")
    if len(m) == 0 or len(n) == 0:
        raise UserError(
            f"attack {name!r} has {len(m)} member and {len(n)} nonmember scores; an ROC needs both (add nonmembers)"
        )
    y = np.concatenate([np.ones(len(m)), np.zeros(len(n))])
    s = np.concatenate([m, n])
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    result: dict[str, Any] = {"auc": float(roc_auc_score(y, s)), "auc_ci_low": None, "auc_ci_high": None}
    if n_bootstrap > 0:
        low, high = np.percentile(bootstrap_auc(m, n, n_bootstrap, seed), [2.5, 97.5])
        result.update(auc_ci_low=float(low), auc_ci_high=float(high))
    for key, target in FPR_TARGETS.items():
        result[key] = tpr_at_fpr(fpr, tpr, target)
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
