"""The typed summary of one finished cell (:class:`CellSummary`, an entry of ``results.json``'s ``cells``) and the
:class:`Study` the report sections compute from.

A cell summary is built from the cell's files only (``goldfish.experiment.collect``), written into ``results.json``
with :meth:`CellSummary.to_json` (the grid axes' values beside the fields, one key each) and read back by every
section's renderer with :meth:`CellSummary.from_json`, so a renderer reads typed attributes and a report re-renders
from ``results.json`` alone. Every field is documented in ``goldfish/experiment/SCHEMA.md`` (section ``cells``); a
field a cell did not compute is ``null``. :class:`CellSummary` composes the fields every cell has
(:class:`CellCore`) with each per-cell analysis's part (``part`` of every entry of
:data:`goldfish.experiment.analyses.ANALYSES`), flat: one key per field in ``results.json``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from .analyses import ANALYSES
from .config import ExperimentConfig
from .plan import CellPlan


@dataclasses.dataclass
class CellCore:
    """What every cell's summary holds beside the analyses' parts (``goldfish/experiment/SCHEMA.md``, section
    ``cells``); :class:`CellSummary` is this with every part of :data:`~goldfish.experiment.analyses.ANALYSES`."""

    cell: str
    arm: str
    values: dict[str, Any] = dataclasses.field(default_factory=dict)  # grid axis label -> value (JSON: top level)
    # training (train/summary.json, metrics.jsonl)
    params: int | None = None
    tokens_seen: int | None = None
    train_time_s: float | None = None
    steps: int | None = None
    kept_tokens: int | None = None
    dropped_tokens: int | None = None
    final_kept_loss: float | None = None
    final_dropped_loss: float | None = None
    # extraction over the member windows (eval's summary)
    n_windows: int | None = None
    exact_match_rate: float | None = None
    exact_match_ci_low: float | None = None
    exact_match_ci_high: float | None = None
    rouge_l_paper: float | None = None
    rouge_l: float | None = None
    token_match: float | None = None
    # eval's adaptive extraction attacks (decoding.beam > 1, decoding.samples > 0)
    beam_exact_match_rate: float | None = None
    beam_exact_match_rate_ci_low: float | None = None
    beam_exact_match_rate_ci_high: float | None = None
    sample_rate: float | None = None
    sample_rate_ci_low: float | None = None
    sample_rate_ci_high: float | None = None
    beam_width: int | None = None
    n_samples: int | None = None
    sample_temperature: float | None = None
    sample_any_rate: float | None = None
    sample_any_rate_ci_low: float | None = None
    sample_any_rate_ci_high: float | None = None
    adversary: dict | None = None
    # membership: every attack's AUC, held-out loss (the attacks analysis's own fields: its part)
    mia_aucs: dict[str, float | None] = dataclasses.field(default_factory=dict)
    # every attack's TPR at 1 % and 0.1 % FPR ({attack: {tpr_at_1pct_fpr, tpr_at_0_1pct_fpr}}); None in results
    # written before it (then only the headline attack's TPR is known)
    mia_tprs: dict[str, dict] | None = None
    heldout_loss: float | None = None
    heldout_loss_ci: list | None = None
    heldout_ppl: float | None = None
    member_loss: float | None = None
    mia_auc_loss: float | None = None
    # the headline attack (mia_attack) and its exact statistics
    mia_attack: str | None = None
    mia_auc: float | None = None
    mia_auc_ci_low: float | None = None
    mia_auc_ci_high: float | None = None
    mia_tpr_at_1pct_fpr: float | None = None
    mia_roc: dict | None = None
    mia_auc_ci: list | None = None
    mia_auc_p: dict | None = None
    mia_tpr_at_1pct_fpr_note: str | None = None
    mia_tpr_at_0_1pct_fpr: float | None = None
    mia_tpr_at_0_1pct_fpr_note: str | None = None
    extraction_ci: dict | None = None
    # strata
    by_prefix_len: dict | None = None
    by_repetitions: dict | None = None
    strata: list[dict] = dataclasses.field(default_factory=list)
    # where the numbers came from
    exposures: dict | None = None
    precision: str | None = None
    eval_precision: str | None = None
    device: dict | None = None
    versions: dict | None = None
    git: str | None = None
    code: str | None = None
    # per-target losses (the size sweep's loss gaps), canaries, per-stratum attacks
    target_losses: dict | None = None
    target_losses_by_split: dict | None = None
    canaries: dict | None = None
    start_model: str | None = None
    nonmembers: int | None = None
    stratum_extraction: dict | None = None
    stratum_membership: dict | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``results.json`` entry: ``cell``, ``arm``, one key per grid axis, then every other field."""
        out: dict[str, Any] = {"cell": self.cell, "arm": self.arm, **self.values}
        out.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                    if f.name not in ("cell", "arm", "values")})
        return out

    @classmethod
    def from_json(cls, entry: dict[str, Any], axes: Sequence[str]) -> "CellCore":
        """A ``results.json`` entry read back (``axes``: the grid axes, results.json's ``axes``); keys a summary
        does not know are left out."""
        names = {f.name for f in dataclasses.fields(cls)} - {"values"}
        return cls(values={a: entry.get(a) for a in axes}, **{k: v for k, v in entry.items() if k in names})

    def label(self, axes: Sequence[str], one_per_arm: bool) -> str:
        """``goldfish`` for the demo; ``goldfish model=llama-10M seed=0`` when the grid has axes."""
        if one_per_arm or not axes:
            return self.arm
        return self.arm + " " + " ".join(f"{a}={self.values.get(a)}" for a in axes)


def compose(core: type, parts: Sequence[type]) -> type:
    """``core``'s dataclass with every field of ``parts`` after its own (their names are results.json's flat cell
    keys, so no two may share one)."""
    names = [f.name for f in dataclasses.fields(core)]
    fields = []
    for part in parts:
        for f in dataclasses.fields(part):
            if f.name in names:
                raise TypeError(f"{part.__name__}.{f.name}: a cell summary field already")
            names.append(f.name)
            fields.append((f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory)))
    return dataclasses.make_dataclass("CellSummary", fields, bases=(core,), namespace={"__module__": __name__})


# Everything known about one finished cell: the core fields and every analysis's part, flat (SCHEMA.md, ``cells``)
CellSummary = compose(CellCore, [a.part for a in ANALYSES])


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
