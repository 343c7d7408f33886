"""Choosing a grid axis's value from the control cells before the arms train (``tune:`` in the experiment config).

Carlini-style sweeps tune each model size's learning rate on data without the targets. With
``tune: {axis: lr, per: [size]}`` and ``control_mode: background``, the *tuning cells* are the control cells at every
value of ``lr`` and at the first value of every axis not in ``per`` (e.g. seed 0); for each ``per`` combination the
value whose control has the lowest held-out loss is *chosen*, and every other cell runs only at the chosen value.
The tuning cells run first; the others are skipped until their choice is known. Nothing here trains: the runner asks
:func:`is_tuning` / :func:`choice` and aggregates :func:`active` plans.

``per`` may also name ``arm`` (:data:`ARM`): then every arm, the control included, is tuned on its own cells' loss
(each arm at every value of the axis, at the first value of the other axes) and runs at its own choice -- a learning
rate tuned on the control alone is confounded with whatever the arms' losses need at each size. Each group's choice
says whether the grid holds a value on both sides of it (``interior``): a choice at the grid's edge may not be the
optimum, and the report says so.

A study costs what it reads (:func:`loss_only`): with ``by: validation_loss`` a tuning cell is read for its
validation loss alone, so it first computes only that (training and the exposure counts' validation loss:
``Phase.tuning``); the runner evaluates it in full where its value is chosen. The cells at other values are then in
the ``tune`` block only (:func:`active` leaves them out of the cells once their group's choice is known);
``tune.evaluate: true`` evaluates every tuning cell as before.
"""

from __future__ import annotations

import math
from typing import Any

from .collect import tuning_loss
from .config import ExperimentConfig
from .grid import CONTROL
from .plan import CellPlan

ARM = "arm"  # tune.per may name it: each arm (the control included) is tuned on its own cells


def loss_only(cfg: ExperimentConfig) -> bool:
    """Whether tuning cells compute only the loss the choice reads until their value is chosen (module docstring):
    ``by: validation_loss`` and not ``tune.evaluate`` (the held-out loss is the evaluation's own pass)."""
    return bool(cfg.tune.axis) and cfg.tune.by == "validation_loss" and not cfg.tune.evaluate


def first_values(plans: list[CellPlan]) -> dict[str, Any]:
    """Each grid axis label -> the value of its first grid entry (as cells show it): the first cell's values, since
    cells are expanded grid-major."""
    return dict(plans[0].cell.values) if plans else {}


def is_tuning(cfg: ExperimentConfig, plan: CellPlan, first: dict[str, Any]) -> bool:
    """A control cell (any cell, with ``arm`` in ``per``) at the first value of every axis that is neither tuned
    nor in ``per``."""
    fixed = [a for a in first if a != cfg.tune.axis and a not in cfg.tune.per]
    return (plan.cell.control or ARM in cfg.tune.per) and all(plan.cell.values[a] == first[a] for a in fixed)


def _key(cfg: ExperimentConfig, plan: CellPlan) -> tuple:
    return tuple(plan.cell.arm if a == ARM else plan.cell.values[a] for a in cfg.tune.per)


def sweep(cfg: ExperimentConfig, plans: list[CellPlan]) -> dict[tuple, dict[Any, float | None]]:
    """``{per values: {axis value: held-out loss of its tuning cell (None until it is done, or with
    :func:`loss_only` until its validation loss is written)}}``."""
    first = first_values(plans)
    out: dict[tuple, dict[Any, float | None]] = {}
    for p in plans:
        if is_tuning(cfg, p, first):
            loss = tuning_loss(p, cfg.tune.by) if p.done or loss_only(cfg) else None
            out.setdefault(_key(cfg, p), {})[p.cell.values[cfg.tune.axis]] = loss
    return out


def choice(cfg: ExperimentConfig, plans: list[CellPlan]) -> dict[tuple, Any]:
    """``{per values: chosen axis value}`` for the groups whose tuning cells are all done (lowest held-out loss;
    a diverged run, NaN or infinite, never wins)."""
    chosen = {}
    for key, losses in sweep(cfg, plans).items():
        if losses and all(v is not None for v in losses.values()):
            finite = {v: loss for v, loss in losses.items() if math.isfinite(loss)}
            if finite:
                chosen[key] = min(finite, key=finite.get)
    return chosen


def selected(cfg: ExperimentConfig, plan: CellPlan, chosen: dict[tuple, Any]) -> bool | None:
    """Whether ``plan`` runs at its group's chosen value (None: the group's tuning cells are not done yet)."""
    key = _key(cfg, plan)
    if key not in chosen:
        return None
    return plan.cell.values[cfg.tune.axis] == chosen[key]


def active(cfg: ExperimentConfig, plans: list[CellPlan]) -> list[CellPlan]:
    """The cells that count: all of them without tuning; else the tuning cells and the cells at a chosen value --
    with :func:`loss_only`, a tuning cell at a value not chosen only while its group's choice is not known (or where
    an earlier run evaluated it in full: it is done)."""
    if not cfg.tune.axis:
        return plans
    first, chosen, light = first_values(plans), choice(cfg, plans), loss_only(cfg)
    return [
        p
        for p in plans
        if selected(cfg, p, chosen)
        or (is_tuning(cfg, p, first) and (not light or p.done or _key(cfg, p) not in chosen))
    ]


def control_point(cfg: ExperimentConfig, plans: list[CellPlan], plan: CellPlan) -> dict[str, Any] | None:
    """The grid point of the control that calibrates ``plan``'s attacks: its own point; where every arm is tuned on
    its own cells (``arm`` in ``per``), its point with the tuned axis at the *control's* choice for its group, so an
    arm is read against the control run the report pairs it with, at every seed and whatever rate the arm chose
    (None while that choice is not known: the control's tuning cells are not all done)."""
    if not cfg.tune.axis or ARM not in cfg.tune.per or not any(p.cell.control for p in plans):
        return dict(plan.cell.values)
    key = tuple(CONTROL if a == ARM else plan.cell.values[a] for a in cfg.tune.per)
    chosen = choice(cfg, plans)
    return {**plan.cell.values, cfg.tune.axis: chosen[key]} if key in chosen else None


def interior(values: list[Any], chosen: Any) -> bool | None:
    """Whether the grid ``values`` (numbers) hold one on each side of ``chosen``: the optimum is bracketed, not at
    the grid's edge (None without a choice, or for values that do not order)."""
    if chosen is None:
        return None
    try:
        return min(values) < chosen < max(values)
    except TypeError:
        return None


def summary(cfg: ExperimentConfig, plans: list[CellPlan]) -> dict | None:
    """The ``tune`` block of results.json: the axis, the metric and per group every value's loss, the choice and
    whether the grid brackets it (``interior``)."""
    if not cfg.tune.axis:
        return None
    chosen = choice(cfg, plans)
    groups = [
        {
            "per": dict(zip(cfg.tune.per, key)),
            "losses": {str(v): loss for v, loss in losses.items()},
            "chosen": chosen.get(key),
            "interior": interior(list(losses), chosen.get(key)),
        }
        for key, losses in sweep(cfg, plans).items()
    ]
    return {"axis": cfg.tune.axis, "by": cfg.tune.by, "per": cfg.tune.per, "groups": groups}
