"""The per-cell analyses: one module each (:class:`~goldfish.experiment.analyses.base.Analysis`: its phase and output
file, its part of the cell summary, its report sections), listed once in :data:`ANALYSES`, in the order their phases
run (after evaluation; one that reads its control's files, the attacks analysis, after the others). Adding one is a
new module here and its line below (ARCHITECTURE.md, "Where to add").
"""

from __future__ import annotations

from .attacks import ATTACKS
from .base import Analysis, Cell, Others, Section
from .exposure import EXPOSURE
from .kbaseline import K_BASELINE
from .utility import UTILITY
from .values import VALUES

ANALYSES: tuple[Analysis, ...] = (
    K_BASELINE,
    EXPOSURE,
    UTILITY,
    ATTACKS,
    VALUES,
)

__all__ = ["ANALYSES", "Analysis", "Cell", "Others", "Section"]
