"""How one reading is made: each arm's role, the runs per grid point, a paired difference over runs with its
interval (and two one-sided tests against a margin), and the record with the word :mod:`goldfish.eval.verdicts`
gives it."""

from __future__ import annotations

from typing import Any

from goldfish.eval.stats import replicate_tost
from goldfish.eval.verdicts import verdict

from ...grid import CONTROL
from ...summary import CellSummary, cells_of


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


def groups(results: dict) -> list[tuple[dict, dict[str, dict[str, CellSummary]]]]:
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


def paired(
    runs_a: dict[str, CellSummary], runs_b: dict[str, CellSummary], value_a, value_b, margin: float | None = None
) -> dict:
    diffs = [
        value_a(runs_a[r]) - value_b(runs_b[r])
        for r in runs_a
        if r in runs_b and value_a(runs_a[r]) is not None and value_b(runs_b[r]) is not None
    ]
    return replicate_tost(diffs, margin or None)


def reading(
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


def word(question: str, d: dict, valid: bool = True) -> str:
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
