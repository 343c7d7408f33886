"""Membership inference compared between arms with a margin stated before the run (the experiment's
``equivalence``): per pair of trained arms (each later one against each earlier one: Goldfish vs standard), the
headline attack's AUC on the same member and nonmember documents, per repetition stratum (members with r copies vs
every nonmember) and over all members, each replicate (the ``equivalence.pool`` axes, e.g. seeds: their own split,
order and models) paired, the replicates' differences averaged
(:func:`goldfish.eval.stats.pooled_paired_auc_difference`: a 95 % interval and p-value, and the 90 % interval of the two
one-sided tests against the margin), and TPR at 1 % FPR of each arm.

The reading is made at the level of training runs: with two or more replicates, each replicate's paired difference
is one observation and the equivalence decision is the two one-sided t tests over them
(:func:`goldfish.eval.stats.replicate_tost`; the between-run SD beside it), for the AUC and, with
``equivalence.tpr_margin``, for TPR at 1 % FPR. The pooled bootstrap above resamples documents within each run,
treating every trained model as fixed: it is within-run detail. A stratum where both arms reach AUC >=
:data:`CEILING` in every replicate is reported as uninformative (at the ceiling), not as equivalent."""

from __future__ import annotations

from typing import Any

import numpy as np

from goldfish.eval.stats import pooled_paired_auc_difference, replicate_tost, tpr_at_fpr
from goldfish.eval.tables import fmt, markdown_section, markdown_table, p_text

from ...data import load_prepared
from ...io import read_json
from ..grid import CONTROL
from ..inference import FPR, arm_pairs
from ..summary import Study

N_BOOTSTRAP = 1000
CEILING = 0.99  # both arms at or above this AUC in every replicate: no room left to differ


def _scores(attacks: dict, attack: str) -> dict[str, dict[Any, float]]:
    """``{"members" | "nonmembers": {document id: score}}`` of one attack in a cell's attacks.json."""
    scores, ids = (attacks.get("scores") or {}).get(attack) or {}, attacks.get("doc_ids") or {}
    return {
        s: {i: (np.nan if v is None else float(v)) for i, v in zip(ids.get(s) or [], scores.get(s) or [])}
        for s in ("members", "nonmembers")
    }


def _group(plan_a: Any, plan_b: Any, attack: str) -> dict[str, tuple] | None:
    """One replicate: ``{stratum | "all": (a members, a nonmembers, b members, b nonmembers)}`` on the documents
    both cells scored (members of the stratum vs every nonmember); None without both cells' scores."""
    found = [_scores(read_json(p.attacks_file), attack) if p.attacks_file.is_file() else {} for p in (plan_a, plan_b)]
    if not all(f.get("members") and f.get("nonmembers") for f in found):
        return None
    (sa, sb) = found
    members = [i for i in sa["members"] if i in sb["members"]]
    nonmembers = [i for i in sa["nonmembers"] if i in sb["nonmembers"]]
    prepared = load_prepared(plan_a.data_dir, verify=False)
    reps = dict(zip(prepared.members["id"], (int(r) for r in prepared.members["repetitions"])))
    an, bn = [sa["nonmembers"][i] for i in nonmembers], [sb["nonmembers"][i] for i in nonmembers]
    out = {}
    for stratum in ["all"] + sorted({reps[i] for i in members if i in reps}):
        chosen = [i for i in members if stratum == "all" or reps.get(i) == stratum]
        out[str(stratum)] = ([sa["members"][i] for i in chosen], an, [sb["members"][i] for i in chosen], bn)
    return out


def compute(study: Study) -> dict:
    """``membership_comparison``: one entry per pair of trained arms and values of the axes not pooled (SCHEMA.md);
    empty without ``equivalence.margin``."""
    cfg = study.cfg
    if not cfg.equivalence.margin:
        return {"membership_comparison": []}
    pool, axes = cfg.equivalence.pool, study.axes
    kept = [a for a in axes if a not in pool]
    points: dict[tuple, dict[tuple, dict[str, tuple]]] = {}
    for plan, cell in zip(study.done, study.cells):
        key = tuple(str(cell.values.get(a)) for a in kept)
        replicate = tuple(str(cell.values.get(a)) for a in pool)
        points.setdefault(key, {}).setdefault(replicate, {})[cell.arm] = (plan, cell)
    out = []
    for key, replicates in points.items():
        arms = list(dict.fromkeys(arm for r in replicates.values() for arm in r if arm != CONTROL))
        for a, b in arm_pairs(arms):
            groups, labels, attack = [], [], None
            for replicate, cells in replicates.items():
                if a in cells and b in cells:
                    attack = attack or cells[a][1].mia_attack
                    found = _group(cells[a][0], cells[b][0], str(attack))
                    if found is not None:
                        groups.append(found)
                        labels.append(dict(zip(pool, replicate)))
            if not groups:
                continue
            strata = {}
            for stratum in groups[0]:
                sets = [g[stratum] for g in groups if stratum in g]
                found = pooled_paired_auc_difference(sets, N_BOOTSTRAP, 0, cfg.equivalence.margin)
                found["tpr_a"] = [tpr_at_fpr(s[0], s[1], FPR)["tpr"] for s in sets]
                found["tpr_b"] = [tpr_at_fpr(s[2], s[3], FPR)["tpr"] for s in sets]
                found["n_members"] = [len(s[0]) for s in sets]
                found["n_nonmembers"] = [len(s[1]) for s in sets]
                found.update(_run_level(found, cfg.equivalence.margin, cfg.equivalence.tpr_margin))
                strata[stratum] = found
            out.append(
                {
                    "a": a,
                    "b": b,
                    "attack": attack,
                    **dict(zip(kept, key)),
                    "margin": cfg.equivalence.margin,
                    "tpr_margin": cfg.equivalence.tpr_margin,
                    "replicates": labels,
                    "strata": strata,
                }
            )
    return {"membership_comparison": out}


def _run_level(found: dict, margin: float, tpr_margin: float) -> dict:
    """The replicate-level reading of one stratum: ``runs`` (the AUC difference over runs, replicate_tost),
    ``tpr_runs`` (the TPR at 1 % FPR difference; only with ``tpr_margin`` and a TPR in every run), ``ceiling`` and
    ``verdict``: equivalent | not shown | uninformative (ceiling) | one run (no between-run reading)."""
    groups = found["groups"]
    runs = replicate_tost([g["diff"] for g in groups], margin)
    pairs = list(zip(found["tpr_a"], found["tpr_b"]))
    tpr_runs = (
        replicate_tost([a - b for a, b in pairs], tpr_margin)
        if tpr_margin and pairs and all(a is not None and b is not None for a, b in pairs)
        else None
    )
    ceiling = bool(groups) and all(
        g["a"] is not None and g["b"] is not None and min(g["a"], g["b"]) >= CEILING for g in groups
    )
    if ceiling:
        verdict = "uninformative (ceiling)"
    elif runs["equivalent"] is None:
        verdict = "one run"
    else:
        shown = (
            runs["equivalent"]
            and (tpr_runs is None or tpr_runs["equivalent"] is True)
            and not (tpr_margin and tpr_runs is None)
        )
        verdict = "equivalent" if shown else "not shown"
    return {"runs": runs, "tpr_runs": tpr_runs, "ceiling": ceiling, "verdict": verdict}


def _per_replicate(values: list, kind: str = "") -> str:
    """``0.953 (0.94, 0.96, 0.95)``: the mean over replicates and each one's value."""
    shown = [v for v in values if v is not None]
    if not shown:
        return "-"
    each = ", ".join(fmt(v, kind) for v in values)
    return f"{fmt(float(np.mean(shown)), kind)} ({each})" if len(values) > 1 else each


def _t_cell(r: dict | None, kind: str = "") -> str:
    """``-0.008 [-0.038, +0.022] (sd 0.012)``: a replicate_tost's mean, 95 % t interval and between-run SD."""
    if not r or r.get("ci_low") is None:
        return "-"
    return f"{fmt(r['mean'], kind)} [{fmt(r['ci_low'], kind)}, {fmt(r['ci_high'], kind)}] (sd {fmt(r['sd'], kind)})"


def comparison_table(entries: list[dict]) -> str | None:
    """The table (None without entries)."""
    rows = []
    tpr = any(e.get("tpr_margin") for e in entries)
    for e in entries:
        where = " ".join(
            f"{k}={v}"
            for k, v in e.items()
            if k not in ("a", "b", "attack", "margin", "tpr_margin", "replicates", "strata")
        )
        for stratum, s in e["strata"].items():
            groups = s["groups"]
            runs = s.get("runs") or {}
            ci90 = f"[{fmt(runs['ci90_low'])}, {fmt(runs['ci90_high'])}]" if runs.get("ci90_low") is not None else "-"
            row = [
                f"{e['a']} vs {e['b']}" + (f" ({where})" if where else ""),
                "all" if stratum == "all" else f"x{stratum}",
                f"{'/'.join(str(n) for n in s['n_members'])} vs {'/'.join(str(n) for n in s['n_nonmembers'])}",
                _per_replicate([g["a"] for g in groups]),
                _per_replicate([g["b"] for g in groups]),
                _t_cell(runs),
                f"{ci90} within +-{e['margin']:g}",
                f"{_per_replicate(s['tpr_a'], 'pct')} / {_per_replicate(s['tpr_b'], 'pct')}",
            ]
            if tpr:
                row.append(_t_cell(s.get("tpr_runs"), "pct"))
            row += [
                s.get("verdict", "-"),
                f"{fmt(s['diff'])} [{fmt(s['ci_low'])}, {fmt(s['ci_high'])}] (p {p_text(s['p_value'])})",
            ]
            rows.append(row)
    if not rows:
        return None
    return markdown_table(
        [
            "a vs b",
            "stratum",
            "members vs nonmembers per replicate",
            "AUC a: mean (each)",
            "AUC b: mean (each)",
            "a - b over runs [95 % t CI] (between-run sd)",
            "90 % t CI over runs (TOST)",
            "TPR at 1 % FPR a / b",
        ]
        + (["TPR a - b over runs [95 % t CI] (sd)"] if tpr else [])
        + ["reading", "within-run detail: pooled a - b [95 % bootstrap CI] (p)"],
        rows,
    )


def render(results: dict) -> str:
    entries = results.get("membership_comparison") or []
    table = comparison_table(entries)
    if not table:
        return ""
    e = entries[0]
    pooled = ", ".join(sorted({k for r in e["replicates"] for k in r})) or "none"
    return markdown_section(
        "Membership inference between arms (equivalence margin stated before the run)",
        table,
        f"The headline attack ({e['attack']}) of arm a on both cells' scores of the same documents, per repetition "
        f"stratum (members with r copies vs every nonmember) and over all members. Replicates (pooled axes: "
        f"{pooled}) are independent: each has its own split, order and models, and the training run is the unit: "
        "each replicate's paired difference is one observation, with a t interval over the runs and their "
        "between-run SD. Reading: the two one-sided t tests at 5 % each over the runs, i.e. the 90 % t interval "
        "inside (-margin, +margin), for the AUC and (with a TPR margin) for TPR at 1 % FPR, the margins fixed in the "
        "config before the run; 'not shown' means the runs cannot exclude a difference of that size (not that one "
        "exists); 'uninformative (ceiling)' where both arms reach AUC >= 0.99 in every run (no room to differ); "
        "'one run' where there is nothing to read across runs. Within-run detail: the mean of the paired "
        "differences with a bootstrap resampling members and nonmembers within each run (every model held fixed). "
        "TPR at 1 % FPR: the ROC read at 1 % of the nonmembers (>= 100 of them).",
    )
