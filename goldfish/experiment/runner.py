"""Run the cells: prepare -> train -> eval, each cell finished by an atomic ``DONE`` marker.

Resumability is per phase: prepared data is a complete folder or absent (written atomically by ``prepare``); a
cell's training is finished once ``train/summary.json`` exists (a killed run resumes from the trainer's own
checkpoints); evaluation resumes from its partial results. ``DONE`` is written last, so a rerun skips exactly the
finished cells and redoes only the one that was interrupted.

A cell's resolved ``train_config.yaml`` and ``eval_config.yaml`` are written before its training starts, and every
later run compares them with the current ones for every started cell (one with a ``train/`` folder) -- finished or
not -- so one cell never mixes two configurations (``rerun_stale`` runs such cells again from scratch instead: the
old cell is set aside as ``cells/.<id>.replaced`` and deleted only when the new one is done; a failure puts it back,
and so does the next start after a kill).

The experiment folder is locked while a run writes it (``goldfish.ownership.writing``) and carries the experiment's
ownership marker; a non-empty folder that is not an experiment's is refused. Runs of one experiment share that lock,
so shards (``--only``) run side by side: each cell runs under its own exclusive lock (``cells/.<id>.lock``; a cell
another run holds is waited for, then skipped if that run finished it), prepared data shared by cells of two shards is
prepared once (the other waits), and the results and report are written by one run at a time.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import yaml
from tqdm.auto import tqdm

from ..config import load_config, read_yaml, save_config, to_dict
from ..errors import ConfigError, UserError
from ..io import atomic_write_json
from ..ownership import FolderLock, OutputFolder, check_target, fingerprint_sha256, read_owner, writing
from ..provenance import code_version, flatten, read_fingerprint
from .aggregate import aggregate
from .config import ExperimentConfig
from .pipeline import default_pipeline
from .plan import ATTACKS_FILE, DONE, EXPOSURE_FILE, CellPlan, Pipeline, control_of, plan_cells
from .report import write_study_report
from .tune import active, choice, first_values, is_tuning, selected
from .tune import summary as tune_summary


def load_experiment(path: str | Path | None, overrides: list[str] = ()) -> ExperimentConfig:
    """YAML + ``key=value`` overrides -> a validated :class:`ExperimentConfig` (cells are checked by plan_cells)."""
    return load_config(ExperimentConfig, path, list(overrides))


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def torchrun_command(cfg: ExperimentConfig, plan: CellPlan, config_path: Path) -> list[str]:
    """``[prefix..., python -m torch.distributed.run --nnodes --nproc_per_node ..., -m goldfish train CONFIG]``.

    ``{nnodes}`` and ``{nproc_per_node}`` in ``launcher_prefix``/``torchrun_args`` are replaced by the cell's values
    (from ``hardware.gpus`` and ``hardware.gpus_per_node``), so one Slurm allocation can run cells of several sizes.
    """
    hw = plan.hardware
    nproc = min(hw.gpus, hw.gpus_per_node)
    if hw.gpus % nproc:
        raise UserError(f"cell {plan.cell.id}: hardware.gpus={hw.gpus} is not a multiple of "
                        f"hardware.gpus_per_node={hw.gpus_per_node}; use whole nodes")
    fields = {"nnodes": hw.gpus // nproc, "nproc_per_node": nproc}
    prefix = [w.format(**fields) for w in cfg.launcher_prefix]
    extra = [w.format(**fields) for w in cfg.torchrun_args]
    return [*prefix, sys.executable, "-m", "torch.distributed.run", f"--nnodes={fields['nnodes']}",
            f"--nproc_per_node={nproc}", *extra, "-m", "goldfish", "train", str(config_path)]


def _torchrun_train(cfg: ExperimentConfig, plan: CellPlan) -> None:
    """Train one cell in a torchrun subprocess (the cell's resolved train config is saved beside it)."""
    config_path = plan.dir / "train_config.yaml"
    save_config(plan.train_cfg, config_path)
    cmd = torchrun_command(cfg, plan, config_path)
    print(f"[{plan.cell.id}] {shlex.join(cmd)}", file=sys.stderr)
    rc = subprocess.call(cmd)
    if rc != 0:
        raise UserError(f"training cell {plan.cell.id} failed (exit status {rc}); its log is above; rerun the "
                        f"experiment to resume from the last checkpoint")


UNTRACKED = "logging."  # where step metrics are also sent (TensorBoard, W&B): changes no result, never stale


def _defaults(current: object) -> dict[str, Any]:
    """Every key of ``current``'s config class at its default (empty when the class needs arguments)."""
    try:
        return flatten(yaml.safe_load(yaml.safe_dump(to_dict(type(current)()))))
    except (TypeError, ConfigError):
        return {}


def stale_cells(plans: list[CellPlan]) -> dict[str, str]:
    """``{cell id: what differs}`` for started cells whose saved train/eval config differs from the current one, or
    whose unfinished training or evaluation was started by another code version (which the trainer and
    ``goldfish eval`` would refuse to resume: said here, before any work)."""
    stale = {}
    for plan in plans:
        if not (plan.done or plan.train_dir.exists()):
            continue  # nothing trained yet (e.g. a config error stopped it): a changed config is simply used
        diffs = []
        for name, current in (("train_config.yaml", plan.train_cfg), ("eval_config.yaml", plan.eval_cfg)):
            path = plan.dir / name
            if not path.is_file():
                continue
            saved, now = flatten(read_yaml(path)), flatten(yaml.safe_load(yaml.safe_dump(to_dict(current))))
            added = _defaults(current)
            keys = [k for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k)
                    and not k.startswith(UNTRACKED)
                    and not (k not in saved and now.get(k) == added.get(k))]  # a key added since, at its default
            diffs += [f"{name.split('_')[0]}.{k}: {saved.get(k)} -> {now.get(k)}" for k in keys[:3]]
        for folder, finished in ((plan.train_dir, "summary.json"), (plan.eval_dir, "results.json")):
            started = read_fingerprint(folder) if folder.is_dir() else None
            if started and not (folder / finished).is_file() and started.get("code") != code_version():
                diffs.append(f"{folder.name} code: {started.get('code')} -> {code_version()}")
        if diffs:
            stale[plan.cell.id] = ", ".join(diffs)
    return stale


def check_not_stale(plans: list[CellPlan]) -> None:
    """Refuse to reuse started cells (finished or interrupted) whose saved train/eval configs differ from the
    current ones: their results would silently mix two experiments in one table, or two configs in one run."""
    stale = stale_cells(plans)
    if stale:
        shown = "; ".join(f"{cid} ({what})" for cid, what in list(stale.items())[:4])
        more = f"; and {len(stale) - 4} more cells" if len(stale) > 4 else ""
        raise UserError(f"cells were started with a different config: {shown}{more}; use a new out=... folder, or "
                        f"pass --rerun-stale to run those cells again (each replaced when its new run is done)")


def _remove(folder: Path) -> None:
    """Delete a cell folder (renamed away first, so a kill never leaves a half-deleted cell behind)."""
    doomed = folder.with_name(f".{folder.name}.deleting")
    shutil.rmtree(doomed, ignore_errors=True)
    os.replace(folder, doomed)
    shutil.rmtree(doomed)


def _set_aside(plan: CellPlan) -> Path:
    return plan.dir.with_name(f".{plan.dir.name}.replaced")


def cell_lock(plan: CellPlan, wait: bool = True) -> FolderLock:
    """The exclusive lock on running one cell (``cells/.<id>.lock``): another run of the experiment holding it is
    waited for (one line says which), or with ``wait=False`` refused (UserError)."""
    def waiting(holder: str) -> None:
        print(f"[{plan.cell.id}] being run by another goldfish process ({holder}): waiting for it", file=sys.stderr)

    return FolderLock(plan.dir, wait=wait, on_wait=waiting)


def recover_replaced(plans: list[CellPlan]) -> None:
    """After a kill during ``--rerun-stale``: drop the old cell if the new one finished, else put the old one back
    (the unfinished new one is deleted; ``--rerun-stale`` starts it again). A cell another run holds is its own."""
    for plan in plans:
        if _set_aside(plan).is_dir():
            with contextlib.suppress(UserError), cell_lock(plan, wait=False):
                _recover(plan)


def _recover(plan: CellPlan) -> None:
    old = _set_aside(plan)
    if not old.is_dir():
        return
    if plan.done:
        _remove(old)
        return
    if plan.dir.exists():
        _remove(plan.dir)
    os.replace(old, plan.dir)


@contextlib.contextmanager
def _replacing(plan: CellPlan):
    """Run a stale cell again from scratch; its old folder is set aside by one rename and deleted only when the new
    cell is done, or put back if the block fails."""
    old = _set_aside(plan)
    os.replace(plan.dir, old)
    try:
        yield
    except BaseException:
        if plan.dir.exists():
            _remove(plan.dir)
        os.replace(old, plan.dir)
        raise
    _remove(old)


def run_cell(cfg: ExperimentConfig, plan: CellPlan, pipeline: Pipeline,
             phase: Callable[[str], None] = lambda _: None, plans: list[CellPlan] = ()) -> dict:
    """Run (or resume) one cell; returns its record (also written to ``<cell>/cell.json``), or {} when the cell
    stops before its attacks phase because its grid point's control is not done (a later run finishes it).

    A control cell trains nothing (``control_mode: untrained``): from scratch it saves the initial weights,
    fine-tuning it evaluates the starting model itself; its ``train/summary.json`` records zero steps and tokens.
    With ``control_mode: background`` it trains like an arm, on the rows without the members. ``plans`` (all cells) lets the analysis
    phase find the control cell whose model calibrates this one.
    """
    times: dict[str, float] = {}
    for prepare_cfg, data_dir in [(plan.prepare_cfg, plan.data_dir)] + ([plan.train_data] if plan.train_data else []):
        if (data_dir / "manifest.json").is_file():
            continue
        # cells of two shards may share prepared data: the second waits for the first, then finds it ready
        with FolderLock(data_dir.with_name(f"{data_dir.name}.prepare"), wait=True):
            if not (data_dir / "manifest.json").is_file():
                phase("prepare")
                t0 = time.perf_counter()
                pipeline.prepare(prepare_cfg, out=data_dir, overwrite=False, progress=False)
                times["prepare_s"] = times.get("prepare_s", 0.0) + time.perf_counter() - t0
    # before training starts: a killed cell's configs then describe exactly what its partial outputs were made with
    save_config(plan.train_cfg, plan.dir / "train_config.yaml")
    save_config(plan.eval_cfg, plan.dir / "eval_config.yaml")
    if not (plan.train_dir / "summary.json").is_file():
        phase("train")
        t0 = time.perf_counter()
        if not plan.trains:
            if plan.start_model is None:
                pipeline.initial_model(plan.train_cfg)
            atomic_write_json(plan.train_dir / "summary.json",
                              {"control": True, "steps": 0, "tokens": 0, "model": plan.eval_cfg.model.path})
        elif cfg.launcher == "torchrun":
            _torchrun_train(cfg, plan)
        else:
            pipeline.train(plan.train_cfg)
        times["train_s"] = time.perf_counter() - t0
    # one model for every phase after training: loaded by the first phase that runs, never by a finished cell
    model = pipeline.open_model(plan.eval_cfg) if pipeline.open_model is not None else None
    if not (plan.eval_dir / "results.json").is_file():
        phase("eval")
        t0 = time.perf_counter()
        pipeline.evaluate(plan.eval_cfg, model)
        times["eval_s"] = time.perf_counter() - t0
    if pipeline.baseline is not None and not plan.cell.control and not (plan.eval_dir / "k_baseline.json").is_file():
        phase("k baseline")  # Goldfish cells only: g and (1 - g/k)^S, next to exact match in the report
        pipeline.baseline(plan, model)
    if pipeline.exposure is not None and not (plan.dir / EXPOSURE_FILE).is_file():
        phase("exposure")  # what the model read (from the rows training consumed), validation loss
        pipeline.exposure(plan, model)
    if pipeline.analyse is not None and not (plan.dir / ATTACKS_FILE).is_file():
        control = control_of(plan, plans)
        if control is not None and not control.done:
            with cell_lock(control):  # another run may be running it: wait for that
                pass
            if not control.done:  # its reference attack and leakage audit need the control's scores
                print(f"[{plan.cell.id}] trained and evaluated; its attacks wait for {control.cell.id}, which is not "
                      f"done: run that cell (its shard, or the experiment without --only) and this one again",
                      file=sys.stderr)
                return {}
        phase("attacks")
        t0 = time.perf_counter()
        pipeline.analyse(plan, list(plans), model)
        times["attacks_s"] = time.perf_counter() - t0
    if pipeline.card is not None:
        pipeline.card(plan)  # the same numbers replace themselves when an interrupted cell runs this again
    record = {
        "cell": plan.cell.id, "arm": plan.cell.arm, "values": plan.cell.values, "overrides": plan.cell.overrides,
        "data_dir": str(plan.data_dir), "finished": _now(), "phase_seconds_this_run": times,
    }
    atomic_write_json(plan.dir / "cell.json", record)
    atomic_write_json(plan.dir / DONE, {"finished": record["finished"]})  # last: the cell is complete
    return record


def check_start_models(plans: list[CellPlan]) -> None:
    """Every starting model of these cells exists (a per-cell ``base_model`` or ``train.model.path`` is only checked
    here, when cells are about to run, so --dry-run and --list work without the weights); one ConfigError if not."""
    missing: dict[str, list[str]] = {}
    for plan in plans:
        if plan.start_model and not Path(plan.start_model).expanduser().exists():
            missing.setdefault(plan.start_model, []).append(plan.cell.id)
    if missing:
        where = "; ".join(f"{path} (cells {', '.join(ids[:3])}{' ...' if len(ids) > 3 else ''})"
                          for path, ids in missing.items())
        raise ConfigError(f"starting model not found: {where}; give local Hugging Face folders (base_model or "
                          f"train.model.path), or run the other cells with --only")


def experiment_folder(cfg: ExperimentConfig):
    """Lock the experiment's folder and refuse one that holds anything but an experiment (one written before
    ownership markers is known by its ``experiment.yaml``); yields :class:`goldfish.ownership.OutputFolder`."""
    return writing(cfg.out_dir, "experiment", legacy=lambda folder: (folder / "experiment.yaml").is_file(),
                   shared=True)


def one_at_a_time(cfg: ExperimentConfig) -> FolderLock:
    """Held (``.<name>.steps.lock`` beside the folder) while a run of the experiment claims, checks and marks its
    folder, and while it (or ``--report-only``) aggregates the finished cells into results and report: the steps
    that runs sharing the folder must not interleave. Another run waits for it."""
    out = check_target(cfg.out_dir)  # first: `.`, `..`, a file ... are one line, before anything is created
    return FolderLock(out.with_name(f"{out.name}.steps"), wait=True)


def mark_experiment(folder: OutputFolder, cfg: ExperimentConfig) -> None:
    """Give a new experiment folder (or one from before markers) its ownership marker: the fingerprint of the config
    that created it (later configs live in the cells; rewriting it would change a folder a refused run left)."""
    if read_owner(folder.path) is None:
        folder.mark(fingerprint_sha256(to_dict(cfg)))


def run_experiment(cfg: ExperimentConfig, pipeline: Pipeline | None = None, *, progress: bool = True,
                   only: Callable[[str], bool] | None = None, rerun_stale: bool = False) -> Path:
    """Run every unfinished cell, then aggregate results and write the report. Returns the output folder.

    Started cells whose saved configs differ from the current ones are refused (one line, nothing written), or
    with ``rerun_stale`` run again from scratch, each replacing its old cell only when done; every cell's inputs
    (starting models) are checked before any cell is touched."""
    pipeline = pipeline or default_pipeline()
    plans = plan_cells(cfg, pipeline)  # fail fast: every cell's config is valid before any work
    with contextlib.ExitStack() as held:
        with one_at_a_time(cfg):
            folder = held.enter_context(experiment_folder(cfg))  # shared with the experiment's other runs
            recover_replaced(plans)
            stale = stale_cells(plans)
            wanted = [p for p in plans if only is None or only(p.cell.id)]
            rerun = {p.cell.id for p in wanted if p.cell.id in stale} if rerun_stale else set()
            check_not_stale([p for p in plans if p.cell.id not in rerun])
            todo = [p for p in wanted if not p.done or p.cell.id in rerun]
            check_start_models(todo)
            mark_experiment(folder, cfg)  # after every refusal: a refused run writes nothing
        start = time.perf_counter()
        _run_cells(cfg, plans, todo, pipeline, progress, {cid: stale[cid] for cid in rerun})
        with one_at_a_time(cfg):
            results = aggregate(cfg, active(cfg, plans), wall_time_s=time.perf_counter() - start,
                                tune=tune_summary(cfg, plans))
            save_config(cfg, cfg.out_dir / "experiment.yaml")  # with the report: the config of these results
            write_study_report(cfg, results, cfg.out_dir)
    return cfg.out_dir


def _run_cells(cfg: ExperimentConfig, plans: list[CellPlan], todo: list[CellPlan], pipeline: Pipeline,
               progress: bool, rerun: dict[str, str]) -> None:
    """Run the cells ``todo`` (tuning cells first); ``rerun``: {cell id: what changed} of stale cells to replace."""
    first = first_values(plans)
    if cfg.tune.axis:  # the tuning cells first: the others wait for their choice
        todo = sorted(todo, key=lambda p: not is_tuning(cfg, p, first))
    chosen = None
    bar = tqdm(total=len(todo), unit="cell", desc=cfg.name,
               disable=None if progress else True, dynamic_ncols=True)  # None: drawn only on a terminal
    try:
        for plan in todo:
            def phase(name: str, _id: str = plan.cell.id) -> None:
                bar.set_postfix_str(f"{_id}: {name}")

            if cfg.tune.axis and not is_tuning(cfg, plan, first):
                if chosen is None:  # once: every tuning cell in todo ran before the first other cell
                    chosen = choice(cfg, plans)
                runs = selected(cfg, plan, chosen)
                if not runs:
                    if runs is None:
                        print(f"[{plan.cell.id}] skipped: its tuning cells ({cfg.tune.axis}) are not done; run them "
                              "first", file=sys.stderr)
                    bar.update(1)
                    continue
            with cell_lock(plan):
                if plan.cell.id in rerun and plan.cell.id in stale_cells([plan]):
                    print(f"[{plan.cell.id}] config changed ({rerun[plan.cell.id]}): running it again",
                          file=sys.stderr)
                    with _replacing(plan):
                        run_cell(cfg, plan, pipeline, phase, plans)
                elif not plan.done:  # another run may have finished it while this one waited
                    run_cell(cfg, plan, pipeline, phase, plans)
            bar.update(1)
    finally:
        bar.close()


def describe_plans(plans: list[CellPlan]) -> str:
    """One line per cell: id, state, data folder -- for ``--list``."""
    lines = []
    for p in plans:
        state = "done" if p.done else ("trained" if (p.train_dir / "summary.json").is_file() else "todo")
        lines.append(f"{p.cell.id:<48} {state:<8} data={p.data_dir}")
    return "\n".join(lines)
