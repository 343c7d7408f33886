"""A cell's exposure counts, the whole analysis: its ``exposure.json``, what its model read in training, counted from
the rows the trainer consumed, and its loss on the validation documents (what a learning rate is tuned on); the cell
summary's ``stream``, ``reads`` and ``validation_loss`` (:class:`ExposureSummary`); and the report section on the
training stream.

The trainer reads the rows :func:`goldfish.data.order.consumed_rows` lists (the same function its own summary's
``exposures`` come from); over those rows this phase counts, per document of the training data, how many times it
started (a copy read) and how many of its tokens were read, and sums them by kind:

* ``stream``: ``{tokens, members, canaries, background}`` tokens read (EOS included with the document it ends) and
  ``member_share`` / ``canary_share``: the targets' (canaries') share of the training tokens actually read;
* ``reads``: ``{"members" | "canaries": {labelled repetitions: [fewest, most] copies read}}`` -- with one epoch a
  target labelled x r is read exactly r times (a control trained on the background alone reads 0);
* ``validation_loss``: mean over the validation documents (``data.num_validation``) of their mean per-token NLL
  under the cell's model (the cell's shared model, scored as eval's membership section scores: its window, stride,
  token budget and chunk), and ``validation_documents``; absent without a validation split.

Document ids in the rows: member k -> k, background b -> M + b, canary c -> M + B + c (``goldfish.data.prepare``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from goldfish.eval.scoring import scoring_window, token_statistics
from goldfish.eval.tables import markdown_section, pct

from ...data import load_prepared
from ...data.order import consumed_rows
from ...io import atomic_write_json, read_json
from ...train_config import make_plan
from ..plan import CellFolder, CellPlan
from .base import Analysis, Cell, Section


def exposure_file(folder: CellFolder) -> Path:
    """What the cell's model read, and its validation loss: ``exposure.json``."""
    return folder.dir / "exposure.json"


def _by_label(reads: np.ndarray, labels: np.ndarray) -> dict[str, list[int]]:
    return {str(int(r)): [int(reads[labels == r].min()), int(reads[labels == r].max())] for r in np.unique(labels)}


def stream_numbers(prepared, consumed: np.ndarray, labels: dict[str, np.ndarray]) -> dict[str, Any]:
    """``stream`` and ``reads`` (module docstring) of the rows ``consumed`` of ``prepared``'s train split;
    ``labels``: the members' and canaries' labelled repetitions (the evaluation data's, which a background-only
    training folder shares)."""
    m, c = len(labels["members"]), len(labels["canaries"])
    b = int(prepared.manifest["counts"].get("background", 0))
    starts, tokens = prepared.train.reads(consumed, m + b + c)
    parts = {"members": tokens[:m].sum(), "background": tokens[m : m + b].sum(), "canaries": tokens[m + b :].sum()}
    total = int(tokens.sum())
    out: dict[str, Any] = {
        "stream": {
            "tokens": total,
            **{k: int(v) for k, v in parts.items()},
            "member_share": parts["members"] / total if total else None,
            "canary_share": parts["canaries"] / total if total else None,
        },
        "reads": {"members": _by_label(starts[:m], labels["members"])},
    }
    if c:
        out["reads"]["canaries"] = _by_label(starts[m + b :], labels["canaries"])
    return out


def _consumed(plan: CellPlan, prepared) -> np.ndarray:
    """The row indices the cell's training read, in order (what the trainer itself counts in its summary)."""
    cfg = plan.train_cfg
    # dp = 1: data parallelism only splits a step's rows
    steps = make_plan(cfg.schedule, cfg.optim, len(prepared.train), prepared.train.seq_len, 1)
    return consumed_rows(steps, cfg.seed, cfg.data.shuffle)


def validation_loss(model: Any, prepared, membership: Any) -> dict[str, Any]:
    """Mean per-document NLL (nats/token) of the validation split under ``model`` (a handle with ``get()``:
    ``goldfish.eval.loading.SharedModel``), scored with eval's ``membership`` section's window, stride, token budget
    and chunk; {} without a validation split (nothing loaded)."""
    if prepared.validation is None or len(prepared.validation) == 0:
        return {}

    loaded = model.get()
    stats = token_statistics(
        loaded,
        [list(x) for x in prepared.validation["input_ids"]],
        progress=False,
        window=scoring_window(membership.window, loaded),
        stride=membership.stride,
        token_budget=membership.token_budget,
        chunk=membership.chunk,
        desc="validation loss",
    )
    nll = [-float(np.mean(st.logp)) for st in stats]
    return {"validation_loss": float(np.mean(nll)), "validation_documents": len(nll)}


def write_exposure(plan: CellPlan, model: Any) -> dict[str, Any]:
    """Compute and write the cell's ``exposure.json`` (module docstring); ``model``: the cell's shared model
    handle."""
    evaluated = load_prepared(plan.data_dir, verify=False)
    labels = {
        "members": np.asarray(evaluated.members["repetitions"]),
        "canaries": np.asarray(evaluated.canaries["repetitions"])
        if evaluated.canaries is not None
        else np.zeros(0, dtype=np.int64),
    }
    if plan.trains:
        trained = load_prepared(plan.train_data_dir, verify=False)
        result = stream_numbers(trained, _consumed(plan, trained), labels)
    else:  # nothing trained: nothing read
        result = {
            "stream": {"tokens": 0},
            "reads": {k: {str(int(r)): [0, 0] for r in np.unique(v)} for k, v in labels.items() if len(v)},
        }
    result.update(validation_loss(model, evaluated, plan.eval_cfg.membership))
    atomic_write_json(exposure_file(plan), result)
    return result


@dataclasses.dataclass
class ExposureSummary:
    """The cell summary's part (SCHEMA.md, ``cells``): ``stream``, ``reads`` and ``validation_loss`` of the cell's
    ``exposure.json`` (None without one)."""

    stream: dict | None = None
    reads: dict | None = None
    validation_loss: float | None = None


def collect(plan: CellPlan) -> ExposureSummary:
    found = read_json(exposure_file(plan)) if exposure_file(plan).is_file() else {}
    return ExposureSummary(found.get("stream"), found.get("reads"), found.get("validation_loss"))


def render(results: dict, cells: Sequence[Cell]) -> str:
    """What each trained cell read: tokens, the targets' (and canaries') share of them, the copies read per label,
    and the nonmember count."""
    lines = []
    for c in cells:
        s = c.stream or {}
        if not s.get("tokens"):
            continue
        reads = "; ".join(
            f"{kind} "
            + ", ".join(
                f"x{r}: {lo}" + ("" if lo == hi else f"-{hi}")
                for r, (lo, hi) in sorted(v.items(), key=lambda kv: int(kv[0]))
            )
            for kind, v in (c.reads or {}).items()
        )
        canary = f", canaries {s['canaries']:,} ({pct(s['canary_share'])} %)" if s.get("canaries") else ""
        lines.append(
            f"- `{c.cell}`: {s['tokens']:,} tokens read; targets {s['members']:,} "
            f"({pct(s['member_share'])} %){canary}; copies read per label: {reads or '-'}."
        )
    if not lines:
        return ""
    nonmembers = {c.nonmembers for c in cells if c.nonmembers}
    return markdown_section(
        "Training stream (counted from the rows training read)",
        "\n".join(lines),
        f"Nonmembers (held-out documents of the same pool): {', '.join(str(n) for n in sorted(nonmembers))}.",
    )


EXPOSURE = Analysis(
    name="exposure",
    output=exposure_file,
    applies=lambda plan: True,  # what the model read (the rows it consumed)
    run=write_exposure,
    part=ExposureSummary,
    collect=collect,
    sections=(Section(after="size", render=render),),
    tuning=True,
)  # the validation loss a tuning cell is read for
