"""A training run folder, its files named once: what ``goldfish train`` writes into its ``out`` folder and what the
CLI, evaluation (a model given as a run folder, the adversary's mask), series evaluation and an experiment's cells
read back (ARCHITECTURE.md, "Trainer <-> evaluation"). No torch: the data-free layers read it too."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, ClassVar

from .io import read_json


@dataclasses.dataclass(frozen=True)
class TrainRun:
    """The files of the training run folder ``path``: ``model/`` (Hugging Face format, with its ``README.md`` card),
    ``summary.json`` (written last), ``metrics.jsonl`` (one record per logged step), ``mask.json`` (the resolved
    Goldfish mask, ``goldfish.train_config.write_mask_settings``), ``config.yaml`` (the resolved train config) and
    ``checkpoints/``."""

    path: Path
    MODEL: ClassVar[str] = "model"
    SUMMARY: ClassVar[str] = "summary.json"
    METRICS: ClassVar[str] = "metrics.jsonl"
    MASK: ClassVar[str] = "mask.json"
    CONFIG: ClassVar[str] = "config.yaml"
    CHECKPOINTS: ClassVar[str] = "checkpoints"

    def __init__(self, path: str | os.PathLike) -> None:
        object.__setattr__(self, "path", Path(path))

    @property
    def model(self) -> Path:
        """The exported model (Hugging Face format)."""
        return self.path / self.MODEL

    @property
    def summary(self) -> Path:
        """``summary.json``: written last, so a run folder with one (and its model) is finished."""
        return self.path / self.SUMMARY

    @property
    def metrics(self) -> Path:
        """The per-step log, ``metrics.jsonl``."""
        return self.path / self.METRICS

    @property
    def mask(self) -> Path:
        """The Goldfish mask training applied, ``mask.json``."""
        return self.path / self.MASK

    @property
    def config(self) -> Path:
        """The resolved train config, ``config.yaml``."""
        return self.path / self.CONFIG

    @property
    def checkpoints(self) -> Path:
        """The folder of the run's checkpoints."""
        return self.path / self.CHECKPOINTS

    def has_model(self) -> bool:
        """Whether the run has exported its model (a Hugging Face ``config.json`` in ``model/``)."""
        return (self.model / "config.json").is_file()

    def finished(self) -> bool:
        """Whether the run is finished: its summary, written last, and its exported model."""
        return self.summary.is_file() and self.has_model()

    def read_summary(self) -> dict[str, Any]:
        """The run's summary (``{}`` before it has one); a damaged one is one line naming it."""
        return read_json(self.summary, {}, expect=dict, fix="restore it, or train the run again")
