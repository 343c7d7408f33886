"""What a per-cell analysis is (:class:`Analysis`): the phase it runs after evaluation (when it applies, the file it
writes into the cell folder), its typed part of the cell summary (a dataclass of flat ``results.json`` cell keys,
read from that file) and the report section it renders. One module of :mod:`goldfish.experiment.analyses` holds one
analysis whole; the registry :data:`goldfish.experiment.analyses.ANALYSES` lists them, and the runner's phases, the
cell summary (``goldfish.experiment.summary.CellSummary`` composes the parts), ``summary.json`` and the report take
every analysis from it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from ..plan import CellFolder, CellPlan


def summary_key(place: int, csv: int | None = None, **field: Any) -> Any:
    """A cell summary field that ``summary.json`` lists (``dataclasses.field`` with ``metadata={"summary": place}``;
    default None unless ``default_factory`` is given): ``place`` is its position among a cell's keys there (the
    order committed studies' summary.json re-render in, byte for byte: ``goldfish.experiment.summary.summary_keys``
    sorts by it); ``csv``, where given, its position among the cell columns of every results.csv row
    (``goldfish.experiment.summary.csv_keys``)."""
    if "default_factory" not in field:
        field.setdefault("default", None)
    metadata = {"summary": place} if csv is None else {"summary": place, "csv": csv}
    return dataclasses.field(metadata=metadata, **field)


def listed(part: type) -> tuple[str, ...]:
    """The fields of ``part`` that summary.json lists (:func:`summary_key`), in their place's order."""
    return tuple(
        f.name
        for f in sorted(
            (f for f in dataclasses.fields(part) if "summary" in f.metadata), key=lambda f: f.metadata["summary"]
        )
    )


class Cell(Protocol):
    """What an analysis's renderer may read of a cell: a typed ``goldfish.experiment.summary.CellSummary`` (every
    field of SCHEMA.md's ``cells``, its own part's included, as attributes; these are the ones used here)."""

    cell: str
    arm: str
    values: dict[str, Any]
    by_prefix_len: dict | None
    strata: list[dict]

    def label(self, axes: Sequence[str], one_per_arm: bool) -> str: ...


@dataclasses.dataclass(frozen=True)
class Section:
    """An analysis's report section: ``render(results, cells) -> str`` (Markdown, "" where it does not apply; a pure
    function of ``results.json``, ``cells`` its typed cell summaries), placed right after the report section
    ``after`` (a module name of :mod:`goldfish.experiment.sections`)."""

    after: str
    render: Callable[[dict, Sequence[Cell]], str]


@dataclasses.dataclass(frozen=True)
class Others:
    """What an analysis that reads other cells' files (``Analysis.reads_control``) gets beside its own cell: every
    cell of the study (``plans``) and the control that calibrates this one (``control``: the control of its grid point,
    ``goldfish.experiment.tune.control_point``; None: none). Its phase waits until that control is done."""

    plans: Sequence[CellPlan]
    control: CellPlan | None


@dataclasses.dataclass(frozen=True)
class Analysis:
    """One per-cell analysis.

    * ``name``: its phase's name (``cell.json`` records ``<name>_s``);
    * ``output(folder)``: the file it writes into the cell's folder (``plan.CellFolder``); the phase is done once it
      exists (an analysis that does not apply to a cell writes none);
    * ``applies(plan)``: whether the cell has it; ``run(plan, model)`` writes ``output`` from the cell's shared model
      handle (``goldfish.eval.loading.SharedModel``), after evaluation; ``reads_control``: it also reads the files of
      the control of its grid point (the attacks' reference, the leakage audit): ``run(plan, model, others)`` gets
      :class:`Others`, and its phase waits for that control;
    * ``part``: a dataclass whose fields (each with a default: what a cell without the file gets) are its flat keys
      of ``results.json``'s cells (SCHEMA.md, section ``cells``); ``collect(plan)`` reads them from ``output``;
      ``summary_keys``: those of its fields ``summary.json`` lists, after the core's (a field declared with
      :func:`summary_key` has its own place among them: ``listed(part)``);
    * ``sections``: its report sections;
    * ``tuning``: it computes what a tuning cell is read for (``goldfish.experiment.tune``: the validation loss),
      so a tuning cell that computes only that runs it;
    * ``headlines(cell)``: its per-run numbers the across-run section (``goldfish.experiment.sections.runs``) reads
      beside the core headlines, ``{name: (value, match)}``: reported per run, over runs and paired by replicate,
      a pair kept only where both cells' ``match`` agree (e.g. the sha256 of the documents scored; None: always);
      ``margins(cfg)``: ``{name: equivalence margin}`` stated in the experiment config (two one-sided t tests of
      the paired differences over the replicates).
    """

    name: str
    output: Callable[[CellFolder], Path]
    applies: Callable[[CellPlan], bool]
    run: Callable[[CellPlan, Any], Any]
    part: type
    collect: Callable[[CellPlan], Any]
    summary_keys: tuple[str, ...] = ()
    sections: tuple[Section, ...] = ()
    headlines: Callable[[Any], dict[str, tuple[float | None, str | None]]] | None = None
    margins: Callable[[Any], dict[str, float]] | None = None
    tuning: bool = False
    reads_control: bool = False
