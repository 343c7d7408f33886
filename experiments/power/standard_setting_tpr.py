"""Power of the TPR equivalence test of experiments/standard_setting.yaml, computed before its rerun (issue 54).

The question the rerun answers: is Goldfish's TPR at 1 % FPR (and 0.1 %) equivalent to standard's, within the margin
the config states (+-0.10), by two one-sided t tests over the training runs? With 5 runs and 500 nonmembers the 5-run
study (the first design, since replaced in experiments/results/standard_setting/ by the rerun) could not say: its
paired TPR difference spread by 7.4 points between runs. This script finds the design (runs x nonmembers) whose power
at a true difference of 0 is >= 0.8.

The model (binormal, the membership literature's usual ROC model): per run and arm, member scores N(d, 1) and
nonmember scores N(0, 1), d = sqrt(2) Phi^-1(AUC) with the arms' AUC equal (a true difference of 0). The two arms
score the same documents, so each score is sqrt(rho) x the document's own part, shared by both arms, plus sqrt(1 -
rho) x the arm's own part; TPR at an FPR is read from the empirical ROC as goldfish.eval.stats.tpr_at_fpr reads it
(the largest TPR at FPR <= the target). ``rho`` is calibrated so that the simulated between-run SD of the paired
difference at the first design (144 members, 500 nonmembers) is that study's (its headline attack's, per seed, in
standard_setting_first_design.json beside this script: the input frozen from its results.json, which the rerun has
replaced), then every design is simulated with it. What the model leaves out (the arms' tails differing in shape, a
run's model shift) is folded into rho; the choice is made with that calibrated spread, not a hoped-for one.

    python experiments/power/standard_setting_tpr.py          # writes standard_setting_tpr.json beside it
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

HERE = Path(__file__).resolve().parent
FIRST_DESIGN = HERE / "standard_setting_first_design.json"
MARGIN = 0.10  # equivalence.tpr_margin of experiments/standard_setting.yaml, stated before the 5-seed run
MEMBERS = 144
RUNS = (5, 8, 10, 15)
NONMEMBERS = (500, 1000, 2000)
SIMULATIONS = 2000
KJV_NONMEMBERS = 1000  # the King James Bible's 1,189 chapters less the 144 targets, rounded down
SEED = 0


def committed() -> tuple[float, float]:
    """The first design's AUC (mean over the arms' runs, the headline attack) and the between-run SD of the paired
    TPR-at-1 %-FPR difference (Goldfish - standard)."""
    runs = json.loads(FIRST_DESIGN.read_text(encoding="utf-8"))["runs"]
    diffs = [r["goldfish_k4"]["mia_tpr_at_1pct_fpr"] - r["standard"]["mia_tpr_at_1pct_fpr"] for r in runs]
    aucs = [r[arm]["mia_auc"] for r in runs for arm in ("goldfish_k4", "standard")]
    return float(np.mean(aucs)), float(np.std(diffs, ddof=1))


def tpr_at(members: np.ndarray, nonmembers: np.ndarray, fpr: float) -> np.ndarray:
    """TPR at ``fpr`` per row (runs x scores), the empirical ROC read as tpr_at_fpr does."""
    allowed = math.floor(fpr * nonmembers.shape[1] + 1e-9)
    threshold = -np.sort(-nonmembers, axis=1)[:, allowed]
    return (members > threshold[:, None]).mean(axis=1)


def paired_differences(
    rng: np.random.Generator, d: float, rho: float, runs: int, nonmembers: int, fpr: float, sims: int
) -> np.ndarray:
    """(sims, runs) paired TPR differences of two arms with the same true d on the same documents."""
    out = np.empty((sims, runs))
    shared, own = math.sqrt(rho), math.sqrt(1 - rho)
    for i in range(sims):
        doc_m, doc_n = rng.standard_normal((runs, MEMBERS)), rng.standard_normal((runs, nonmembers))
        tprs = []
        for _ in range(2):  # the two arms: each run its own model, the same documents
            m = d + shared * doc_m + own * rng.standard_normal((runs, MEMBERS))
            n = shared * doc_n + own * rng.standard_normal((runs, nonmembers))
            tprs.append(tpr_at(m, n, fpr))
        out[i] = tprs[0] - tprs[1]
    return out


def tost_power(diffs: np.ndarray, margin: float) -> float:
    """The share of simulated studies whose 90 % t interval over runs lies inside +-margin."""
    n = diffs.shape[1]
    half = student_t.ppf(0.95, n - 1) * diffs.std(axis=1, ddof=1) / math.sqrt(n)
    mean = diffs.mean(axis=1)
    return float(np.mean((mean - half > -margin) & (mean + half < margin)))


def calibrate(rng: np.random.Generator, d: float, target_sd: float) -> float:
    """The shared share rho whose simulated between-run SD of the paired difference (5 runs, 500 nonmembers) is
    ``target_sd`` (bisection; the SD falls as rho rises)."""
    low, high = 0.0, 0.99
    for _ in range(14):
        mid = (low + high) / 2
        sim = paired_differences(rng, d, mid, 5, 500, 0.01, 300).std(axis=1, ddof=1).mean()
        low, high = (mid, high) if sim > target_sd else (low, mid)
    return (low + high) / 2


def main() -> dict:
    rng = np.random.default_rng(SEED)
    auc, sd_diff = committed()
    d = math.sqrt(2) * norm.ppf(auc)
    rho = calibrate(rng, d, sd_diff)
    rows = []
    for fpr in (0.01, 0.001):
        for n_non in NONMEMBERS:
            if n_non * fpr < 1:
                continue
            for runs in RUNS:
                diffs = paired_differences(rng, d, rho, runs, n_non, fpr, SIMULATIONS)
                rows.append(
                    {
                        "fpr": fpr,
                        "nonmembers": n_non,
                        "runs": runs,
                        "between_run_sd": float(diffs.std(axis=1, ddof=1).mean()),
                        "power": tost_power(diffs, MARGIN),
                    }
                )
    # the fewest runs (training is most of a cell's cost) with >= 0.8 power at 1 % and at 0.1 % FPR, among the
    # designs the KJV pool can hold (1,189 chapters: 144 targets and at most ~1,000 nonmember openings)
    power = {(r["fpr"], r["nonmembers"], r["runs"]): r["power"] for r in rows}
    feasible = [
        (n, runs)
        for n in NONMEMBERS
        for runs in RUNS
        if n <= KJV_NONMEMBERS and power.get((0.01, n, runs), 0) >= 0.8 and power.get((0.001, n, runs), 0) >= 0.8
    ]
    best = min(feasible, key=lambda x: (x[1], x[0]), default=None)
    chosen = (
        None
        if best is None
        else {
            "nonmembers": best[0],
            "runs": best[1],
            "power_1pct": power[(0.01, *best)],
            "power_0_1pct": power[(0.001, *best)],
        }
    )
    out = {
        "question": "TOST of Goldfish - standard TPR at 1 % FPR within +-0.10 over runs, at a true difference of 0",
        "committed_auc": auc,
        "committed_between_run_sd": sd_diff,
        "d": d,
        "rho": rho,
        "members": MEMBERS,
        "margin": MARGIN,
        "simulations": SIMULATIONS,
        "seed": SEED,
        "rows": rows,
        "chosen": chosen,
    }
    (HERE / "standard_setting_tpr.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return out


if __name__ == "__main__":
    found = main()
    for r in found["rows"]:
        print(
            f"FPR {r['fpr']:g}  nonmembers {r['nonmembers']:5d}  runs {r['runs']:2d}  "
            f"SD {100 * r['between_run_sd']:.1f} pts  power {r['power']:.2f}"
        )
    print("chosen:", found["chosen"])
