"""The typed summary of one finished cell (:class:`CellSummary`, an entry of ``results.json``'s ``cells``) and the
:class:`Study` the report sections compute from.

A cell summary is built from the cell's files only (``goldfish.experiment.collect``), written into ``results.json``
with :meth:`CellSummary.to_json` (the grid axes' values beside the fields, one key each) and read back by every
section's renderer with :meth:`CellSummary.from_json`, so a renderer reads typed attributes and a report re-renders
from ``results.json`` alone. Every field is documented in ``goldfish/experiment/SCHEMA.md`` (section ``cells``); a
field a cell did not compute is ``null``. :class:`CellSummary` composes the fields every cell has
(:class:`CellCore`: :class:`CellId` and the typed parts of :data:`CORE_PARTS`) with each per-cell analysis's
part (``part`` of every entry of :data:`goldfish.experiment.analyses.ANALYSES`), flat: one key per field in
``results.json``; ``summary.json`` lists those declared with ``analyses.base.summary_key`` (:func:`summary_keys`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from .analyses import ANALYSES
from .analyses.base import listed, summary_key
from .config import ExperimentConfig
from .plan import CellPlan


@dataclasses.dataclass
class TrainPart:
    """Training (``train/summary.json``, ``metrics.jsonl``)."""

    params: int | None = summary_key(1, csv=1)
    tokens_seen: int | None = summary_key(2, csv=2)
    train_time_s: float | None = summary_key(5, csv=4)
    steps: int | None = summary_key(6)
    kept_tokens: int | None = summary_key(3, csv=3)
    dropped_tokens: int | None = summary_key(4)
    final_kept_loss: float | None = summary_key(37, csv=8)
    final_dropped_loss: float | None = summary_key(38, csv=9)


@dataclasses.dataclass
class ExtractionPart:
    """Extraction over the member windows (eval's summary) and eval's adaptive extraction attacks
    (``decoding.beam > 1``, ``decoding.samples > 0``, the mask-consistent adversary)."""

    n_windows: int | None = summary_key(7)
    exact_match_rate: float | None = summary_key(8)
    exact_match_ci_low: float | None = summary_key(45)
    exact_match_ci_high: float | None = summary_key(46)
    rouge_l_paper: float | None = summary_key(9)
    rouge_l: float | None = summary_key(10)
    token_match: float | None = summary_key(11)
    beam_exact_match_rate: float | None = summary_key(48)
    beam_exact_match_rate_ci_low: float | None = summary_key(49)
    beam_exact_match_rate_ci_high: float | None = summary_key(50)
    sample_rate: float | None = summary_key(51)
    sample_rate_ci_low: float | None = summary_key(52)
    sample_rate_ci_high: float | None = summary_key(53)
    beam_width: int | None = summary_key(54)
    n_samples: int | None = summary_key(55)
    sample_temperature: float | None = summary_key(56)
    sample_any_rate: float | None = summary_key(57)
    sample_any_rate_ci_low: float | None = summary_key(58)
    sample_any_rate_ci_high: float | None = summary_key(59)
    adversary: dict | None = summary_key(60)


@dataclasses.dataclass
class MembershipPart:
    """Membership: every attack's AUC and TPRs, the held-out loss (the attacks analysis's own fields: its part)."""

    mia_aucs: dict[str, float | None] = summary_key(22, default_factory=dict)
    # every attack's TPR at 1 % and 0.1 % FPR ({attack: {tpr_at_1pct_fpr, tpr_at_0_1pct_fpr}}); None in results
    # written before it (then only the headline attack's TPR is known)
    mia_tprs: dict[str, dict] | None = summary_key(23)
    heldout_loss: float | None = summary_key(39, csv=10)
    heldout_loss_ci: list | None = summary_key(40)
    heldout_ppl: float | None = summary_key(41, csv=11)
    member_loss: float | None = summary_key(42)
    mia_auc_loss: float | None = summary_key(24)


@dataclasses.dataclass
class HeadlinePart:
    """The headline attack (``mia_attack``) and the cell's exact statistics (``inference.cell_statistics``)."""

    mia_attack: str | None = summary_key(12)
    mia_auc: float | None = summary_key(13, csv=5)
    mia_auc_ci_low: float | None = summary_key(15, csv=6)
    mia_auc_ci_high: float | None = summary_key(16, csv=7)
    mia_tpr_at_1pct_fpr: float | None = summary_key(18)
    mia_roc: dict | None = None
    mia_auc_ci: list | None = summary_key(14)
    mia_auc_p: dict | None = summary_key(17)
    mia_tpr_at_1pct_fpr_note: str | None = summary_key(19)
    mia_tpr_at_0_1pct_fpr: float | None = summary_key(20)
    mia_tpr_at_0_1pct_fpr_note: str | None = summary_key(21)
    extraction_ci: dict | None = summary_key(47)


@dataclasses.dataclass
class StrataPart:
    """Extraction per prefix length, per repetition stratum and per (prefix, stratum)."""

    by_prefix_len: dict | None = summary_key(43)
    by_repetitions: dict | None = summary_key(44)
    strata: list[dict] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ProvenancePart:
    """Where the numbers came from."""

    exposures: dict | None = None
    precision: str | None = summary_key(62)
    eval_precision: str | None = summary_key(63)
    device: dict | None = summary_key(64)
    versions: dict | None = None
    git: str | None = None
    code: str | None = None


@dataclasses.dataclass
class DetailPart:
    """Per-target losses (the size sweep's loss gaps), canaries, per-stratum attacks."""

    target_losses: dict | None = None
    target_losses_by_split: dict | None = None
    canaries: dict | None = None
    start_model: str | None = None
    nonmembers: int | None = None
    stratum_extraction: dict | None = None
    stratum_membership: dict | None = None


# the typed parts every cell's summary holds, in results.json's order
CORE_PARTS: tuple[type, ...] = (
    TrainPart,
    ExtractionPart,
    MembershipPart,
    HeadlinePart,
    StrataPart,
    ProvenancePart,
    DetailPart,
)


@dataclasses.dataclass
class CellId:
    """Which cell a summary is of, and its reading and writing as a ``results.json`` entry; :class:`CellCore` is this
    with every part of :data:`CORE_PARTS`, :class:`CellSummary` that with every part of
    :data:`~goldfish.experiment.analyses.ANALYSES` (``goldfish/experiment/SCHEMA.md``, section ``cells``)."""

    cell: str = dataclasses.field(metadata={"summary": 0})  # summary.json's first key (summary_key's place 0)
    arm: str
    values: dict[str, Any] = dataclasses.field(default_factory=dict)  # grid axis label -> value (JSON: top level)

    def to_json(self) -> dict[str, Any]:
        """The ``results.json`` entry: ``cell``, ``arm``, one key per grid axis, then every other field."""
        out: dict[str, Any] = {"cell": self.cell, "arm": self.arm, **self.values}
        out.update(
            {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("cell", "arm", "values")}
        )
        return out

    @classmethod
    def from_json(cls, entry: dict[str, Any], axes: Sequence[str]) -> "CellId":
        """A ``results.json`` entry read back (``axes``: the grid axes, results.json's ``axes``); keys a summary
        does not know are left out."""
        names = {f.name for f in dataclasses.fields(cls)} - {"values"}
        return cls(values={a: entry.get(a) for a in axes}, **{k: v for k, v in entry.items() if k in names})

    def label(self, axes: Sequence[str], one_per_arm: bool) -> str:
        """``goldfish`` for the demo; ``goldfish model=llama-10M seed=0`` when the grid has axes."""
        if one_per_arm or not axes:
            return self.arm
        return self.arm + " " + " ".join(f"{a}={self.values.get(a)}" for a in axes)


def compose(core: type, parts: Sequence[type], name: str = "CellSummary") -> type:
    """``core``'s dataclass with every field of ``parts`` after its own, named ``name`` (their names are
    results.json's flat cell keys, so no two may share one; each keeps its metadata: :func:`summary_key`)."""
    names = [f.name for f in dataclasses.fields(core)]
    fields = []
    for part in parts:
        for f in dataclasses.fields(part):
            if f.name in names:
                raise TypeError(f"{part.__name__}.{f.name}: a cell summary field already")
            names.append(f.name)
            fields.append(
                (
                    f.name,
                    f.type,
                    dataclasses.field(default=f.default, default_factory=f.default_factory, metadata=f.metadata),
                )
            )
    return dataclasses.make_dataclass(name, fields, bases=(core,), namespace={"__module__": __name__})


# What every cell's summary holds beside the analyses' parts: the cell and the core parts, flat
CellCore = compose(CellId, CORE_PARTS, "CellCore")
# Everything known about one finished cell: the core fields and every analysis's part, flat (SCHEMA.md, ``cells``)
CellSummary = compose(CellCore, [a.part for a in ANALYSES])


def summary_keys() -> tuple[str, ...]:
    """A cell's keys in ``summary.json``: the fields of :data:`CellSummary` declared with
    :func:`~goldfish.experiment.analyses.base.summary_key`, in their places' order, then every analysis's
    ``summary_keys`` not among them (in :data:`~goldfish.experiment.analyses.ANALYSES`'s order)."""
    placed = listed(CellSummary)
    return (*placed, *dict.fromkeys(k for a in ANALYSES for k in a.summary_keys if k not in placed))


def csv_keys() -> tuple[str, ...]:
    """The cell's columns in every results.csv row: the fields declared with ``summary_key(..., csv=n)``, by n."""
    found = [(f.metadata["csv"], f.name) for f in dataclasses.fields(CellSummary) if "csv" in f.metadata]
    return tuple(name for _, name in sorted(found))


def cells_of(results: dict) -> list[CellSummary]:
    """The typed cell summaries of a ``results.json``."""
    return [CellSummary.from_json(c, results.get("axes") or []) for c in results.get("cells") or []]


def one_per_arm(cells: Sequence[CellSummary]) -> bool:
    """Whether each arm has a single cell (the demo): then a cell is labelled by its arm alone."""
    return len({c.arm for c in cells}) == len(cells)


@dataclasses.dataclass
class Study:
    """What the report sections compute from (``compute(study) -> dict``): the experiment, the cells that count
    (``plans``; with ``tune``, the tuning cells and those at a chosen value), the finished ones among them
    (``done``) with their summaries (``cells``, in the same order), the tuning choice (``tune``, results.json's
    ``tune`` block) and the results assembled so far (``results``: the sections before this one have added to it)."""

    cfg: ExperimentConfig
    plans: list[CellPlan]
    done: list[CellPlan]
    cells: list[CellSummary]
    tune: dict | None
    results: dict[str, Any]

    @property
    def axes(self) -> list[str]:
        return list(self.plans[0].cell.values) if self.plans else []
