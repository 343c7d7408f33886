"""Membership inference compared between arms with a margin stated before the run (the experiment's
``equivalence``): per pair of trained arms (each later one against each earlier one: Goldfish vs standard), the
headline attack's AUC on the same member and nonmember documents, per repetition stratum (members with r copies vs
every nonmember) and over all members, each replicate (the ``equivalence.pool`` axes, e.g. seeds: their own split,
order and models) paired, the replicates' differences averaged (:func:`goldfish.eval.stats.pooled_paired_auc_difference`:
a 95 % interval and p-value, and the 90 % interval of the two one-sided tests against the margin), and TPR at 1 % FPR
of each arm."""

from __future__ import annotations

from typing import Any

import numpy as np

from goldfish.eval.stats import pooled_paired_auc_difference, tpr_at_fpr
from goldfish.eval.tables import fmt, markdown_section, markdown_table, p_text

from ...data import load_prepared
from ...io import read_json
from ..config import CONTROL
from ..inference import FPR, arm_pairs
from ..summary import Study

N_BOOTSTRAP = 1000


def _scores(attacks: dict, attack: str) -> dict[str, dict[Any, float]]:
    """``{"members" | "nonmembers": {document id: score}}`` of one attack in a cell's attacks.json."""
    scores, ids = (attacks.get("scores") or {}).get(attack) or {}, attacks.get("doc_ids") or {}
    return {s: {i: (np.nan if v is None else float(v)) for i, v in zip(ids.get(s) or [], scores.get(s) or [])}
            for s in ("members", "nonmembers")}


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
                strata[stratum] = found
            out.append({"a": a, "b": b, "attack": attack, **dict(zip(kept, key)), "margin": cfg.equivalence.margin,
                        "replicates": labels, "strata": strata})
    return {"membership_comparison": out}


def _per_replicate(values: list, kind: str = "") -> str:
    """``0.953 (0.94, 0.96, 0.95)``: the mean over replicates and each one's value."""
    shown = [v for v in values if v is not None]
    if not shown:
        return "-"
    each = ", ".join(fmt(v, kind) for v in values)
    return f"{fmt(float(np.mean(shown)), kind)} ({each})" if len(values) > 1 else each


def comparison_table(entries: list[dict]) -> str | None:
    """The table (None without entries)."""
    rows = []
    for e in entries:
        where = " ".join(f"{k}={v}" for k, v in e.items() if k not in ("a", "b", "attack", "margin", "replicates",
                                                                          "strata"))
        for stratum, s in e["strata"].items():
            groups = s["groups"]
            verdict = "-" if s.get("equivalent") is None else ("equivalent" if s["equivalent"] else "not shown")
            rows.append([f"{e['a']} vs {e['b']}" + (f" ({where})" if where else ""),
                         "all" if stratum == "all" else f"x{stratum}",
                         f"{'/'.join(str(n) for n in s['n_members'])} vs {'/'.join(str(n) for n in s['n_nonmembers'])}",
                         _per_replicate([g["a"] for g in groups]), _per_replicate([g["b"] for g in groups]),
                         f"{fmt(s['diff'])} [{fmt(s['ci_low'])}, {fmt(s['ci_high'])}] (p {p_text(s['p_value'])})",
                         f"[{fmt(s['ci90_low'])}, {fmt(s['ci90_high'])}]: {verdict} within +-{e['margin']:g}",
                         f"{_per_replicate(s['tpr_a'], 'pct')} / {_per_replicate(s['tpr_b'], 'pct')}"])
    if not rows:
        return None
    return markdown_table(["a vs b", "stratum", "members vs nonmembers per replicate", "AUC a: mean (each)",
                           "AUC b: mean (each)", "a - b [95 % CI] (p)", "90 % CI: equivalence (TOST)",
                           "TPR at 1 % FPR a / b"], rows)


def render(results: dict) -> str:
    entries = results.get("membership_comparison") or []
    table = comparison_table(entries)
    if not table:
        return ""
    e = entries[0]
    pooled = ", ".join(sorted({k for r in e["replicates"] for k in r})) or "none"
    return markdown_section(
        "Membership inference between arms (equivalence margin stated before the run)", table,
        f"The headline attack ({e['attack']}) of arm a on both cells' scores of the same documents, per repetition "
        f"stratum (members with r copies vs every nonmember) and over all members. Replicates (pooled axes: "
        f"{pooled}) are independent: each has its own split, order and models; the difference is the mean of their "
        "paired differences, its 95 % interval and two-sided p-value from a bootstrap resampling members and "
        "nonmembers within each replicate (the same draws for both arms). Equivalence: the two one-sided tests at "
        "5 % each, i.e. the 90 % interval inside (-margin, +margin), the margin fixed in the config before the run; "
        "'not shown' means the data cannot exclude a difference of that size (not that one exists: the 95 % "
        "interval says whether it does). TPR at 1 % FPR: the ROC read at 1 % of the nonmembers (>= 100 of them).")
