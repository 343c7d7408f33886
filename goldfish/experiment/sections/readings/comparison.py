"""The readings of a Goldfish arm against a standard arm: exact match, membership on each arm's strongest attack
(AUC, then TPR at 1 % and 0.1 % FPR) against the margins and powers stated before the run, held-out loss, and the
extraction trend across model sizes."""

from __future__ import annotations

from goldfish.eval.stats import exact_trend, t_over_runs
from goldfish.eval.verdicts import NOT_TESTED, p_verdict

from ...summary import CellSummary
from .rule import groups, paired, reading, word

NONMEMBERS_FOR = {"tpr_at_1pct_fpr": 100, "tpr_at_0_1pct_fpr": 1000}  # a TPR at an FPR is resolved from 1 / FPR on


def comparison(results: dict, point: dict, g: str, s: str, arms: dict, equivalence: dict) -> list[dict]:
    """Goldfish arm ``g`` against standard arm ``s`` at one grid point: exact match, membership, held-out loss."""
    ex = paired(arms[g], arms[s], lambda c: c.exact_match_rate, lambda c: c.exact_match_rate)
    loss = paired(arms[g], arms[s], lambda c: c.heldout_loss, lambda c: c.heldout_loss)
    utility = reading(
        "utility (held-out loss, nats)",
        "",
        loss,
        word("cost", loss),
        a=g,
        b=s,
        test="paired t over runs",
        null="no difference",
        attack="-",
        point=point,
    )
    return [extraction(results, point, g, s, arms, ex), *membership(point, g, s, arms, equivalence), utility]


def extraction(results: dict, point: dict, g: str, s: str, arms: dict, ex: dict) -> dict:
    """Goldfish - standard exact match over runs; with one run, the within-run exact McNemar test of results.json's
    ``paired`` (documents are then the unit, and the reading says so)."""
    found = reading(
        "extraction (exact match)",
        "pct",
        ex,
        word("difference", ex),
        a=g,
        b=s,
        test="paired t over runs",
        null="no difference",
        attack="greedy decoding",
        point=point,
    )
    if (ex.get("n") or 0) >= 2:
        return found
    cells = {next(iter(arms[g].values())).cell, next(iter(arms[s].values())).cell}
    pair = next(
        (
            p
            for p in results.get("paired") or []
            if {p.get("cell_a"), p.get("cell_b")} == cells
            or ({p.get("a"), p.get("b")} == {g, s} and not p.get("cell_a"))
        ),
        None,
    )
    test = (pair or {}).get("exact_match") or {}
    if test.get("p_value") is None:
        return found
    sign = 1 if pair["a"] == g else -1
    found.update(
        word=p_verdict("difference", test["p_value"], sign * (test.get("diff") or 0.0)),
        p_value=test["p_value"],
        test="exact McNemar test over the same documents, within one run",
        note="one training run: documents, not runs, are the unit; no reading across runs",
    )
    return found


def strongest(runs: dict[str, CellSummary], key: str = "auc") -> str | None:
    """The attack with the highest mean over an arm's runs of ``key`` (``auc``, or a TPR key of ``mia_tprs``:
    ``tpr_at_1pct_fpr`` / ``tpr_at_0_1pct_fpr``) among those every run has (the first on a tie)."""

    def value(c: CellSummary, n: str) -> float | None:
        return (c.mia_aucs or {}).get(n) if key == "auc" else ((c.mia_tprs or {}).get(n) or {}).get(key)

    first = next(iter(runs.values()))
    names = [n for n in first.mia_aucs or {} if all(value(c, n) is not None for c in runs.values())]
    means = {n: sum(value(c, n) for c in runs.values()) / len(runs) for n in names}
    return max(means, key=lambda n: means[n]) if means else None


def tpr(c: CellSummary, attack: str, key: str) -> float | None:
    """A cell's stored TPR of one attack (``key``: ``tpr_at_1pct_fpr`` / ``tpr_at_0_1pct_fpr``): every attack's
    since ``mia_tprs``; before it, the headline attack's only."""
    if c.mia_tprs and attack in c.mia_tprs:
        return (c.mia_tprs[attack] or {}).get(key)
    if attack == c.mia_attack:
        return c.mia_tpr_at_1pct_fpr if key == "tpr_at_1pct_fpr" else c.mia_tpr_at_0_1pct_fpr
    return None


def membership(point: dict, g: str, s: str, arms: dict, equivalence: dict) -> list[dict]:
    sg, ss = strongest(arms[g]), strongest(arms[s])
    if sg is None or ss is None:
        return []
    margin, tpr_margin = equivalence.get("margin") or None, equivalence.get("tpr_margin") or None
    mean = {arm: t_over_runs([c.mia_aucs[att] for c in arms[arm].values()]) for arm, att in ((g, sg), (s, ss))}
    attack = f"strongest per arm: {g} {sg} (AUC {mean[g]['mean']:.3f}), {s} {ss} (AUC {mean[s]['mean']:.3f})"
    d = paired(arms[g], arms[s], lambda c: c.mia_aucs[sg], lambda c: c.mia_aucs[ss], margin)
    out = [
        reading(
            "membership AUC",
            "",
            d,
            word("difference", d),
            a=g,
            b=s,
            test=_test(margin),
            null="no difference",
            attack=attack,
            point=point,
            note=_power(equivalence, "auc", margin),
        )
    ]
    n_non = max(int(c.nonmembers or 0) for runs in (arms[g], arms[s]) for c in runs.values())
    for key, label in (("tpr_at_1pct_fpr", "TPR at 1 % FPR"), ("tpr_at_0_1pct_fpr", "TPR at 0.1 % FPR")):
        why_not = ""
        if n_non < NONMEMBERS_FOR[key]:
            why_not = f"{n_non} nonmembers: needs >= {NONMEMBERS_FOR[key]} to resolve it"
        elif not (
            all(tpr(c, sg, key) is not None for c in arms[g].values())
            and all(tpr(c, ss, key) is not None for c in arms[s].values())
        ):
            why_not = "not stored for the strongest attacks (results before per-attack TPRs): rerun to read it"
        d = (
            {}
            if why_not
            else paired(arms[g], arms[s], lambda c: tpr(c, sg, key), lambda c: tpr(c, ss, key), tpr_margin)
        )
        out.append(
            reading(
                f"membership {label}",
                "pct",
                d,
                NOT_TESTED if why_not else word("difference", d),
                a=g,
                b=s,
                test="-" if why_not else _test(tpr_margin),
                null="-" if why_not else "no difference",
                attack=attack,
                point=point,
                note=why_not or _power(equivalence, key, tpr_margin),
            )
        )
        if not why_not:
            out += at_its_fpr(point, g, s, arms, key, label, (sg, ss), tpr_margin)
    return out


def at_its_fpr(
    point: dict, g: str, s: str, arms: dict, key: str, label: str, read: tuple[str, str], margin: float | None
) -> list[dict]:
    """The check of the stated rule at one FPR: each arm on its strongest attack *at that FPR* (highest mean TPR),
    where that is not the attack the stated rule (highest mean AUC) reads. Chosen after the run, so it has no
    stated power; the same margin and word rule."""
    best = strongest(arms[g], key), strongest(arms[s], key)
    if None in best or best == read:
        return []
    bg, bs = best
    d = paired(arms[g], arms[s], lambda c: tpr(c, bg, key), lambda c: tpr(c, bs, key), margin)
    mean = {arm: t_over_runs([tpr(c, att, key) for c in arms[arm].values()])["mean"] for arm, att in ((g, bg), (s, bs))}
    return [
        reading(
            f"membership {label}, each arm's strongest at it",
            "pct",
            d,
            word("difference", d),
            a=g,
            b=s,
            test=_test(margin),
            null="no difference",
            attack=f"strongest per arm at this FPR: {g} {bg} (TPR {100 * mean[g]:.1f} %), {s} {bs} "
            f"(TPR {100 * mean[s]:.1f} %)",
            point=point,
            note="a check of the stated rule (the strongest attack by AUC), chosen after the run: no power stated",
        )
    ]


def _test(margin: float | None) -> str:
    return "paired t over runs" + (", two one-sided tests against the stated margin" if margin else "")


def _power(equivalence: dict, key: str, margin: float | None) -> str:
    """The power the config stated for one equivalence test (``equivalence.power``), said beside its reading."""
    power = (equivalence.get("power") or {}).get(key)
    if power is None or not margin:
        return ""
    return f"power {power:.3g} at a true difference of 0 (stated before the run)"


def size_trend(results: dict, roles_: dict) -> list[dict]:
    if "size" not in (results.get("axes") or []):
        return []
    out = []
    for arm in (a for a, r in roles_.items() if r == "goldfish"):
        by_size: dict[str, list[CellSummary]] = {}
        for point, arms in groups(results):
            by_size.setdefault(str(point.get("size")), []).extend((arms.get(arm) or {}).values())
        sizes = sorted((s for s, cs in by_size.items() if cs), key=lambda s: by_size[s][0].params or 0)
        events = [sum(round((c.exact_match_rate or 0) * (c.n_windows or 0)) for c in by_size[s]) for s in sizes]
        trials = [sum(c.n_windows or 0 for c in by_size[s]) for s in sizes]
        if len(sizes) < 2 or not all(trials):
            continue
        t = exact_trend(events, trials)
        out.append(
            {
                "point": {},
                "question": "extraction trend across sizes",
                "a": arm,
                "b": None,
                "kind": "trend",
                "estimate": t["statistic"] - t["expected"],
                "ci_low": None,
                "ci_high": None,
                "n": len(sizes),
                "p_value": t["p_value"],
                "word": p_verdict("trend", t["p_value"], t["statistic"] - t["expected"]),
                "test": "exact Cochran-Armitage trend test (two-sided), sizes scored 0..G-1",
                "null": "the same extraction rate at every size",
                "attack": "greedy decoding",
                "note": ", ".join(f"{s}: {e}/{n}" for s, e, n in zip(sizes, events, trials)) + " windows",
            }
        )
    return out
