"""A cell's training summary, typed: what the experiment reads of (and, for a control that trains nothing, writes as)
``train/summary.json`` -- the trainer's own names (``goldfish.train``'s ``summary.json``: ``steps``, ``tokens``,
``params``, ``train_time_s``, ``precision``, ``device``, ``exposures``), one spelling each."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..io import atomic_write_json, read_json


@dataclasses.dataclass(frozen=True)
class TrainSummary:
    """The numbers a cell summary takes from training. ``params``: the trained model's parameter count (None for a
    control, whose count the evaluation records); ``tokens``: tokens read; ``train_time_s``: seconds inside optimizer
    steps over every session; ``precision``: as the trainer resolved it; ``exposures``: times each labelled
    repetition count was read (``{r: [min, max]}``); ``control``: a control cell that trained nothing (zero steps and
    tokens, ``model`` the one it evaluates)."""

    steps: int | None = None
    tokens: int | None = None
    params: int | None = None
    train_time_s: float | None = None
    precision: str | None = None
    device: dict | None = None
    exposures: dict | None = None
    control: bool = False
    model: str | None = None

    @classmethod
    def read(cls, path: Path) -> "TrainSummary":
        """The summary in ``path`` (the trainer's other keys are left out)."""
        found = read_json(path)
        return cls(**{f.name: found[f.name] for f in dataclasses.fields(cls) if f.name in found})

    @classmethod
    def untrained(cls, model: str) -> "TrainSummary":
        """A control cell's: no steps, no tokens, the starting model it evaluates."""
        return cls(steps=0, tokens=0, control=True, model=model)

    def write(self, path: Path) -> None:
        """A control's summary as the trainer would name it: its non-null fields."""
        atomic_write_json(path, {k: v for k, v in self.to_json().items() if v is not None and v is not False})

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
