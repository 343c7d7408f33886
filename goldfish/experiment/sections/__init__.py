"""The study report's sections, in report order.

Each section is one module with two functions:

* ``compute(study: goldfish.experiment.summary.Study) -> dict``: what the section needs beyond the cell summaries,
  computed from the cells' files only (``{}`` when the summaries suffice); its keys are merged into
  ``results.json`` (documented in goldfish/experiment/SCHEMA.md);
* ``render(results: dict) -> str``: the section's Markdown ("" where it does not apply), a pure function of
  ``results.json``, so a report re-renders from the results alone (``goldfish.experiment.report.render``).

Adding a section is one new module here and its place in :data:`SECTIONS` (ARCHITECTURE.md, "Where to add"). A
per-cell analysis's sections (``goldfish.experiment.analyses``) join :data:`SECTIONS` from the analysis itself, each
right after the section it names.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Any, Sequence

from ..analyses import ANALYSES
from ..analyses.base import Section
from ..summary import Study, cells_of
from . import (
    adaptive,
    adversary,
    by_stratum,
    collisions,
    examples,
    figures,
    headline,
    leakage,
    membership,
    mia_by_exposure,
    mia_over_runs,
    overview,
    paired,
    paired_axis,
    paper,
    prediction,
    readings,
    repetition1,
    runs,
    size,
    spread,
    strata,
    threshold,
)


@dataclasses.dataclass(frozen=True)
class AnalysisSection:
    """An analysis's :class:`~goldfish.experiment.analyses.base.Section` as a report section: nothing to compute
    beyond its part of the cell summaries; it renders from the typed cells of ``results.json``."""

    section: Section

    def compute(self, study: Study) -> dict:
        return {}

    def render(self, results: dict) -> str:
        return self.section.render(results, cells_of(results))


def placed(sections: Sequence[ModuleType], added: Sequence[Section]) -> tuple[Any, ...]:
    """``sections`` with each of ``added`` right after the one its ``after`` names (in ``added``'s order)."""
    names = {s.__name__.rsplit(".", 1)[-1] for s in sections}
    for a in added:
        if a.after not in names:
            raise ValueError(f"an analysis's section goes after {a.after!r}: no such report section")
    out: list[Any] = []
    for s in sections:
        out.append(s)
        out += [AnalysisSection(a) for a in added if a.after == s.__name__.rsplit(".", 1)[-1]]
    return tuple(out)


# report order; ``overview`` (the header) renders always, the others once a cell has finished
SECTIONS = placed(
    (
        overview,
        readings,
        headline,
        runs,
        paper,
        spread,
        size,
        collisions,
        strata,
        threshold,
        prediction,
        mia_by_exposure,
        membership,
        mia_over_runs,
        leakage,
        paired,
        paired_axis,
        adaptive,
        adversary,
        by_stratum,
        repetition1,
        figures,
        examples,
    ),
    [s for a in ANALYSES for s in a.sections],
)
