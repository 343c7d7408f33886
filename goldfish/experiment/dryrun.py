"""``goldfish experiment CONFIG --dry-run [--world-size N]``: validate everything, estimate, train nothing.

For each cell: the three configs (already built by :func:`plan_cells`), the parallel layout against the world size
(every factor printed on a mismatch), memory per device and a FLOP/time estimate (:mod:`goldfish.estimate`), and
what it reads (:func:`data_budget`): the targets' share of the trained tokens, the reads of a target over the run
and of the background. A layout that does not divide, a cell that does not fit in the device memory, and a cell
that reads its background more than once (which multiplies its targets' reads; ``allow_background_cycles: true``
allows it) are errors.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

from ..data.prepare import estimate_needs, streamed
from ..data.tokenizer import load_tokenizer
from ..errors import ConfigError, UserError
from ..estimate import device_memory_gib, estimate_memory, estimate_time, layout_of, shape_of
from ..precision import resolve_precision
from ..train_config import ModelConfig, make_plan
from .config import ExperimentConfig
from .plan import CellPlan, manifest_of
from .tune import first_values, is_tuning, loss_only

_KNOWN_VOCABS = {"gpt2": 50257}
FIT_FRACTION = 0.9


@functools.lru_cache(maxsize=8)
def _local_vocab(name: str) -> int:
    """Token count of a local tokenizer (loaded once per name: a GGUF's takes seconds)."""
    return len(load_tokenizer(name))


def vocab_size(cfg: ExperimentConfig, plan: CellPlan) -> int:
    """The vocabulary the model will get: prepared manifest > hardware.vocab_size > the recipe's tokenizer (a known
    name, the bpe size, or a local tokenizer loaded offline)."""
    manifest = manifest_of(plan.data_dir)
    if manifest.is_file():
        return int(json.loads(manifest.read_text(encoding="utf-8"))["tokenizer"]["vocab_size"])
    if plan.hardware.vocab_size:
        return plan.hardware.vocab_size
    tok = getattr(plan.prepare_cfg, "tokenizer", None)
    name = getattr(tok, "name", None)
    if name in _KNOWN_VOCABS:
        return _KNOWN_VOCABS[name]
    if name == "bpe" and getattr(tok, "vocab_size", None):
        return int(tok.vocab_size)
    if name and Path(name).expanduser().exists():  # a local tokenizer: a starting model's, a folder or a .gguf
        return _local_vocab(name)
    raise ConfigError(
        f"cell {plan.cell.id}: the vocabulary size is unknown before the data is prepared; "
        f"set hardware.vocab_size=N (e.g. 32000 for Llama-2, 128256 for Llama-3)"
    )


def model_for_estimate(plan: CellPlan) -> tuple[ModelConfig, str]:
    """The model config whose shape the estimate uses, and a note ('' = none). A starting model that is not on this
    machine (checked only when a cell runs) is estimated by the cell's ``train.model.name``, which must then name
    its shape (anything but the default size)."""
    model = plan.train_cfg.model
    if not model.path or Path(model.path).expanduser().exists():
        return model, ""
    if model.name == ModelConfig().name:
        raise ConfigError(
            f"cell {plan.cell.id}: the starting model {model.path} is not here; name its shape with "
            f"train.model.name (e.g. llama2-7B) to dry-run without it"
        )
    return dataclasses.replace(model, path=None), f"{model.path} absent: shape of {model.name} assumed"


def _train_prepare_cfg(plan: CellPlan) -> Any:
    """The data config of the rows a cell trains on (a background-trained control: the rows without members)."""
    return plan.train_data[0] if plan.train_data is not None else plan.prepare_cfg


def total_tokens(plan: CellPlan, seq_len: int) -> float | None:
    """Tokens the cell will train on: max_tokens, or max_steps x batch x seq_len, or epochs x prepared rows; none for
    a control cell."""
    if not plan.trains:
        return 0.0
    s = plan.train_cfg.schedule
    budgets = []
    if s.max_tokens:
        budgets.append(s.max_tokens)
    if s.max_steps:
        budgets.append(s.max_steps * s.global_batch_size * seq_len)
    manifest = manifest_of(plan.train_data_dir)  # the rows it trains on (a background control: its own)
    if s.epochs and manifest.is_file():
        rows = json.loads(manifest.read_text(encoding="utf-8"))["counts"]["train"]
        budgets.append(s.epochs * rows * seq_len)
    elif s.epochs and (rows := expected_rows(_train_prepare_cfg(plan))):
        budgets.append(s.epochs * rows * seq_len)
    return min(budgets) if budgets else None


def expected_rows(prepare_cfg: Any) -> int | None:
    """An estimate of one epoch's training rows before the data is prepared, when the data config fixes the lengths:
    members cut to ``doc_tokens`` (exactly that when ``min_tokens`` equals it) times their copies, plus background
    chunks of ``background_chunk_tokens``; packed rows hold each document + EOS back to back. Approximate: a
    document's last background chunk may be shorter, and packing pads a row's rest before a member that does not
    fit in it. None when a length or count is open (whole documents, ``null`` counts, min_tokens < doc_tokens with
    ``held_out`` nonmembers: members may then be shorter than doc_tokens)."""
    p = prepare_cfg
    members, background = getattr(p, "num_members", None), getattr(p, "num_background", None)
    doc, chunk = getattr(p, "doc_tokens", None), getattr(p, "background_chunk_tokens", None)
    # every member is cut to exactly doc_tokens when no shorter document is eligible
    fixed = doc is not None and (p.min_tokens == doc or p.nonmember_mode in ("random_split", "later_chunk"))
    if members is None or background is None or not fixed:
        return None
    if background and chunk is None:
        return None
    reps = list(p.repetitions)
    copies = sum(reps[i % len(reps)] for i in range(members)) if p.train_members else 0
    canary_copies, canary_len = canary_copies_of(p)
    if p.packing == "one_per_row":
        return (
            copies * -(-doc // p.seq_len)
            + background * -(-(chunk or 0) // p.seq_len)
            + canary_copies * -(-canary_len // p.seq_len)
        )
    return -(-(copies * (doc + 1) + background * ((chunk or 0) + 1) + canary_copies * (canary_len + 1)) // p.seq_len)


def canary_copies_of(p: Any) -> tuple[int, int]:
    """(canary copies in one epoch's rows, tokens per canary) of a data config (``goldfish.data.canaries``)."""
    canaries = getattr(p, "canaries", None)
    if not canaries or not canaries.count or not p.train_members:
        return 0, 0
    reps = list(canaries.repetitions or p.repetitions)
    return sum(reps[c % len(reps)] for c in range(canaries.count)), canaries.tokens


@dataclasses.dataclass(frozen=True)
class DataBudget:
    """What one trained cell reads: tokens of one epoch's rows and the passes its budget makes over them."""

    target_tokens: float  # member tokens in one epoch's rows: every copy, EOS included when packed
    background_tokens: float  # background tokens in one epoch's rows
    rows: int  # rows of one epoch (padding included)
    repetitions: tuple[int, ...]  # copies per epoch of the members, by stratum
    passes: float  # epochs the budget trains (a fraction of the rows when below 1)
    canary_tokens: float = 0.0  # canary tokens in one epoch's rows (every copy, EOS included when packed)

    @property
    def share(self) -> float:
        """The targets' share of the trained tokens."""
        total = self.target_tokens + self.background_tokens + self.canary_tokens
        return self.target_tokens / total if total else 0.0

    @property
    def reads(self) -> list[float]:
        """Reads of one target over the run, per repetition stratum (r copies per epoch x passes); none when the
        rows hold no target (a background-trained control)."""
        return [r * self.passes for r in self.repetitions] if self.target_tokens else []


def _epoch_from_manifest(manifest: dict) -> tuple[float, float, int, tuple[int, ...]]:
    """(target tokens, background tokens, rows, strata) of one epoch of a prepared folder."""
    eos = 1 if manifest["packing"] == "pack" else 0
    stats, counts, tokens = manifest["stats"], manifest["counts"], manifest["tokens"]
    strata = {int(r): n for r, n in stats["repetition_strata"].items()}
    copies = sum(r * n for r, n in strata.items()) if stats.get("members_trained", True) else 0
    mean_len = tokens["members"] / max(1, counts["members"])
    background = tokens.get("background", 0) + eos * counts.get("background", 0)
    return copies * (mean_len + eos), float(background), int(counts["train"]), tuple(sorted(strata))


def _epoch_from_config(p: Any) -> tuple[float, float, int, tuple[int, ...]] | None:
    """The same before preparation, when the config fixes every length (see :func:`expected_rows`)."""
    rows = expected_rows(p)
    if rows is None:
        return None
    eos = 1 if p.packing == "pack" else 0
    reps = list(p.repetitions)
    copies = sum(reps[i % len(reps)] for i in range(p.num_members)) if p.train_members else 0
    background = p.num_background * ((p.background_chunk_tokens or 0) + eos)
    return float(copies * (p.doc_tokens + eos)), float(background), rows, tuple(sorted(set(reps)))


def data_budget(plan: CellPlan) -> DataBudget | None:
    """The targets' share and the reads of a trained cell, from the prepared folder it trains on when it exists,
    else from its data config; None for a cell that trains nothing or whose lengths are open until preparation
    (e.g. ``num_background: null``). Passes follow the trainer's own budget (``goldfish.train.make_plan``)."""
    if not plan.trains:
        return None
    prepare_cfg = _train_prepare_cfg(plan)
    manifest = manifest_of(plan.train_data_dir)
    epoch = (
        _epoch_from_manifest(json.loads(manifest.read_text(encoding="utf-8")))
        if manifest.is_file()
        else _epoch_from_config(prepare_cfg)
    )
    if epoch is None:
        return None
    targets, background, rows, strata = epoch
    s = plan.train_cfg.schedule
    try:
        steps = make_plan(s, plan.train_cfg.optim, rows, prepare_cfg.seq_len, 1)
    except UserError:  # fewer rows than a batch: the trainer refuses it with its own message
        return None
    copies, length = canary_copies_of(prepare_cfg)
    eos = 1 if prepare_cfg.packing == "pack" else 0
    return DataBudget(
        targets, background, rows, strata, steps.total_steps / steps.steps_per_epoch, float(copies * (length + eos))
    )


def cycling_problem(plan: CellPlan, budget: DataBudget | None) -> str | None:
    """A cell whose budget reads its background more than once (so its targets far more often than labelled), or
    None."""
    if budget is None or not budget.background_tokens or budget.passes <= 1 + 1e-9:
        return None
    reads = ", ".join(f"{r:g}" for r in budget.reads)
    return (
        f"cell {plan.cell.id} reads its background {budget.passes:.2f} times (its targets {reads} times, "
        f"{100 * budget.share:.2f} % of the tokens): give it more background (data.num_background) or a "
        f"smaller budget (train.schedule), or set allow_background_cycles: true if the repetition is intended"
    )


def target_precision(plan: CellPlan) -> str:
    """The precision a cell trains in on its target hardware: ``auto`` is bf16 on every GPU kind of the table (all
    have native bf16) and, for ``hardware.gpu=cpu``, what this machine resolves it to."""
    precision = plan.train_cfg.precision
    if precision != "auto":
        return precision
    return "bf16" if plan.hardware.gpu != "cpu" else resolve_precision("auto", "cpu", warn=False)


def estimate_cell(cfg: ExperimentConfig, plan: CellPlan, world_size: int | None) -> dict[str, Any]:
    """Layout, memory and time of one cell (raises ConfigError when the layout is invalid)."""
    hw = plan.hardware
    world = world_size or hw.gpus
    seq_len = int(getattr(plan.prepare_cfg, "seq_len", 0) or 2048)
    model, note = model_for_estimate(plan)
    shape = shape_of(model, vocab_size(cfg, plan))
    layout = layout_of(plan.train_cfg, shape, world)  # the engine's own validation and sharding
    mem = estimate_memory(shape, layout, plan.train_cfg.schedule.micro_batch_size, seq_len, target_precision(plan))
    tokens = total_tokens(plan, seq_len)
    flops = shape.flops_per_token(seq_len)
    return {
        "cell": plan.cell.id,
        "world": world,
        "layout": layout.description,
        "params": shape.params,
        "seq_len": seq_len,
        "memory_gib": mem.as_gib(),
        "device_gib": device_memory_gib(hw.gpu, hw.memory_gb),
        "device": hw.gpu,
        "tokens": tokens,
        "flops_per_token": flops,
        "total_flops": tokens * flops if tokens else None,
        "time_s": 0.0 if not plan.trains else estimate_time(tokens, flops, world, hw.gpu, hw.mfu),
        "note": note,
        "budget": data_budget(plan),
    }


def _fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _fmt_budget(b: DataBudget | None) -> str:
    """targets' share, reads per target (per stratum), background reads; '-' when unknown or nothing trains."""
    if b is None:
        return f"{'-':>8} {'-':>12} {'-':>8}"
    reads = "/".join(f"{r:.3g}" for r in b.reads) or "-"
    bg = f"{b.passes:.3g}" if b.background_tokens else "-"
    return f"{100 * b.share:>7.2f}% {reads:>12} {bg:>8}"


def format_estimates(rows: list[dict]) -> str:
    """The dry-run table: one line per cell."""
    header = (
        f"{'cell':<34} {'world':>5} {'layout':<34} {'params':>9} {'weights+grads+adam':>18} {'activ.':>8} "
        f"{'logits':>7} {'total/dev':>9} {'device':>10} {'tokens':>9} {'time':>9} {'targets':>8} "
        f"{'reads/target':>12} {'bg reads':>8}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        m = r["memory_gib"]
        state = m["weights"] + m["grads"] + m["optimizer"]
        dev = f"{r['device_gib']:.0f} GiB" if r["device_gib"] else r["device"]
        tokens = (
            "?"
            if not r["tokens"]
            else (f"{r['tokens'] / 1e9:.2f} B" if r["tokens"] >= 1e8 else f"{r['tokens'] / 1e6:.2f} M")
        )
        lines.append(
            f"{r['cell'][:34]:<34} {r['world']:>5} {r['layout'][:34]:<34} {r['params'] / 1e9:>8.3f}B "
            f"{state:>14.1f} GiB {m['activations']:>4.1f} GiB {m['logits']:>3.1f} GiB {m['total']:>5.1f} GiB "
            f"{dev:>10} {tokens:>9} {_fmt_time(r['time_s']):>9} {_fmt_budget(r.get('budget'))}"
        )
    notes = sorted({r["note"] for r in rows if r.get("note")})
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**28 else f"{n / 2**20:.0f} MiB"


def preparation_needs(cfg: ExperimentConfig, plans: list[CellPlan]) -> list[str]:
    """One line per prepared folder the cells need (a folder already prepared says so): its disk and the peak
    memory of preparing it (``goldfish.data.prepare.estimate_needs``), and how a streamed background is split."""
    lines, seen = [], set()
    for plan in plans:
        for prepare_cfg, folder in [(plan.prepare_cfg, plan.data_dir)] + ([plan.train_data] if plan.train_data else []):
            if folder in seen or prepare_cfg is None:
                continue
            seen.add(folder)
            if manifest_of(folder).is_file():
                lines.append(f"prepare {folder}: done")
                continue
            try:
                needs = estimate_needs(prepare_cfg, vocab_size(cfg, plan))
            except (ConfigError, UserError):
                needs = None
            if needs is None:
                lines.append(
                    f"prepare {folder}: lengths open until prepared (num_background: null or whole "
                    f"documents); disk and memory not estimated"
                )
                continue
            source = (prepare_cfg.background_source or prepare_cfg.source).name
            how = (
                f"; the background streams from {source} in shards of "
                f"{prepare_cfg.shard_documents:,} documents (--num-proc workers; --shards A:B jobs, then --merge)"
                if streamed(prepare_cfg)
                else ""
            )
            tokens = f"{needs['tokens'] / 1e9:.3g} B" if needs["tokens"] >= 1e8 else f"{needs['tokens'] / 1e6:.3g} M"
            lines.append(
                f"prepare {folder}: {tokens} training tokens as {needs['dtype']} in "
                f"{needs['chunks']:,} background chunks -> ~{_gib(needs['disk_bytes'])} on disk, peak memory "
                f"~{_gib(needs['memory_bytes'])} (the merge's layout of {needs['occurrences']:,} "
                f"occurrences){how}"
            )
    return lines


def dry_run(
    cfg: ExperimentConfig, plans: list[CellPlan], world_size: int | None = None
) -> tuple[list[dict], list[str]]:
    """Estimate every cell: (rows of the valid cells, problems: invalid layouts and cells that do not fit)."""
    rows, problems = [], []
    for plan in plans:
        try:
            row = estimate_cell(cfg, plan, world_size)
        except ConfigError as e:
            problems.append(f"cell {plan.cell.id}: {e}")
            continue
        rows.append(row)
        cycling = None if cfg.allow_background_cycles else cycling_problem(plan, row["budget"])
        if cycling:
            problems.append(cycling)
        need, have = row["memory_gib"]["total"], row["device_gib"]
        if have and need > FIT_FRACTION * have:
            problems.append(
                f"cell {plan.cell.id} needs ~{need:.1f} GiB per device but {plan.hardware.gpu} has "
                f"{have:.0f} GiB; raise tp/pp (or axonn row/col/depth), enable parallel.fsdp, or lower "
                f"micro_batch_size"
            )
    return rows, problems


def study_time(cfg: ExperimentConfig, plans: list[CellPlan]) -> list[str]:
    """The study's time from the measured per-cell costs (``cost``), or [] without them: every cell that runs costs
    its training and the rest (evaluation, analyses, attacks). With tuning, the cells beyond the tuning cells run at
    one value of the tuned axis (counted at its first), and a tuning cell at a value not chosen -- every value but
    one per group -- costs its training alone where it computes only its validation loss
    (:func:`goldfish.experiment.tune.loss_only`); the lines say what that saves."""
    c = cfg.cost
    if not c.axis:
        return []
    first = first_values(plans)
    runs = [
        p
        for p in plans
        if not cfg.tune.axis or is_tuning(cfg, p, first) or p.cell.values[cfg.tune.axis] == first[cfg.tune.axis]
    ]
    unchosen = [
        p
        for p in runs
        if cfg.tune.axis and is_tuning(cfg, p, first) and p.cell.values[cfg.tune.axis] != first[cfg.tune.axis]
    ]  # all but one value per group

    def seconds(cells: list[CellPlan], table: dict) -> float:
        return sum(float(table[str(p.cell.values[c.axis])]) for p in cells)

    full = seconds(runs, c.train_s) + seconds(runs, c.rest_s)
    saved = seconds(unchosen, c.rest_s)
    lines = [
        f"study time from the measured per-cell costs ({c.measured or 'cost'}): {len(runs)} cells, "
        f"{_fmt_time(full)} of cell time with every cell evaluated"
    ]
    if unchosen:
        now = full - saved if loss_only(cfg) else full
        how = (
            "tuning cells compute only their validation loss until their value is chosen"
            if loss_only(cfg)
            else "tune.evaluate: true (or tune.by: heldout_loss) evaluates every tuning cell"
        )
        lines.append(
            f"  {len(unchosen)} tuning cells at values not chosen: {_fmt_time(saved)} of evaluation "
            f"({100 * saved / full:.0f} %) {'saved' if loss_only(cfg) else 'not saved'} ({how}); this "
            f"study: {_fmt_time(now)}"
        )
    return lines
