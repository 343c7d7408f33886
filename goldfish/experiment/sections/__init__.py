"""The study report's sections, in report order.

Each section is one module with two functions:

* ``compute(study: goldfish.experiment.summary.Study) -> dict``: what the section needs beyond the cell summaries,
  computed from the cells' files only (``{}`` when the summaries suffice); its keys are merged into
  ``results.json`` (documented in goldfish/experiment/SCHEMA.md);
* ``render(results: dict) -> str``: the section's Markdown ("" where it does not apply), a pure function of
  ``results.json``, so a report re-renders from the results alone (``goldfish.experiment.report.render``).

Adding a section is one new module here and its place in :data:`SECTIONS` (ARCHITECTURE.md, "Where to add").
"""

from __future__ import annotations

from . import (adaptive, adversary, by_stratum, examples, figures, headline, leakage, mask_baseline, mia_by_exposure,
               overview, paired, paired_axis, paper, repetition1, size, spread, strata, stream, threshold)

# report order; ``overview`` (the header) renders always, the others once a cell has finished
SECTIONS = (overview, headline, paper, spread, size, stream, strata, threshold, mia_by_exposure, leakage, paired,
            paired_axis, adaptive, adversary, by_stratum, repetition1, mask_baseline, figures, examples)
