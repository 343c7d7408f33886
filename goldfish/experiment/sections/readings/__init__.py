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
  have before the run (``equivalence.power``); and, where another attack has an arm's highest mean TPR at an FPR,
  that TPR on each arm's strongest attack *at it*: a check of the stated rule, chosen after the run;
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

from goldfish.eval.tables import markdown_section, markdown_table
from goldfish.eval.verdicts import NOT_TESTED

from ...glossary import define
from ...summary import Study
from .comparison import comparison, size_trend, strongest
from .leakage import leakage, values
from .rule import groups, roles

__all__ = ["compute", "derive", "quantity", "render", "strongest", "table"]

TITLE = "Readings"
RULE = define(
    "readings",
    (
        "Each verdict word comes from its interval by one rule (eval/verdicts.py): fewer than two runs "
        "-> 'not tested'; a placebo whose interval excludes 0 -> 'inconclusive'; with a margin stated before the "
        "run, 'equivalent' when the 90 % interval lies inside it, else 'not shown'; otherwise the question's "
        "word for an interval above 0 ('higher', 'cost', 'leak detected', 'detected'), below 0 ('lower', "
        "'gain') or including 0 ('none detected', 'no cost detected'). Membership is read on each arm's "
        "strongest attack by mean AUC (the rule stated before the run), the mask-aware ones included; where "
        "another attack has an arm's highest mean TPR at an FPR, the reading 'each arm's strongest at it' reads "
        "that TPR on those attacks too: a check chosen after the run, with no stated power."
    ),
)


def compute(study: Study) -> dict:
    """Nothing beyond results.json: the readings are :func:`derive`'s, from the other sections' results."""
    return {}


def derive(results: dict) -> list[dict]:
    """Every reading of a study (the module docstring), in report order."""
    roles_ = roles(results)
    equivalence = (results.get("config") or {}).get("equivalence") or {}
    out = []
    for point, arms in groups(results):
        for g in (a for a in arms if roles_.get(a) == "goldfish"):
            for s in (a for a in arms if roles_.get(a) == "standard"):
                out += comparison(results, point, g, s, arms, equivalence)
            out += leakage(point, g, arms, results, roles_)
        out += values(point, arms, roles_)
    return out + size_trend(results, roles_)


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


def _attack(r: dict, above: dict | None) -> str:
    """The attack as the report shows it: "as above" where the row just above read the same attack (a TPR row under
    its AUC row); a check row, read on other attacks, names its own."""
    return "as above" if above is not None and above["attack"] == r["attack"] else r["attack"]


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
            f"{r['test']}; null: {r['null']}; attack: {_attack(r, above)}",
            r["note"] or "-",
        ]
        for above, r in zip([None, *tested], tested)
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
