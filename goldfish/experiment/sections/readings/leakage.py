"""The leakage readings: Goldfish's DiD on its dropped positions against the control (its placebo the validity
check), against a no-leak twin with the positive controls and the minimum detectable leak, and the exchangeable-value
test against its exact null 0.5."""

from __future__ import annotations

from goldfish.eval.stats import mde_range, minimum_detectable_effect, t_over_runs

from ...summary import CellSummary
from .rule import paired, reading, word


def _dropped(c: CellSummary, part: str, positions: str = "dropped") -> float | None:
    """A cell's audit value: ``did`` (the DiD on ``positions``) or ``placebo`` (accuracy)."""
    audit = c.leakage or {}
    if part == "placebo":
        return ((audit.get("placebo") or {}).get("accuracy") or {}).get("did")
    return ((((audit.get("did") or {}).get(positions) or {}).get("accuracy")) or {}).get("did")


def leakage(point: dict, g: str, arms: dict, results: dict, roles_: dict) -> list[dict]:
    runs = arms[g]
    did = t_over_runs([_dropped(c, "did") for c in runs.values()])
    if not did.get("n"):
        return []
    placebo = t_over_runs([_dropped(c, "placebo") for c in runs.values()])
    valid = placebo.get("ci_low") is None or placebo["ci_low"] <= 0 <= placebo["ci_high"]
    twins = [a for a in arms if roles_.get(a) == "twin"]
    mde = minimum_detectable_effect(did.get("se"), df=did.get("df"))
    note = (
        f"placebo {_pts(placebo.get('mean'))} [{_pts(placebo.get('ci_low'))}, {_pts(placebo.get('ci_high'))}]"
        f"{'' if valid else ' excludes 0: the held-out text is no valid reference'}; across-run MDE "
        f"{_size(mde)}"
    )
    if not twins:
        note += "; no no-leak twin or positive control in this design: its sensitivity is not measured here"
    out = [
        reading(
            "leak on dropped positions (accuracy DiD)",
            "pct",
            did,
            word("leak", did, valid),
            a=g,
            b=None,
            test="t over runs of each run's DiD",
            null="the control, with held-out text as reference",
            attack="teacher-forced top-1 on the dropped positions",
            note=note,
            point=point,
        )
    ]
    for twin in twins:
        d = paired(runs, arms[twin], lambda c: _dropped(c, "did"), lambda c: _dropped(c, "did"))
        df = d["n"] - 1 if d.get("n") else None
        rng = mde_range(d.get("se"), df)
        mde = minimum_detectable_effect(d.get("se"), df=df)
        out.append(
            reading(
                "leak against the no-leak twin (accuracy DiD)",
                "pct",
                d,
                word("leak", d),
                a=g,
                b=twin,
                test="paired t over runs",
                null=f"{twin}: dropped tokens replaced in its input",
                attack="teacher-forced top-1 on the dropped positions",
                point=point,
                note=f"MDE {_size(mde)} (95 % range {_size(rng[0]) if rng else '-'} to "
                f"{_size(rng[1]) if rng else '-'}: an SD from {df} df)",
            )
        )
        kept = paired(runs, arms[twin], lambda c: _dropped(c, "did", "kept"), lambda c: _dropped(c, "did", "kept"))
        means = [t_over_runs([_dropped(c, "did", "kept") for c in arms[a].values()]).get("mean") for a in (g, twin)]
        out.append(
            reading(
                "null matched on kept context (kept-position DiD)",
                "pct",
                kept,
                word("difference", kept),
                a=g,
                b=twin,
                test="paired t over runs",
                null="the twin learns the members' kept context as Goldfish does",
                attack="-",
                point=point,
                note=f"kept-position DiD {g} {_pts(means[0])}, {twin} {_pts(means[1])}; "
                "'none detected' = matched within the interval",
            )
        )
        for p in (a for a in arms if roles_.get(a) == "positive"):
            d = paired(arms[p], arms[twin], lambda c: _dropped(c, "did"), lambda c: _dropped(c, "did"))
            frac = next(iter(arms[p].values())).leakage or {}
            out.append(
                reading(
                    "positive control against the same twin",
                    "pct",
                    d,
                    word("detected", d),
                    a=p,
                    b=twin,
                    test="paired t over runs",
                    null=f"{twin}",
                    attack="teacher-forced top-1 on the dropped positions",
                    point=point,
                    note=f"trained on {_pct(frac.get('supervised_fraction'))} of them",
                )
            )
    return out


VALUE_ROLES = ("goldfish", "twin", "positive", "standard")  # the arms the exchangeable-value test reads, in order


def _value_rank(c: CellSummary) -> float | None:
    """A cell's mean rank of its canary tokens on the dropped positions minus the exact null (0.5)."""
    dropped = ((c.value_audit or {}).get("dropped") or {}).get("mean_rank")
    return None if dropped is None else dropped - (c.value_audit or {}).get("null_rank", 0.5)


def _in_place(c: CellSummary) -> float | None:
    """A cell's dropped-token rank in its own context minus in another canary's (knowledge of the token in place)."""
    audit = c.value_audit or {}
    own, other = (audit.get("dropped") or {}).get("mean_rank"), (audit.get("foreign_dropped") or {}).get("mean_rank")
    return None if own is None or other is None else own - other


def values(point: dict, arms: dict, roles_: dict) -> list[dict]:
    """The exchangeable-value test (``goldfish.eval.value_audit``) of every arm that ran it: Goldfish's (and a
    twin's) dropped-position rank against the exact null 0.5 (a leak), each positive control's and the standard
    arm's against the same null (the test's sensitivity, on positions they trained on), with Goldfish's MDE; then for
    each the part known in place: the rank in its own context minus in another canary's, paired by run."""
    out = []
    goldfish = None  # the first Goldfish arm's t summary: its SE gives the MDE
    for arm in sorted((a for a in arms if roles_.get(a) in VALUE_ROLES), key=lambda a: VALUE_ROLES.index(roles_[a])):
        d = t_over_runs([_value_rank(c) for c in arms[arm].values()])
        if not d.get("n"):
            continue
        leak = roles_[arm] in ("goldfish", "twin")
        goldfish = d if goldfish is None and roles_[arm] == "goldfish" else goldfish
        audit = next(iter(arms[arm].values())).value_audit or {}
        mask = audit.get("mask") or {}
        note = (
            f"mask of {mask.get('arm')} (k={mask.get('k')}, {mask.get('strategy')}); "
            f"{(audit.get('dropped') or {}).get('positions')} dropped canary positions a run"
        )
        if leak and goldfish is not None and goldfish.get("se") is not None:
            rng = mde_range(goldfish["se"], goldfish.get("df"))
            note += (
                f"; MDE {_rank(minimum_detectable_effect(goldfish['se'], df=goldfish.get('df')))} of rank (95 % "
                f"range {_rank(rng[0]) if rng else '-'} to {_rank(rng[1]) if rng else '-'})"
            )
        out.append(
            reading(
                "leak on dropped canary tokens (exchangeable-value rank - 0.5)"
                if leak
                else "positive control against the exact null (rank - 0.5)",
                "",
                d,
                word("leak" if leak else "detected", d),
                a=arm,
                b=None,
                test="t over runs of each run's mean rank",
                null="0.5 exactly: the true token is one uniform draw from the ids the mask treats alike",
                attack="the model's logit rank among those ids, teacher-forced",
                note=note,
                point=point,
            )
        )
        place = t_over_runs([_in_place(c) for c in arms[arm].values()])
        if place.get("n"):
            foreign = t_over_runs(
                [_value_rank(c) - _in_place(c) for c in arms[arm].values() if _in_place(c) is not None]
            )
            out.append(
                reading(
                    "of which in place (own-context rank - another canary's context)"
                    if leak
                    else "positive control in place (own-context rank - another canary's context)",
                    "",
                    place,
                    word("leak" if leak else "detected", place),
                    a=arm,
                    b=None,
                    test="t over runs of each run's paired difference",
                    null="no difference: a token known only as a seen id ranks alike in any context",
                    attack="the same rank at the same position in the next canary's context",
                    note=f"in another canary's context: rank - 0.5 {_signed(foreign.get('mean'))} "
                    f"[{_signed(foreign.get('ci_low'))}, {_signed(foreign.get('ci_high'))}] (token-level knowledge)"
                    + (
                        f"; MDE {_rank(minimum_detectable_effect(place['se'], df=place.get('df')))} of rank"
                        if leak and place.get("se") is not None
                        else ""
                    ),
                    point=point,
                )
            )
    return out


def _signed(v: float | None) -> str:
    return "-" if v is None else f"{v:+.3f}"


def _rank(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _pts(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f} pts"


def _size(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f} pts"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"
