"""The grid: an experiment's arms x the cross product of its axes -> cells (:func:`expand_cells`), each with its
dotted overrides routed to the data / train / eval / hardware sections (:func:`split_overrides`). The grammar of the
axes (a dotted key and its values, or a named axis of linked settings with one label per item) is in
:mod:`goldfish.experiment.config`'s docstring."""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Any, Protocol

from ..config import flatten, shown
from ..errors import ConfigError

SECTIONS = ("data", "train", "eval", "hardware")
CONTROL = "control"  # the arm name of the control cells
CELL_KEYS = ("base_model",)  # keys an arm or grid item may set besides the dotted section keys
_GENERIC_KEYS = {"name", "path", "type", "value", "values"}


class Design(Protocol):
    """What :func:`expand_cells` reads of an experiment (an ``ExperimentConfig``): its arms, grid and control flag."""

    arms: dict[str, dict[str, Any]]
    grid: dict[str, Any]
    control: bool


@dataclasses.dataclass
class Cell:
    """One point of the grid: an arm plus one value per axis. ``overrides`` are dotted keys incl. the section."""

    id: str
    arm: str
    values: dict[str, Any]  # axis label -> value shown in tables (e.g. {"model": "llama-10M", "seed": 0})
    overrides: dict[str, Any]  # "train.loss.goldfish.k" -> 4, ...
    control: bool = False  # a control cell: nothing is trained, the starting model is evaluated


def _axis_label(key: str) -> str:
    """``train.model.name`` -> ``model``; ``train.seed`` -> ``seed``: the last non-generic component."""
    parts = key.split(".")
    for part in reversed(parts):
        if part not in _GENERIC_KEYS:
            return part
    return parts[-1]


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "-", text).strip("-") or "x"


def axis_label(axis: str) -> str:
    """The label of a grid axis as cells show it: a named axis's own name, a dotted key's last specific part."""
    return _axis_label(axis) if "." in axis else axis


def shown_values(axis: str, values: Any) -> list[str]:
    """The values of a grid axis as cells show them (labels of a named axis), as text; [] for an invalid axis."""
    try:
        return [str(shown) for _, shown, _ in _axis_points(axis, list(values or []))[1]]
    except ConfigError:
        return []


def _axis_points(axis: str, values: list) -> tuple[str, list[tuple[str, Any, dict[str, Any]]]]:
    """(label, [(id part, shown value, overrides)]) for one grid axis."""
    if "." in axis or axis in CELL_KEYS:  # a dotted key (or base_model) and scalar (or list) values
        label = _axis_label(axis)
        return label, [(f"{label}={_safe(str(v))}", v, {axis: v}) for v in values]
    points = []
    for i, item in enumerate(values):
        if not isinstance(item, dict):
            raise ConfigError(
                f"grid.{axis}[{i}]={shown(item)}: a named axis (no dot in '{axis}') takes mappings of "
                f"dotted keys, e.g. - {{label: 7b, train.model.name: llama2-7B}}; or use a dotted key "
                f"as the axis"
            )
        item = dict(item)
        label = str(item.pop("label", i))
        points.append((f"{axis}={_safe(label)}", label, flatten(item)))
    return axis, points


def expand_cells(cfg: Design) -> list[Cell]:
    """Arms x the cross product of the grid axes, grid-major (so both arms of a grid point finish together).

    With ``control``, each grid point starts with a ``control`` cell: the grid point's settings, no arm overrides.
    """
    arms = cfg.arms or {"base": {}}
    if cfg.control:
        arms = {CONTROL: {}, **arms}
    axes = [_axis_points(axis, values) for axis, values in cfg.grid.items()]
    cells = []
    for combo in itertools.product(*[points for _, points in axes]):
        for arm, arm_overrides in arms.items():
            overrides = dict(arm_overrides)
            values: dict[str, Any] = {}
            parts = [arm]
            for (label, _), (part, value, axis_overrides) in zip(axes, combo):
                overrides.update(axis_overrides)
                values[label] = value
                parts.append(part)
            cells.append(
                Cell(
                    id="__".join(parts),
                    arm=arm,
                    values=values,
                    overrides=overrides,
                    control=cfg.control and arm == CONTROL,
                )
            )
    ids = [c.id for c in cells]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ConfigError(f"grid gives duplicate cell ids {dupes}; give the axis items distinct labels")
    return cells


def split_overrides(overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Route dotted keys to their section: ``{"train": {"loss.type": ...}, "data": {...}, ...}``."""
    routed: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    bad = []
    for key, value in overrides.items():
        if key in CELL_KEYS:  # not a section key: read by plan_cell
            continue
        section, _, rest = key.partition(".")
        if section not in routed or not rest:
            bad.append(key)
            continue
        routed[section][rest] = value
    if bad:
        raise ConfigError(
            f"override keys {bad} must start with one of {', '.join(s + '.' for s in SECTIONS)} "
            f"(e.g. train.loss.type), or be one of {', '.join(CELL_KEYS)}"
        )
    return routed
