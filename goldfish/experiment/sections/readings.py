"""The readings of a study, first in its report and in summary.json: each question the design answers, its quantity
with the interval over training runs, and the verdict word that :mod:`goldfish.eval.verdicts` gives that interval --
never a word chosen by hand. Each reading names its test, its null and its attack (the strongest one each arm faced)
and says what it rests on when the design could not see something (one run, a sensitivity measured elsewhere, a
TPR not stored).

A pure function of ``results.json`` (:func:`derive`), so a committed study's readings are re-derived from its files
(``python -m goldfish.experiment.rerender``). Per grid point (the ``runs`` section's groups) and per pair of a Goldfish
arm and a standard arm:

* ``extraction``: Goldfish - standard exact match, paired by run (a t interval over runs);
* ``membership``: each arm's strongest attack (the highest mean AUC over runs among every attack the cells ran, the
  mask-aware ones included), Goldfish's AUC on its strongest minus standard's on its own, paired by run, against the
  margin the config stated (``equivalence.margin``) -- then TPR at 1 % and at 0.1 % FPR the same way (``tpr_margin``),
  where both attacks' TPRs are stored and the nonmembers resolve them; each with the power its design was stated to
  have before the run (``equivalence.power``);
* ``utility``: Goldfish - standard held-out loss (a cost when higher);
* ``leakage``: Goldfish's DiD on its dropped positions against the control on held-out text, its placebo as the
  validity check; with a no-leak twin and positive controls (``leakage_calibration``) the leak against the twin, the
  twin's match on kept context, each positive control against the same twin, and the minimum detectable leak with
  its own range;
* ``values``: with canaries, the exchangeable-value test (``goldfish.eval.value_audit``): Goldfish's mean rank of
  its dropped canary tokens against the exact null 0.5 (a leak), with its MDE, and each positive control's and the
  standard arm's against the same null (the test's sensitivity where the loss trained);
* ``size trend``: over a ``size`` axis, the exact trend test of Goldfish's extracted windows across sizes (events of
  every run pooled per size: :func:`goldfish.eval.stats.exact_trend`), instead of a penalised slope.
"""

from __future__ import annotations

from typing import Any

from goldfish.eval.stats import exact_trend, mde_range, minimum_detectable_effect, replicate_tost, t_over_runs
from goldfish.eval.tables import markdown_section, markdown_table
from goldfish.eval.verdicts import NOT_TESTED, p_verdict, verdict

from ..config import CONTROL
from ..glossary import define
from ..summary import CellSummary, Study, cells_of

TITLE = "Readings"
NONMEMBERS_FOR = {"tpr_at_1pct_fpr": 100, "tpr_at_0_1pct_fpr": 1000}  # a TPR at an FPR is resolved from 1 / FPR on


RULE = define(
    "readings",
    (
        "Each verdict word comes from its interval by one rule (goldfish/eval/verdicts.py): fewer than two runs "
        "-> 'not tested'; a placebo whose interval excludes 0 -> 'inconclusive'; with a margin stated before the "
        "run, 'equivalent' when the 90 % interval lies inside it, else 'not shown'; otherwise the question's "
        "word for an interval above 0 ('higher', 'cost', 'leak detected', 'detected'), below 0 ('lower', "
        "'gain') or including 0 ('none detected', 'no cost detected'). Membership is read on each arm's "
        "strongest attack, the mask-aware ones included."
    ),
)


def compute(study: Study) -> dict:
    """Nothing beyond results.json: the readings are :func:`derive`'s, from the other sections' results."""
    return {}


def roles(results: dict) -> dict[str, str]:
    """Each arm's role by its config: ``control``, ``standard``, ``goldfish``, ``twin`` (dropped tokens replaced in
    the input) or ``positive`` (a known share of the dropped positions supervised)."""
    arms_cfg = (results.get("config") or {}).get("arms") or {}
    out = {}
    for arm in results.get("arms") or []:
        o = arms_cfg.get(arm) or {}
        if arm == CONTROL:
            out[arm] = "control"
        elif o.get("train.loss.type") != "goldfish":
            out[arm] = "standard"
        elif o.get("train.loss.goldfish.replace_dropped"):
            out[arm] = "twin"
        elif o.get("train.loss.goldfish.supervised_fraction") is not None:
            out[arm] = "positive"
        else:
            out[arm] = "goldfish"
    return out


def _groups(results: dict) -> list[tuple[dict, dict[str, dict[str, CellSummary]]]]:
    """``(point, {arm: {replicate: cell}})`` per grid point: the runs section's grouping (tuning cells left out), or
    every cell of an experiment with one run per arm (replicate ``-``)."""
    by_id = {c.cell: c for c in cells_of(results)}
    runs = results.get("runs") or {}
    if runs.get("groups"):
        return [
            (g["point"], {a["arm"]: {r["replicate"]: by_id[r["cell"]] for r in a["runs"]} for a in g["arms"]})
            for g in runs["groups"]
        ]
    arms: dict[str, dict[str, CellSummary]] = {}
    for c in by_id.values():
        arms.setdefault(c.arm, {})["-"] = c
    return [({}, arms)]


def _paired(
    runs_a: dict[str, CellSummary], runs_b: dict[str, CellSummary], value_a, value_b, margin: float | None = None
) -> dict:
    diffs = [
        value_a(runs_a[r]) - value_b(runs_b[r])
        for r in runs_a
        if r in runs_b and value_a(runs_a[r]) is not None and value_b(runs_b[r]) is not None
    ]
    return replicate_tost(diffs, margin or None)


def _reading(
    question: str,
    kind: str,
    d: dict,
    word: str,
    *,
    a: str,
    b: str | None,
    test: str,
    null: str,
    attack: str,
    note: str = "",
    point: dict | None = None,
) -> dict[str, Any]:
    return {
        "point": point or {},
        "question": question,
        "a": a,
        "b": b,
        "kind": kind,
        "estimate": d.get("mean"),
        "ci_low": d.get("ci_low"),
        "ci_high": d.get("ci_high"),
        "n": d.get("n"),
        "margin": d.get("margin"),
        "ci90_low": d.get("ci90_low"),
        "ci90_high": d.get("ci90_high"),
        "word": word,
        "test": test,
        "null": null,
        "attack": attack,
        "note": note,
    }


def _word(question: str, d: dict, valid: bool = True) -> str:
    return verdict(
        question,
        d.get("ci_low"),
        d.get("ci_high"),
        d.get("n"),
        margin=d.get("margin"),
        ci90_low=d.get("ci90_low"),
        ci90_high=d.get("ci90_high"),
        valid=valid,
    )


def strongest(runs: dict[str, CellSummary]) -> str | None:
    """The attack with the highest mean AUC over an arm's runs among those every run has (the first on a tie)."""
    names = [
        n
        for n in next(iter(runs.values())).mia_aucs or {}
        if all((c.mia_aucs or {}).get(n) is not None for c in runs.values())
    ]
    means = {n: sum(c.mia_aucs[n] for c in runs.values()) / len(runs) for n in names}
    return max(means, key=lambda n: means[n]) if means else None


def tpr(c: CellSummary, attack: str, key: str) -> float | None:
    """A cell's stored TPR of one attack (``key``: ``tpr_at_1pct_fpr`` / ``tpr_at_0_1pct_fpr``): every attack's
    since ``mia_tprs``; before it, the headline attack's only."""
    if c.mia_tprs and attack in c.mia_tprs:
        return (c.mia_tprs[attack] or {}).get(key)
    if attack == c.mia_attack:
        return c.mia_tpr_at_1pct_fpr if key == "tpr_at_1pct_fpr" else c.mia_tpr_at_0_1pct_fpr
    return None


def _membership(point: dict, g: str, s: str, arms: dict, equivalence: dict) -> list[dict]:
    sg, ss = strongest(arms[g]), strongest(arms[s])
    if sg is None or ss is None:
        return []
    margin, tpr_margin = equivalence.get("margin") or None, equivalence.get("tpr_margin") or None
    mean = {arm: t_over_runs([c.mia_aucs[att] for c in arms[arm].values()]) for arm, att in ((g, sg), (s, ss))}
    attack = f"strongest per arm: {g} {sg} (AUC {mean[g]['mean']:.3f}), {s} {ss} (AUC {mean[s]['mean']:.3f})"
    d = _paired(arms[g], arms[s], lambda c: c.mia_aucs[sg], lambda c: c.mia_aucs[ss], margin)
    test = "paired t over runs" + (", two one-sided tests against the stated margin" if margin else "")
    out = [
        _reading(
            "membership AUC",
            "",
            d,
            _word("difference", d),
            a=g,
            b=s,
            test=test,
            null="no difference",
            attack=attack,
            point=point,
            note=_power(equivalence, "auc", margin),
        )
    ]
    n_non = max(int(c.nonmembers or 0) for runs in (arms[g], arms[s]) for c in runs.values())
    for key, label in (("tpr_at_1pct_fpr", "TPR at 1 % FPR"), ("tpr_at_0_1pct_fpr", "TPR at 0.1 % FPR")):
        why_not = None
        if n_non < NONMEMBERS_FOR[key]:
            why_not = f"{n_non} nonmembers: needs >= {NONMEMBERS_FOR[key]} to resolve it"
        elif not (
            all(tpr(c, sg, key) is not None for c in arms[g].values())
            and all(tpr(c, ss, key) is not None for c in arms[s].values())
        ):
            why_not = "not stored for the strongest attacks (results before per-attack TPRs): rerun to read it"
        if why_not:
            out.append(
                _reading(
                    f"membership {label}",
                    "pct",
                    {},
                    NOT_TESTED,
                    a=g,
                    b=s,
                    test="-",
                    null="-",
                    attack=attack,
                    point=point,
                    note=why_not,
                )
            )
            continue
        d = _paired(
            arms[g],
            arms[s],
            lambda c: tpr(c, sg, key),
            lambda c: tpr(c, ss, key),
            tpr_margin,
        )
        out.append(
            _reading(
                f"membership {label}",
                "pct",
                d,
                _word("difference", d),
                a=g,
                b=s,
                test=test,
                null="no difference",
                attack=attack,
                point=point,
                note=_power(equivalence, key, tpr_margin),
            )
        )
    return out


def _power(equivalence: dict, key: str, margin: float | None) -> str:
    """The power the config stated for one equivalence test (``equivalence.power``), said beside its reading."""
    power = (equivalence.get("power") or {}).get(key)
    if power is None or not margin:
        return ""
    return f"power {power:.2f} at a true difference of 0 within +-{margin:g} (stated before the run)"


def _dropped(c: CellSummary, part: str, positions: str = "dropped") -> float | None:
    """A cell's audit value: ``did`` (the DiD on ``positions``) or ``placebo`` (accuracy)."""
    audit = c.leakage or {}
    if part == "placebo":
        return ((audit.get("placebo") or {}).get("accuracy") or {}).get("did")
    return ((((audit.get("did") or {}).get(positions) or {}).get("accuracy")) or {}).get("did")


def _leakage(point: dict, g: str, arms: dict, results: dict, roles_: dict) -> list[dict]:
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
        _reading(
            "leak on dropped positions (accuracy DiD)",
            "pct",
            did,
            _word("leak", did, valid),
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
        d = _paired(runs, arms[twin], lambda c: _dropped(c, "did"), lambda c: _dropped(c, "did"))
        df = d["n"] - 1 if d.get("n") else None
        rng = mde_range(d.get("se"), df)
        mde = minimum_detectable_effect(d.get("se"), df=df)
        out.append(
            _reading(
                "leak against the no-leak twin (accuracy DiD)",
                "pct",
                d,
                _word("leak", d),
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
        kept = _paired(runs, arms[twin], lambda c: _dropped(c, "did", "kept"), lambda c: _dropped(c, "did", "kept"))
        means = [t_over_runs([_dropped(c, "did", "kept") for c in arms[a].values()]).get("mean") for a in (g, twin)]
        out.append(
            _reading(
                "null matched on kept context (kept-position DiD)",
                "pct",
                kept,
                _word("difference", kept),
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
            d = _paired(arms[p], arms[twin], lambda c: _dropped(c, "did"), lambda c: _dropped(c, "did"))
            frac = next(iter(arms[p].values())).leakage or {}
            out.append(
                _reading(
                    "positive control against the same twin",
                    "pct",
                    d,
                    _word("detected", d),
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


def _value_rank(c: CellSummary) -> float | None:
    """A cell's mean rank of its canary tokens on the dropped positions minus the exact null (0.5)."""
    dropped = ((c.value_audit or {}).get("dropped") or {}).get("mean_rank")
    return None if dropped is None else dropped - (c.value_audit or {}).get("null_rank", 0.5)


VALUE_ROLES = ("goldfish", "twin", "positive", "standard")  # the arms the exchangeable-value test reads, in order


def _in_place(c: CellSummary) -> float | None:
    """A cell's dropped-token rank in its own context minus in another canary's (knowledge of the token in place)."""
    audit = c.value_audit or {}
    own, other = (audit.get("dropped") or {}).get("mean_rank"), (audit.get("foreign_dropped") or {}).get("mean_rank")
    return None if own is None or other is None else own - other


def _values(point: dict, arms: dict, roles_: dict) -> list[dict]:
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
            _reading(
                "leak on dropped canary tokens (exchangeable-value rank - 0.5)"
                if leak
                else "positive control against the exact null (rank - 0.5)",
                "",
                d,
                _word("leak" if leak else "detected", d),
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
                _reading(
                    "of which in place (own-context rank - another canary's context)"
                    if leak
                    else "positive control in place (own-context rank - another canary's context)",
                    "",
                    place,
                    _word("leak" if leak else "detected", place),
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


def _size_trend(results: dict, roles_: dict) -> list[dict]:
    if "size" not in (results.get("axes") or []):
        return []
    out = []
    for arm in (a for a, r in roles_.items() if r == "goldfish"):
        by_size: dict[str, list[CellSummary]] = {}
        for point, arms in _groups(results):
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


def _extraction(results: dict, point: dict, g: str, s: str, arms: dict, ex: dict) -> dict:
    """Goldfish - standard exact match over runs; with one run, the within-run exact McNemar test of results.json's
    ``paired`` (documents are then the unit, and the reading says so)."""
    reading = _reading(
        "extraction (exact match)",
        "pct",
        ex,
        _word("difference", ex),
        a=g,
        b=s,
        test="paired t over runs",
        null="no difference",
        attack="greedy decoding",
        point=point,
    )
    if (ex.get("n") or 0) >= 2:
        return reading
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
        return reading
    sign = 1 if pair["a"] == g else -1
    reading.update(
        word=p_verdict("difference", test["p_value"], sign * (test.get("diff") or 0.0)),
        p_value=test["p_value"],
        test="exact McNemar test over the same documents, within one run",
        note="one training run: documents, not runs, are the unit; no reading across runs",
    )
    return reading


def derive(results: dict) -> list[dict]:
    """Every reading of a study (the module docstring), in report order."""
    roles_ = roles(results)
    equivalence = (results.get("config") or {}).get("equivalence") or {}
    out = []
    for point, arms in _groups(results):
        for g in (a for a in arms if roles_.get(a) == "goldfish"):
            for s in (a for a in arms if roles_.get(a) == "standard"):
                ex = _paired(arms[g], arms[s], lambda c: c.exact_match_rate, lambda c: c.exact_match_rate)
                out.append(_extraction(results, point, g, s, arms, ex))
                out += _membership(point, g, s, arms, equivalence)
                loss = _paired(arms[g], arms[s], lambda c: c.heldout_loss, lambda c: c.heldout_loss)
                out.append(
                    _reading(
                        "utility (held-out loss, nats)",
                        "",
                        loss,
                        _word("cost", loss),
                        a=g,
                        b=s,
                        test="paired t over runs",
                        null="no difference",
                        attack="-",
                        point=point,
                    )
                )
            out += _leakage(point, g, arms, results, roles_)
        out += _values(point, arms, roles_)
    return out + _size_trend(results, roles_)


def _pts(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f} pts"


def _size(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f} pts"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def quantity(r: dict) -> str:
    """``-11.5 pts [-13.3, -9.7] over 5 runs``: a reading's estimate and interval as the report shows it."""
    if r["kind"] == "trend":
        return f"T - E[T] {r['estimate']:+.1f}, p {r['p_value']:.2g} ({r['n']} sizes)"
    if r["estimate"] is None:
        return "-"
    f = (lambda v: f"{100 * v:+.1f}") if r["kind"] == "pct" else (lambda v: f"{v:+.3f}")
    unit = " pts" if r["kind"] == "pct" else ""
    if r["ci_low"] is None:
        p = f", p {r['p_value']:.2g}" if r.get("p_value") is not None else ""
        return f"{f(r['estimate'])}{unit} ({r['n']} run: no interval{p})"
    text = f"{f(r['estimate'])}{unit} [{f(r['ci_low'])}, {f(r['ci_high'])}] over {r['n']} runs"
    if r.get("margin"):
        text += f"; 90 % [{f(r['ci90_low'])}, {f(r['ci90_high'])}] vs margin +-{f(r['margin']).lstrip('+')}"
    return text


def _arms(r: dict) -> str:
    return r["a"] + (f" - {r['b']}" if r["b"] else "")


def _attack(r: dict) -> str:
    """The attack as the report shows it: a TPR row's is its AUC row's, just above it."""
    return "as above" if r["question"].startswith("membership TPR") else r["attack"]


def render(results: dict) -> str:
    found = derive(results)
    if not found:
        return ""
    tested = [r for r in found if r["word"] != NOT_TESTED]
    points = any(r["point"] for r in found)  # a grid: the point of each reading; else no column for it
    rows = [
        [", ".join(f"{k}={v}" for k, v in r["point"].items()) or "-"][:points]
        + [
            r["question"],
            _arms(r),
            quantity(r),
            f"**{r['word']}**",
            f"{r['test']}; null: {r['null']}; attack: {_attack(r)}",
            r["note"] or "-",
        ]
        for r in tested
    ]
    untested = [
        f"{r['question']}"
        + "".join(f" at {k}={v}" for k, v in r["point"].items())
        + (f" ({_arms(r)}: {quantity(r)})" if r["estimate"] is not None else "")
        + (f": {r['note']}" if r["note"] and r["estimate"] is None else "")
        for r in found
        if r not in tested
    ]
    blocks = (
        [
            markdown_table(
                ["grid point"][:points]
                + [
                    "question",
                    "arms (a - b)",
                    "quantity [95 % t over runs]",
                    "verdict",
                    "test; null; attack",
                    "what it rests on",
                ],
                rows,
            )
        ]
        if rows
        else []
    )
    if untested:
        blocks.append("**Not tested** (fewer than two training runs, or not resolved): " + "; ".join(untested) + ".")
    return markdown_section(TITLE, *blocks, RULE)


def table(results: dict, questions: list[str] | None = None) -> str:
    """The readings the docs quote (a ``<!-- readings: ... -->`` block, ``python -m goldfish.experiment.rerender
    --docs``): a compact table of :func:`derive`'s readings whose question starts with one of ``questions`` (all when
    None), word for word as the report gives them."""
    found = [r for r in derive(results) if not questions or any(r["question"].startswith(q) for q in questions)]
    rows = [
        [
            ", ".join(f"{k}={v}" for k, v in r["point"].items()) or "-",
            r["question"],
            r["a"] + (f" - {r['b']}" if r["b"] else ""),
            quantity(r),
            f"**{r['word']}**",
            r["note"] or "-",
        ]
        for r in found
    ]
    return markdown_table(
        ["grid point", "question", "arms (a - b)", "quantity [95 % t over runs]", "verdict", "what it rests on"], rows
    )
