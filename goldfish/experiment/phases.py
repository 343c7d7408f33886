"""A cell is a list of phases, run in order by :func:`run_cell`; each phase names its output files, when it applies
and how it runs, and is skipped once its outputs exist, so a rerun resumes exactly where a cell stopped.

======================  ==========================================  =========================================
phase                   outputs (``goldfish.experiment.plan``)      applies
======================  ==========================================  =========================================
prepare                 each prepared folder's ``manifest.json``    always (folders shared by cells: locked)
configs                 (rewritten every run)                       always: the configs this run uses
train                   ``train/summary.json``                      always (a control that trains nothing:
                                                                    its initial model and a zero summary)
eval                    ``eval/results.json``                       always
each of ``ANALYSES``     its ``output`` (``goldfish.experiment.      with ``Pipeline.analyses`` and its
                        analyses``: the k baseline's                ``applies`` (the k baseline: not a
                        ``eval/k_baseline.json``, the exposure      control, a standard cell writes none;
                        counts' ``exposure.json``, the attacks'     the exposure counts: always); one that
                        ``attacks.json``)                           reads its control's files (the attacks)
                                                                    runs after the others and waits for the
                                                                    control of its grid point
card                    (rewritten every run)                       with ``Pipeline.evaluate.card``
======================  ==========================================  =========================================

Then ``cell.json`` (the cell and this run's phase times) and, last and atomically, ``DONE``. A tuning cell read
only for its validation loss (``goldfish.experiment.tune.loss_only``) first runs the phases marked ``tuning`` alone
(prepare, configs, train, and the analysis that writes the validation loss), with neither; the rest where its value
is chosen. Resumability within a
phase is the phase's own: prepared data is a complete folder or absent; a killed training resumes from the trainer's
checkpoints; evaluation from its partial results. Every phase after training gets the same lazily loaded model
(``Pipeline.open_model``), so a cell loads its model once.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from ..config import save_config
from ..errors import UserError
from ..io import atomic_write_json
from ..ownership import FolderLock
from .analyses import ANALYSES, Analysis, Others
from .config import ExperimentConfig
from .plan import CellPlan, Pipeline, control_of, manifest_of
from .trainsummary import TrainSummary
from .tune import control_point


@dataclasses.dataclass
class CellRun:
    """What the phases of one cell share: the experiment, the cell, every cell (to find its control), the
    pipeline, and the cell's model handle (loaded by the first phase that needs it, never by a finished cell)."""

    cfg: ExperimentConfig
    plan: CellPlan
    plans: list[CellPlan]
    pipeline: Pipeline
    model: Any = None


@dataclasses.dataclass(frozen=True)
class Phase:
    """One step of a cell: ``outputs(plan)`` are the files whose presence means it is done (none: it runs every
    time), ``applies(run)`` whether the cell has it, ``run(run)`` does it; ``blocked(run)`` (optional) says why the
    cell must stop before it (a later run finishes the cell)."""

    name: str
    outputs: Callable[[CellPlan], list[Path]]
    applies: Callable[[CellRun], bool]
    run: Callable[[CellRun], None]
    blocked: Callable[[CellRun], str | None] | None = None
    tuning: bool = False  # a tuning cell that computes only its validation loss runs it (run_cell's tuning_only)

    def done(self, plan: CellPlan) -> bool:
        files = self.outputs(plan)
        return bool(files) and all(f.is_file() for f in files)


def prepare_data(pipeline: Pipeline, prepare_cfg: Any, data_dir: Path) -> bool:
    """Prepare ``data_dir`` unless it is complete; True when this call prepared it. Cells of two shards may share
    prepared data: the second waits for the first, then finds it ready."""
    if manifest_of(data_dir).is_file():
        return False
    with FolderLock(data_dir.with_name(f"{data_dir.name}.prepare"), wait=True):
        if manifest_of(data_dir).is_file():
            return False
        pipeline.prepare.run(prepare_cfg, out=data_dir, overwrite=False, progress=False)
        return True


def _prepare(run: CellRun) -> None:
    for prepare_cfg, data_dir in run.plan.prepared:
        prepare_data(run.pipeline, prepare_cfg, data_dir)


def _save_configs(run: CellRun) -> None:
    """Before training starts: a killed cell's configs then describe exactly what its partial outputs were made
    with (``goldfish.experiment.runner.stale_cells`` compares them with the current ones)."""
    save_config(run.plan.train_cfg, run.plan.train_config_file)
    save_config(run.plan.eval_cfg, run.plan.eval_config_file)


def torchrun_command(cfg: ExperimentConfig, plan: CellPlan, config_path: Path) -> list[str]:
    """``[prefix..., python -m torch.distributed.run --nnodes --nproc_per_node ..., -m goldfish train CONFIG]``.

    ``{nnodes}`` and ``{nproc_per_node}`` in ``launcher_prefix``/``torchrun_args`` are replaced by the cell's values
    (from ``hardware.gpus`` and ``hardware.gpus_per_node``), so one Slurm allocation can run cells of several sizes.
    """
    hw = plan.hardware
    nproc = min(hw.gpus, hw.gpus_per_node)
    if hw.gpus % nproc:
        raise UserError(
            f"cell {plan.cell.id}: hardware.gpus={hw.gpus} is not a multiple of "
            f"hardware.gpus_per_node={hw.gpus_per_node}; use whole nodes"
        )
    fields = {"nnodes": hw.gpus // nproc, "nproc_per_node": nproc}
    prefix = [w.format(**fields) for w in cfg.launcher_prefix]
    extra = [w.format(**fields) for w in cfg.torchrun_args]
    return [
        *prefix,
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={fields['nnodes']}",
        f"--nproc_per_node={nproc}",
        *extra,
        "-m",
        "goldfish",
        "train",
        str(config_path),
    ]


def _torchrun_train(cfg: ExperimentConfig, plan: CellPlan) -> None:
    """Train one cell in a torchrun subprocess, from the cell's saved train config."""
    cmd = torchrun_command(cfg, plan, plan.train_config_file)
    print(f"[{plan.cell.id}] {shlex.join(cmd)}", file=sys.stderr)
    rc = subprocess.call(cmd)
    if rc != 0:
        raise UserError(
            f"training cell {plan.cell.id} failed (exit status {rc}); its log is above; rerun the "
            f"experiment to resume from the last checkpoint"
        )


def _train(run: CellRun) -> None:
    """A control cell trains nothing (``control_mode: untrained``): from scratch it saves the initial weights,
    fine-tuning it evaluates the starting model itself; its summary records zero steps and tokens. With
    ``control_mode: background`` it trains like an arm, on the rows without the members."""
    plan = run.plan
    if not plan.trains:
        if plan.start_model is None:
            run.pipeline.train.initial_model(plan.train_cfg, plan.model_dir)
        TrainSummary.untrained(plan.eval_cfg.model.path).write(plan.train_summary)
    elif run.cfg.launcher == "torchrun":
        _torchrun_train(run.cfg, plan)
    else:
        run.pipeline.train.run(plan.train_cfg)


def _control(run: CellRun) -> CellPlan | None:
    """The control that calibrates the cell's attacks (:func:`goldfish.experiment.tune.control_point`; None: none,
    or its tuned value not chosen yet)."""
    point = control_point(run.cfg, run.plans, run.plan)
    return None if point is None else control_of(run.plan, run.plans, point)


def _control_not_done(run: CellRun) -> str | None:
    """The attacks of an arm are calibrated by its control (at its grid point; at the control's own choice where
    each arm is tuned): wait for a run that holds it, then stop this cell if the control is still not done."""
    if not run.plan.cell.control and control_point(run.cfg, run.plans, run.plan) is None:
        return (
            f"trained and evaluated; its attacks wait for the control's {run.cfg.tune.axis} choice, whose tuning "
            f"cells are not all done: run them (their shard, or the experiment without --only) and this one again"
        )
    control = _control(run)
    if control is None or control.done:
        return None
    with control.lock():  # another run may be running it: wait for that
        pass
    if control.done:
        return None
    return (
        f"trained and evaluated; its attacks wait for {control.cell.id}, which is not done: run that cell (its "
        f"shard, or the experiment without --only) and this one again"
    )


def _analysis_of(run: CellRun, analysis: Analysis) -> Analysis | None:
    """The pipeline's analysis of that name (a test fake may list its own), None where it runs none of that name."""
    listed = ANALYSES if run.pipeline.analyses is None else run.pipeline.analyses
    return next((a for a in listed if a.name == analysis.name), None)


def _run_analysis(run: CellRun, analysis: Analysis) -> None:
    analysis = _analysis_of(run, analysis)
    if analysis.reads_control:
        analysis.run(run.plan, run.model, Others(run.plans, _control(run)))
    else:
        analysis.run(run.plan, run.model)


def analysis_phase(analysis: Analysis) -> Phase:
    """A per-cell analysis's phase: done once its output exists; runs where the pipeline lists it and it applies; one
    that reads its control's files waits for that control (:func:`_control_not_done`)."""
    return Phase(
        analysis.name,
        lambda p: [analysis.output(p)],
        lambda r: _analysis_of(r, analysis) is not None and analysis.applies(r.plan),
        lambda r: _run_analysis(r, analysis),
        tuning=analysis.tuning,
        blocked=_control_not_done if analysis.reads_control else None,
    )


PHASES: tuple[Phase, ...] = (
    Phase("prepare", lambda p: [manifest_of(d) for _, d in p.prepared], lambda r: True, _prepare, tuning=True),
    Phase("configs", lambda p: [], lambda r: True, _save_configs, tuning=True),
    Phase("train", lambda p: [p.train_summary], lambda r: True, _train, tuning=True),
    Phase(
        "eval", lambda p: [p.results_file], lambda r: True, lambda r: r.pipeline.evaluate.run(r.plan.eval_cfg, r.model)
    ),
    # the analyses in ANALYSES's order, those that read their control's files after the others
    *(analysis_phase(a) for a in ANALYSES if not a.reads_control),
    *(analysis_phase(a) for a in ANALYSES if a.reads_control),
    Phase(
        "card",
        lambda p: [],  # the same numbers replace themselves when an interrupted cell runs this again
        lambda r: r.pipeline.evaluate.card is not None,
        lambda r: r.pipeline.evaluate.card(r.plan),
    ),
)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def run_cell(
    cfg: ExperimentConfig,
    plan: CellPlan,
    pipeline: Pipeline,
    phase: Callable[[str], None] = lambda _: None,
    plans: list[CellPlan] = (),
    tuning_only: bool = False,
) -> dict:
    """Run (or resume) one cell's :data:`PHASES`; returns its record (also written to ``cell.json``), or {} when a
    phase is blocked (its attacks wait for a control that is not done; a later run finishes it). ``phase(name)`` is
    told each phase as it starts; ``plans`` (all cells) lets the attacks find the control that calibrates them.
    ``tuning_only``: only the phases a tuning cell is read for (``Phase.tuning``: training and the validation loss),
    then {} -- the cell is not done; run it again without it where its value is chosen."""
    run = CellRun(
        cfg,
        plan,
        list(plans),
        pipeline,
        pipeline.open_model(plan.eval_cfg) if pipeline.open_model is not None else None,
    )
    times: dict[str, float] = {}
    for step in PHASES:
        if not step.applies(run) or step.done(plan) or (tuning_only and not step.tuning):
            continue
        why = step.blocked(run) if step.blocked is not None else None
        if why is not None:
            print(f"[{plan.cell.id}] {why}", file=sys.stderr)
            return {}
        phase(step.name)
        t0 = time.perf_counter()
        step.run(run)
        times[f"{step.name.replace(' ', '_')}_s"] = time.perf_counter() - t0
    if tuning_only:
        return {}
    record = {
        "cell": plan.cell.id,
        "arm": plan.cell.arm,
        "values": plan.cell.values,
        "overrides": plan.cell.overrides,
        "data_dir": str(plan.data_dir),
        "finished": _now(),
        "phase_seconds_this_run": times,
    }
    atomic_write_json(plan.record_file, record)
    atomic_write_json(plan.done_file, {"finished": record["finished"]})  # last: the cell is complete
    return record
