"""Run-level statistics: inference with the training run (seed: its own split, order and model) as the unit.

* :func:`pooled_paired_auc_difference` -- two arms' AUCs on the same documents in several independent groups (seeds,
  each its own split): the mean per-group difference, resampled within groups, with the 90 % interval of a TOST
  equivalence test against a margin stated in advance.
* :func:`replicate_tost` -- the training run as the unit: one difference per independent run (seed), its mean with
  a t interval over runs (the between-run spread ``sd`` beside it) and the two one-sided t tests of equivalence
  against a margin stated in advance; the within-run intervals above treat each trained model as fixed.
* :func:`t_over_runs` -- the mean of one value per independent replicate with its Student t interval, the between-run
  SD beside it.
* :func:`slope_over_runs` -- a dose-response line with the run as the unit: each run's least-squares slope of a
  response on a dose (e.g. a leakage audit's DiD on the supervised fraction of its positive controls), their mean
  with a t interval over runs and the between-run SD.
* :func:`run_logits` -- stage 1 of the size effect: per seed, ONE Firth-penalised logistic regression of exact match
  on log2 exposures read (a slope shared by the seed's runs) and one intercept per model size (size as a factor): the
  run's logit of exact match at one exposure, with its within-run (Wald) standard error. Vectorised over seeds.
* :func:`size_slope_over_runs` -- stage 2 on a (seed x size) table of run logits: each seed's least-squares slope over
  log10 parameters, their mean with a t interval over seeds (the two-stage estimator: it holds whatever each seed's
  runs share, a seed-specific slope included), the same slope read with the runs as units (seed as a fixed effect,
  the (seed x size) residual as the between-run error: it assumes one slope for every seed), and the log-linearity
  test -- size as a factor vs log-linear in log10 params, an F test against the between-run error (the run-level
  counterpart of a likelihood-ratio test, which against the within-run binomial error alone rejects whenever runs
  differ at all).
* :func:`size_effect_over_runs` -- both stages from per-window exact match, exposures, parameters and seeds, with
  the window-level likelihood-ratio test of log-linearity beside the run-level F test (:func:`loglinearity_lr`: it
  treats each run as fixed, so it is within-run detail).

A run that extracts nothing (or everything) has no maximum-likelihood logit; its Firth logit is finite but pulled
toward the middle, so a size on the floor flattens the slope (toward 0): the per-run table shows such runs (0/n), and
the log-linearity test flags a floor that bends the line.

Under a per-run logit shift (each trained model a little luckier or unluckier than its size predicts), a window-level
interval of the size coefficient is too narrow: 0.65 coverage (0.90 without the shift) at a shift of SD 1 on the size
sweep's design (issue 38). The two-stage interval does not depend on that SD: it reads the slope's spread across
seeds (tests/test_eval_stats_runs.py simulates the design).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy.stats import chi2, f as f_dist, t as student_t

from .auc import paired_auc_difference, rank_auc
from .bootstrap import bootstrap_p
from .fits import logistic_batch
from .intervals import percentiles


def pooled_paired_auc_difference(
    groups: Sequence[tuple[Any, Any, Any, Any]], n_bootstrap: int = 1000, seed: int = 0, margin: float | None = None
) -> dict[str, Any]:
    """AUC_a - AUC_b over independent groups (seeds: each its own members, nonmembers and models), each group
    ``(a_members, a_nonmembers, b_members, b_nonmembers)`` scored on the same documents by both arms.

    The estimate is the mean of the groups' differences (each group one replicate, equal weight); the bootstrap
    resamples members and nonmembers within each group with the same draws for both arms (as
    :func:`paired_auc_difference`). Returns ``diff``, the 95 % ``ci_low`` / ``ci_high`` and two-sided ``p_value``,
    the 90 % ``ci90_low`` / ``ci90_high``, ``groups`` (each group's :func:`paired_auc_difference`) and, with a
    ``margin`` stated before the run, the two one-sided tests of equivalence (TOST, Schuirmann 1987): ``equivalent``
    when the 90 % interval lies inside (-margin, +margin), ``tost_p`` = the larger bootstrap tail beyond a margin."""
    per_group, samples = [], []
    for g, (am, an, bm, bn) in enumerate(groups):
        per_group.append(paired_auc_difference(am, an, bm, bn, 0))
        am_, an_ = np.asarray(am, np.float64), np.asarray(an, np.float64)
        bm_, bn_ = np.asarray(bm, np.float64), np.asarray(bn, np.float64)
        ok_m, ok_n = np.isfinite(am_) & np.isfinite(bm_), np.isfinite(an_) & np.isfinite(bn_)
        am_, bm_, an_, bn_ = am_[ok_m], bm_[ok_m], an_[ok_n], bn_[ok_n]
        if n_bootstrap > 0 and len(am_) and len(an_):
            rng = np.random.default_rng([seed, g])
            im = rng.integers(0, len(am_), size=(n_bootstrap, len(am_)))  # (B, m)
            inn = rng.integers(0, len(an_), size=(n_bootstrap, len(an_)))  # (B, n)
            samples.append(rank_auc(am_[im], an_[inn]) - rank_auc(bm_[im], bn_[inn]))
    diffs = [g["diff"] for g in per_group if g["diff"] is not None]
    out: dict[str, Any] = {
        "diff": float(np.mean(diffs)) if diffs else None,
        "ci_low": None,
        "ci_high": None,
        "p_value": None,
        "ci90_low": None,
        "ci90_high": None,
        "margin": margin,
        "equivalent": None,
        "tost_p": None,
        "n_groups": len(diffs),
        "groups": per_group,
    }
    if samples and len(samples) == len(diffs):
        pooled = np.mean(np.stack(samples), axis=0)  # (B,)
        out["ci_low"], out["ci_high"] = percentiles(pooled)
        out["ci90_low"], out["ci90_high"] = (float(v) for v in np.percentile(pooled, (5.0, 95.0)))
        out["p_value"] = bootstrap_p(pooled)
        if margin is not None:
            out["equivalent"] = bool(-margin < out["ci90_low"] and out["ci90_high"] < margin)
            out["tost_p"] = float(max(np.mean(pooled <= -margin), np.mean(pooled >= margin)))
    return out


def replicate_tost(values: Sequence[float | None], margin: float | None = None) -> dict[str, Any]:
    """Inference with the training run as the unit: ``values`` are one difference per independent replicate (seed:
    its own split, order and model), e.g. each seed's paired AUC difference. Returns ``n``, ``mean``, ``sd`` (the
    between-run spread), ``se``, the 95 % t interval ``ci_low`` / ``ci_high`` and two-sided ``p_value`` (mean = 0),
    the 90 % t interval ``ci90_low`` / ``ci90_high`` and, with a ``margin`` stated before the run, the two one-sided
    t tests of equivalence (Schuirmann 1987): ``tost_p`` (the larger one-sided p) and ``equivalent`` (``tost_p`` <
    0.05, i.e. the 90 % interval inside (-margin, +margin)). Fewer than two finite values: no interval (``None``):
    one run cannot say how much runs differ. The within-run bootstrap of :func:`pooled_paired_auc_difference` treats
    each model as fixed; this one does not."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    out: dict[str, Any] = {
        "n": int(len(x)),
        "mean": float(x.mean()) if len(x) else None,
        "sd": None,
        "se": None,
        "ci_low": None,
        "ci_high": None,
        "p_value": None,
        "ci90_low": None,
        "ci90_high": None,
        "margin": margin,
        "tost_p": None,
        "equivalent": None,
    }
    if len(x) < 2:
        return out
    df = len(x) - 1
    sd = float(x.std(ddof=1))
    se = sd / math.sqrt(len(x))
    mean = float(x.mean())
    out.update(sd=sd, se=se)
    for level, low, high in ((0.975, "ci_low", "ci_high"), (0.95, "ci90_low", "ci90_high")):
        half = float(student_t.ppf(level, df)) * se
        out[low], out[high] = mean - half, mean + half
    if se == 0:  # every run agrees exactly: the mean is known without error
        out["p_value"] = 1.0 if mean == 0 else 0.0
        if margin:
            out["tost_p"] = 0.0 if -margin < mean < margin else 1.0
            out["equivalent"] = out["tost_p"] < 0.05
        return out
    out["p_value"] = float(2 * student_t.sf(abs(mean) / se, df))
    if margin:
        lower = float(student_t.sf((mean + margin) / se, df))  # H0: mean <= -margin
        upper = float(student_t.cdf((mean - margin) / se, df))  # H0: mean >= +margin
        out["tost_p"] = max(lower, upper)
        out["equivalent"] = out["tost_p"] < 0.05
    return out


def t_over_runs(values: Sequence[float | None], level: float = 0.95) -> dict[str, Any]:
    """Mean of one value per independent run (seed) with its two-sided ``level`` Student t interval over runs:
    ``n``, ``mean``, ``sd`` (the between-run spread), ``se``, ``df``, ``ci_low``, ``ci_high``, ``p_value`` (mean =
    0). Non-finite values are left out; fewer than two values: no spread and no interval (``None``)."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    out: dict[str, Any] = {
        "n": int(len(x)),
        "mean": float(x.mean()) if len(x) else None,
        "sd": None,
        "se": None,
        "df": None,
        "ci_low": None,
        "ci_high": None,
        "p_value": None,
        "level": level,
    }
    if len(x) < 2:
        return out
    df = len(x) - 1
    sd = float(x.std(ddof=1))
    se = sd / math.sqrt(len(x))
    half = float(student_t.ppf(0.5 + level / 2, df)) * se
    mean = float(x.mean())
    p = (1.0 if mean == 0 else 0.0) if se == 0 else float(2 * student_t.sf(abs(mean) / se, df))
    out.update(sd=sd, se=se, df=df, ci_low=mean - half, ci_high=mean + half, p_value=p)
    return out


def slope_over_runs(
    x_by_run: Sequence[Sequence[float]], y_by_run: Sequence[Sequence[float | None]], level: float = 0.95
) -> dict[str, Any]:
    """A dose-response line with the run as the unit: each run's least-squares slope of ``y`` on ``x`` (its points,
    non-finite y left out; None with fewer than two distinct x), then :func:`t_over_runs` of the slopes (``mean``,
    the t interval over runs, ``sd``: the between-run SD of the slope), with ``per_run`` (the slopes, in order)
    and ``intercept`` (the mean over runs of each run's intercept, None without a slope)."""
    slopes, intercepts = [], []
    for xs, ys in zip(x_by_run, y_by_run):
        pts = [(float(a), float(b)) for a, b in zip(xs, ys) if b is not None and math.isfinite(b)]
        x = np.asarray([a for a, _ in pts], dtype=np.float64)
        y = np.asarray([b for _, b in pts], dtype=np.float64)
        if len(np.unique(x)) < 2:
            slopes.append(None)
            continue
        xc = x - x.mean()
        slope = float((xc * (y - y.mean())).sum() / (xc**2).sum())
        slopes.append(slope)
        intercepts.append(float(y.mean() - slope * x.mean()))
    out = t_over_runs(slopes, level)
    out.update(per_run=slopes, intercept=float(np.mean(intercepts)) if intercepts else None)
    return out


def run_logits(
    successes: np.ndarray,
    trials: np.ndarray,
    size_index: Sequence[int],
    log2_reads: Sequence[float],
    n_sizes: int,
    firth: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stage 1, vectorised over B seeds that share one design of G groups (a group: one size and one exposure count).

    ``successes`` (B, G) exact-match counts, ``trials`` (G,) or (B, G) windows per group (0 = the seed lacks the
    group), ``size_index`` (G,) in ``range(n_sizes)``, ``log2_reads`` (G,). Fits ``logit P = alpha[size] + b log2
    reads`` per seed (Firth-penalised by default: finite where a run extracts nothing or everything). Returns
    ``alpha`` (B, n_sizes) -- each run's logit at one exposure; NaN for a size the seed lacks --, its within-run Wald
    standard error ``se`` (B, n_sizes), and ``b`` (B,)."""
    k = np.atleast_2d(np.asarray(successes, dtype=np.float64))
    n = np.broadcast_to(np.asarray(trials, dtype=np.float64), k.shape)
    size_index = np.asarray(size_index, dtype=np.int64)
    design = np.zeros((len(size_index), n_sizes + 1))
    design[np.arange(len(size_index)), size_index] = 1.0
    design[:, n_sizes] = np.asarray(log2_reads, dtype=np.float64)
    beta = logistic_batch(design, k, n, firth)  # (B, n_sizes + 1)
    p = 1.0 / (1.0 + np.exp(-(beta @ design.T)))
    info = np.einsum("si,bs,sj->bij", design, n * p * (1.0 - p), design)
    cov = np.linalg.pinv(info)
    se = np.sqrt(np.clip(np.einsum("bii->bi", cov), 0.0, None))
    present = np.einsum("bs,si->bi", n, design[:, :n_sizes]) > 0  # (B, n_sizes): the seed has windows at the size
    alpha = np.where(present, beta[:, :n_sizes], np.nan)
    return alpha, np.where(present, se[:, :n_sizes], np.nan), beta[:, n_sizes]


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, int, np.ndarray]:
    """Least squares: (coefficients, residual sum of squares, residual df, (X'X)^-1)."""
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    rss = float(((y - x @ coef) ** 2).sum())
    rank = int(np.linalg.matrix_rank(x))
    return coef, rss, len(y) - rank, np.linalg.pinv(x.T @ x)


def size_slope_over_runs(logits: Any, log10_params: Sequence[float], level: float = 0.95) -> dict[str, Any]:
    """Stage 2: the size effect from a (seeds x sizes) table of run logits (NaN: the run is missing).

    Returns ``per_seed`` (each seed's least-squares slope of its runs' logits on log10 params: ``{slope, sizes}``,
    slope None with fewer than two sizes), ``two_stage`` (:func:`t_over_runs` of the per-seed slopes: the reading;
    ``sd`` is the between-seed SD of the slope), ``run_level`` (the runs as units: logit ~ seed + log10 params,
    ``{slope, se, df, ci_low, ci_high, p_value}``, with ``between_run_sd``: the residual SD of the additive
    seed + size-as-factor model, i.e. how far a run's logit sits from its seed's and its size's -- a run's own shift
    plus its within-run estimation error), and ``linearity`` (size as a factor vs log-linear, both with seed effects:
    ``{F, df1, df2, p_value}``, None with fewer than three sizes or no residual df). Per unit of log10 params, i.e.
    per 10x parameters."""
    y = np.atleast_2d(np.asarray(logits, dtype=np.float64))
    xs = np.asarray(log10_params, dtype=np.float64)
    n_seeds, n_sizes = y.shape
    per_seed = []
    for row in y:
        ok = np.isfinite(row)
        slope = None
        if ok.sum() >= 2 and np.ptp(xs[ok]) > 0:
            xc = xs[ok] - xs[ok].mean()
            slope = float((xc * (row[ok] - row[ok].mean())).sum() / (xc**2).sum())
        per_seed.append({"slope": slope, "sizes": int(ok.sum())})
    two_stage = t_over_runs([s["slope"] for s in per_seed], level)
    seed_i, size_j = np.nonzero(np.isfinite(y))
    obs = y[seed_i, size_j]
    seeds_in = np.unique(seed_i)
    seed_dummies = (seed_i[:, None] == seeds_in[None, :]).astype(np.float64)
    out: dict[str, Any] = {
        "n_seeds": int(len(seeds_in)),
        "n_runs": int(len(obs)),
        "per_seed": per_seed,
        "two_stage": two_stage,
        "run_level": None,
        "linearity": None,
        "level": level,
    }
    linear = np.column_stack([seed_dummies, xs[size_j]])
    coef, rss_lin, df_lin, inv = _ols(linear, obs)
    sizes_in = np.unique(size_j)
    factor = np.column_stack([seed_dummies, (size_j[:, None] == sizes_in[None, 1:]).astype(np.float64)])
    _, rss_fac, df_fac, _ = _ols(factor, obs)
    if df_lin > 0 and len(sizes_in) >= 2:
        se = math.sqrt(rss_lin / df_lin * inv[-1, -1])
        half = float(student_t.ppf(0.5 + level / 2, df_lin)) * se
        slope = float(coef[-1])
        p = (1.0 if slope == 0 else 0.0) if se == 0 else float(2 * student_t.sf(abs(slope) / se, df_lin))
        out["run_level"] = {
            "slope": slope,
            "se": se,
            "df": int(df_lin),
            "ci_low": slope - half,
            "ci_high": slope + half,
            "p_value": p,
            "between_run_sd": math.sqrt(rss_fac / df_fac) if df_fac > 0 else None,
        }
    df1 = df_lin - df_fac
    if len(sizes_in) >= 3 and df_fac > 0 and df1 > 0:
        f_stat = ((rss_lin - rss_fac) / df1) / (rss_fac / df_fac) if rss_fac > 0 else math.inf
        out["linearity"] = {
            "F": float(f_stat),
            "df1": int(df1),
            "df2": int(df_fac),
            "p_value": float(f_dist.sf(f_stat, df1, df_fac)),
        }
    return out


def _binomial_loglik(beta: np.ndarray, design: np.ndarray, k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """(B,) log-likelihoods of (B, P) coefficients on grouped counts (the binomial coefficients left out)."""
    eta = beta @ design.T
    return (k * -np.logaddexp(0.0, -eta) + (n - k) * -np.logaddexp(0.0, eta)).sum(axis=1)


def loglinearity_lr(
    successes: Any, trials: Any, size_index: Sequence[int], log2_reads: Sequence[float], log10_params: Sequence[float]
) -> dict[str, Any]:
    """The window-level likelihood-ratio test of log-linearity in size, per seed and summed: maximum likelihood with
    size as a factor (one intercept per size) against ``a + c log10 params``, both with the seed's exposure slope.
    ``successes`` / ``trials`` (B seeds, G groups), ``size_index`` (G,) into ``log10_params``, ``log2_reads`` (G,).
    Returns ``{LR, df, p_value}`` (df: the seeds' sizes minus two, summed; None without a seed of three sizes). Its
    error is the binomial one inside each run: a per-run shift alone rejects it, so it is within-run detail beside
    the run-level F test of :func:`size_slope_over_runs`."""
    k = np.atleast_2d(np.asarray(successes, dtype=np.float64))
    n = np.broadcast_to(np.asarray(trials, dtype=np.float64), k.shape)
    size_index = np.asarray(size_index, dtype=np.int64)
    xs = np.asarray(log10_params, dtype=np.float64)
    reads = np.asarray(log2_reads, dtype=np.float64)
    n_sizes = len(xs)
    factor = np.zeros((len(size_index), n_sizes + 1))
    factor[np.arange(len(size_index)), size_index] = 1.0
    factor[:, n_sizes] = reads
    linear = np.column_stack([np.ones(len(size_index)), xs[size_index], reads])
    present = np.einsum("bs,si->bi", n, factor[:, :n_sizes]) > 0
    df = int(np.clip(present.sum(axis=1) - 2, 0, None).sum())
    if df == 0:
        return {"LR": None, "df": 0, "p_value": None}
    ll_factor = _binomial_loglik(logistic_batch(factor, k, n, firth=False), factor, k, n)
    ll_linear = _binomial_loglik(logistic_batch(linear, k, n, firth=False), linear, k, n)
    lr = float(max(0.0, 2.0 * (ll_factor - ll_linear).sum()))
    return {"LR": lr, "df": df, "p_value": float(chi2.sf(lr, df))}


def size_effect_over_runs(
    exact: Sequence[Any],
    log2_reads: Sequence[float],
    log10_params: Sequence[float],
    seeds: Sequence[Any],
    firth: bool = True,
    level: float = 0.95,
) -> dict[str, Any]:
    """The size effect with the training run as the unit, from per-window exact match (0/1), log2 exposures read,
    log10 parameters of the window's model and its seed (a run = one seed at one size). Stage 1
    (:func:`run_logits`) per seed, stage 2 (:func:`size_slope_over_runs`) across runs and seeds. Returns stage 2's
    dict plus ``seeds``, ``sizes`` (log10 params, ascending), ``runs`` (``[{seed, log10_params, logit, se, windows,
    exact}]``: the per-run table), ``exposure_slope`` per seed and ``linearity_within_runs`` (:func:`loglinearity_lr`),
    or ``{why_not}`` with fewer than two sizes."""
    y = np.asarray(exact, dtype=np.float64).reshape(-1)
    reads = np.asarray(log2_reads, dtype=np.float64).reshape(-1)
    params = np.asarray(log10_params, dtype=np.float64).reshape(-1)
    seeds = [str(s) for s in seeds]
    if not (len(y) == len(reads) == len(params) == len(seeds)):
        raise ValueError(f"{len(y)} outcomes, {len(reads)} exposures, {len(params)} sizes and {len(seeds)} seeds")
    sizes = sorted(set(params.tolist()))
    seed_names = list(dict.fromkeys(seeds))
    if len(sizes) < 2:
        return {"why_not": f"{len(sizes)} size(s)", "seeds": seed_names, "sizes": sizes}
    groups = sorted(set(zip(params.tolist(), reads.tolist())))
    gindex = {g: i for i, g in enumerate(groups)}
    k = np.zeros((len(seed_names), len(groups)))
    n = np.zeros_like(k)
    sindex = {s: i for i, s in enumerate(seed_names)}
    for yi, g, s in zip(y, zip(params.tolist(), reads.tolist()), seeds):
        k[sindex[s], gindex[g]] += yi
        n[sindex[s], gindex[g]] += 1
    size_of = [sizes.index(g[0]) for g in groups]
    alpha, se, b = run_logits(k, n, size_of, [g[1] for g in groups], len(sizes), firth)
    out = size_slope_over_runs(alpha, sizes, level)
    out["linearity_within_runs"] = loglinearity_lr(k, n, size_of, [g[1] for g in groups], sizes)
    runs = []
    for i, s in enumerate(seed_names):
        for j, x in enumerate(sizes):
            here = [gi for gi, g in enumerate(groups) if g[0] == x]
            if n[i, here].sum() > 0:
                runs.append(
                    {
                        "seed": s,
                        "log10_params": x,
                        "logit": float(alpha[i, j]),
                        "se": float(se[i, j]),
                        "windows": int(n[i, here].sum()),
                        "exact": int(k[i, here].sum()),
                    }
                )
    for entry, s in zip(out["per_seed"], seed_names):
        entry["seed"] = s
    out.update(
        seeds=seed_names,
        sizes=sizes,
        runs=runs,
        exposure_slope=dict(zip(seed_names, b.tolist())),
        method=(
            "stage 1: per seed, "
            + ("Firth-penalised" if firth else "maximum-likelihood")
            + " logistic regression of exact match on log2 exposures read with one intercept per size "
            "(each run's logit); stage 2: each seed's least-squares slope of its runs' logits on log10 "
            "params, t interval over seeds"
        ),
    )
    return out
