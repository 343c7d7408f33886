"""Run an experiment: every unfinished cell (its phases: :mod:`goldfish.experiment.phases`), then
:func:`goldfish.experiment.finish.finish` (results and report). A cell's ``DONE`` marker is written last, so a rerun
skips exactly the finished cells and redoes only the one that was interrupted.

A cell's resolved ``train_config.yaml`` and ``eval_config.yaml`` are written before its training starts, and every
later run compares what they determine -- by ``goldfish train``'s and ``goldfish eval``'s own fingerprints -- with the
current ones for every started cell (one with a ``train/`` folder), finished or not, so one cell never mixes two
configurations (``rerun_stale`` runs such cells again from scratch instead: the
old cell is set aside as ``cells/.<id>.replaced`` and deleted only when the new one is done; a failure puts it back,
and so does the next start after a kill).

The experiment folder is locked while a run writes it (``goldfish.ownership.writing``) and carries the experiment's
ownership marker; a non-empty folder that is not an experiment's is refused. Runs of one experiment share that lock,
so shards (``--only``) run side by side: each cell runs under its own exclusive lock (``cells/.<id>.lock``; a cell
another run holds is waited for, then skipped if that run finished it -- and refused if it ran it with another config,
its saved configs being re-read under the lock), prepared data shared by cells of two shards is prepared once (the
other waits), and the results and report are written by one run at a time.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from goldfish.eval.inputs import load_eval_documents
from goldfish.eval.state import documents_sha256

from ..config import flatten, load_config, to_dict
from ..errors import ConfigError, UserError
from ..hardware import apply_threads
from ..io import remove_tree
from ..ownership import FolderLock, OutputFolder, check_target, fingerprint_sha256, read_owner, writing
from ..provenance import code_version, differences, read_fingerprint
from .config import ExperimentConfig
from .finish import finish
from .phases import prepare_data, run_cell
from .pipeline import default_pipeline
from .plan import CellPlan, Pipeline, manifest_of, plan_cells
from .tune import choice, first_values, is_tuning, loss_only, selected


def load_experiment(path: str | Path | None, overrides: list[str] = ()) -> ExperimentConfig:
    """YAML + ``key=value`` overrides -> a validated :class:`ExperimentConfig` (cells are checked by plan_cells)."""
    return load_config(ExperimentConfig, path, list(overrides))


def _every_setting(cfg: Any) -> dict[str, Any]:
    """A pipeline without its own fingerprint: every setting of the config counts."""
    return flatten(to_dict(cfg))


def stale_cells(plans: list[CellPlan], pipeline: Pipeline) -> dict[str, str]:
    """``{cell id: what differs}`` for started cells whose saved train/eval config determines other results than the
    current one -- by the commands' own fingerprints (``Pipeline.train.fingerprint``: ``goldfish train``'s, so a
    change ``goldfish train`` would resume through, such as logging, never makes a cell stale;
    ``Pipeline.evaluate.fingerprint``: ``goldfish eval``'s settings) -- or whose unfinished training or evaluation was
    started by another code version (which the trainer and ``goldfish eval`` would refuse to resume: said here,
    before any work)."""
    stale = {}
    for plan in plans:
        if not (plan.done or plan.train_dir.exists()):
            continue  # nothing trained yet (e.g. a config error stopped it): a changed config is simply used
        diffs = []
        for name, path, cls, current, settings in (
            ("train", plan.train_config_file, pipeline.train.config, plan.train_cfg, pipeline.train.fingerprint),
            ("eval", plan.eval_config_file, pipeline.evaluate.config, plan.eval_cfg, pipeline.evaluate.fingerprint),
        ):
            if not path.is_file():
                continue
            settings = settings or _every_setting
            try:
                saved = settings(load_config(cls, path))
            except ConfigError as e:
                diffs.append(f"{name}: its saved config no longer loads ({e})")
                continue
            diffs += [f"{name}.{d}" for d in differences(saved, settings(current))[:3]]
        for folder, finished in ((plan.train_dir, plan.train_summary), (plan.eval_dir, plan.results_file)):
            started = read_fingerprint(folder) if folder.is_dir() else None
            if started and not finished.is_file() and started.get("code") != code_version():
                diffs.append(f"{folder.name} code: {started.get('code')} -> {code_version()}")
        if diffs:
            stale[plan.cell.id] = ", ".join(diffs)
    return stale


def check_not_stale(plans: list[CellPlan], pipeline: Pipeline) -> None:
    """Refuse to reuse started cells (finished or interrupted) whose saved train/eval configs differ from the
    current ones in what determines their results: they would silently mix two experiments in one table, or two
    configs in one run."""
    stale = stale_cells(plans, pipeline)
    if stale:
        shown = "; ".join(f"{cid} ({what})" for cid, what in list(stale.items())[:4])
        more = f"; and {len(stale) - 4} more cells" if len(stale) > 4 else ""
        raise UserError(
            f"cells were started with a different config: {shown}{more}; use a new out=... folder, or "
            f"pass --rerun-stale to run those cells again (each replaced when its new run is done)"
        )


def recover_replaced(plans: list[CellPlan]) -> None:
    """After a kill during ``--rerun-stale``: drop the old cell if the new one finished, else put the old one back
    (the unfinished new one is deleted; ``--rerun-stale`` starts it again). A cell another run holds is its own."""
    for plan in plans:
        if plan.set_aside.is_dir():
            with contextlib.suppress(UserError), plan.lock(wait=False):
                _recover(plan)


def _recover(plan: CellPlan) -> None:
    old = plan.set_aside
    if not old.is_dir():
        return
    if plan.done:
        remove_tree(old)
        return
    if plan.dir.exists():
        remove_tree(plan.dir)
    os.replace(old, plan.dir)


@contextlib.contextmanager
def _replacing(plan: CellPlan):
    """Run a stale cell again from scratch; its old folder is set aside by one rename and deleted only when the new
    cell is done, or put back if the block fails."""
    old = plan.set_aside
    os.replace(plan.dir, old)
    try:
        yield
    except BaseException:
        if plan.dir.exists():
            remove_tree(plan.dir)
        os.replace(old, plan.dir)
        raise
    remove_tree(old)


def restore_prepared(plans: list[CellPlan], pipeline: Pipeline) -> None:
    """Prepare again the data of finished cells whose prepared folders are gone -- prepared data is never kept with
    results, so a run folder restored from its cells' files (weights and prepared data left out) has none, and the
    report reads it. Preparing is deterministic; a folder prepared again must hold the documents each finished cell
    was evaluated on (its eval fingerprint's ``data_sha256``: members, nonmembers and canaries, ids, labels and
    tokens): a changed recipe or preparing code is one line, not a report on documents the cells never saw. (The
    training rows' own hash, ``data.sha256`` of the train fingerprint, is content only since 2026-12-06, but cells
    trained before recorded one that covered the preparing code's version, so it is not compared here.)"""
    remade: set[Path] = set()
    for plan in plans:
        if not plan.done:
            continue
        for prepare_cfg, data_dir in plan.prepared:
            if not manifest_of(data_dir).is_file():
                print(f"preparing {data_dir} again: finished cells read it and it is gone", file=sys.stderr)
            if prepare_data(pipeline, prepare_cfg, data_dir):
                remade.add(data_dir)
    hashes: dict[tuple, str] = {}
    for plan in (p for p in plans if p.done and p.data_dir in remade):  # only what was prepared again is read
        recorded = (read_fingerprint(plan.eval_dir) or {}).get("data_sha256")
        if recorded is None:
            continue
        d = plan.eval_cfg.data
        key = (d.path, d.nonmembers, d.max_docs, d.group_field, d.text_field)
        if key not in hashes:
            hashes[key] = documents_sha256(load_eval_documents(*key[:2], None, *key[2:])[0])
        if hashes[key] != recorded:
            raise UserError(
                f"{plan.data_dir} was prepared again for the finished cell {plan.cell.id}, but holds other "
                f"documents than it was evaluated on (sha256 {hashes[key]} vs {recorded}): the recipe or "
                f"the code that prepares it changed; restore the cells' prepared data, or use a new "
                f"out=... folder and run them again"
            )


def check_start_models(plans: list[CellPlan]) -> None:
    """Every starting model of these cells exists (a per-cell ``base_model`` or ``train.model.path`` is only checked
    here, when cells are about to run, so --dry-run and --list work without the weights); one ConfigError if not."""
    missing: dict[str, list[str]] = {}
    for plan in plans:
        if plan.start_model and not Path(plan.start_model).expanduser().exists():
            missing.setdefault(plan.start_model, []).append(plan.cell.id)
    if missing:
        where = "; ".join(
            f"{path} (cells {', '.join(ids[:3])}{' ...' if len(ids) > 3 else ''})" for path, ids in missing.items()
        )
        raise ConfigError(
            f"starting model not found: {where}; give local Hugging Face folders (base_model or "
            f"train.model.path), or run the other cells with --only"
        )


def experiment_folder(cfg: ExperimentConfig):
    """Lock the experiment's folder and refuse one that holds anything but an experiment (its ownership marker: a
    folder without one is never adopted); yields :class:`goldfish.ownership.OutputFolder`."""
    return writing(cfg.out_dir, "experiment", shared=True)


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


def run_experiment(
    cfg: ExperimentConfig,
    pipeline: Pipeline | None = None,
    *,
    progress: bool = True,
    only: Callable[[str], bool] | None = None,
    rerun_stale: bool = False,
) -> Path:
    """Run every unfinished cell, then aggregate results and write the report. Returns the output folder.

    Started cells whose saved configs differ from the current ones are refused (one line, nothing written), or
    with ``rerun_stale`` run again from scratch, each replacing its old cell only when done; every cell's inputs
    (starting models) are checked before any cell is touched."""
    pipeline = pipeline or default_pipeline()
    if cfg.threads is not None:  # the command applies the default (goldfish.commands.experiment)
        apply_threads(cfg.threads)
    plans = plan_cells(cfg, pipeline)  # fail fast: every cell's config is valid before any work
    with contextlib.ExitStack() as held:
        with one_at_a_time(cfg):
            folder = held.enter_context(experiment_folder(cfg))  # shared with the experiment's other runs
            recover_replaced(plans)
            stale = stale_cells(plans, pipeline)
            wanted = [p for p in plans if only is None or only(p.cell.id)]
            rerun = {p.cell.id for p in wanted if p.cell.id in stale} if rerun_stale else set()
            check_not_stale([p for p in plans if p.cell.id not in rerun], pipeline)
            todo = [p for p in wanted if not p.done or p.cell.id in rerun]
            check_start_models(todo)
            mark_experiment(folder, cfg)  # after every refusal: a refused run writes nothing
        _run_cells(cfg, plans, todo, pipeline, progress, {cid: stale[cid] for cid in rerun})
        with one_at_a_time(cfg):
            restore_prepared(plans, pipeline)
            finish(cfg, plans)
    return cfg.out_dir


def report_only(cfg: ExperimentConfig, plans: list[CellPlan], pipeline: Pipeline) -> dict:
    """``--report-only``: put back a cell a killed ``--rerun-stale`` set aside, refuse cells made with another config
    (they are not this config's results), prepare again the data of finished cells where it is gone
    (:func:`restore_prepared`), then write what a full run writes at its end
    (:func:`goldfish.experiment.finish.finish`) from the cells finished so far; runs no cell."""
    with one_at_a_time(cfg), experiment_folder(cfg) as folder:
        recover_replaced(plans)
        check_not_stale(plans, pipeline)
        mark_experiment(folder, cfg)
        restore_prepared(plans, pipeline)
        return finish(cfg, plans)


def _run_cells(
    cfg: ExperimentConfig,
    plans: list[CellPlan],
    todo: list[CellPlan],
    pipeline: Pipeline,
    progress: bool,
    rerun: dict[str, str],
) -> None:
    """Run the cells ``todo`` (tuning cells first); ``rerun``: {cell id: what changed} of stale cells to replace.
    With :func:`goldfish.experiment.tune.loss_only`, every tuning cell first computes only its validation loss; then
    each is evaluated in full only where its value is chosen."""
    first, light = first_values(plans), loss_only(cfg)
    if cfg.tune.axis:  # the tuning cells first, the control's among them (an arm's attacks wait for its choice)
        todo = sorted(todo, key=lambda p: (not is_tuning(cfg, p, first), not p.cell.control))
    chosen = None
    bar = tqdm(
        total=len(todo), unit="cell", desc=cfg.name, disable=None if progress else True, dynamic_ncols=True
    )  # None: drawn only on a terminal
    try:
        for plan in [p for p in todo if light and is_tuning(cfg, p, first)]:  # what the choice reads, first
            _run_one(cfg, plan, pipeline, plans, rerun, bar, tuning_only=True)
        for plan in todo:
            tuning = is_tuning(cfg, plan, first)
            if cfg.tune.axis and (light or not tuning):
                if chosen is None:  # once: every tuning cell in todo ran (or computed its loss) before
                    chosen = choice(cfg, plans)
                runs = selected(cfg, plan, chosen)
                if not runs:
                    if runs is None:
                        print(
                            f"[{plan.cell.id}] "
                            + (
                                f"trained, its validation loss written; its evaluation waits for the choice of "
                                f"{cfg.tune.axis}, whose other tuning cells are not done: run them, then this again"
                                if tuning
                                else f"skipped: its tuning cells ({cfg.tune.axis}) are not done; run them first"
                            ),
                            file=sys.stderr,
                        )
                    bar.update(1)
                    continue
            _run_one(cfg, plan, pipeline, plans, rerun, bar)
            bar.update(1)
    finally:
        bar.close()


def _run_one(
    cfg: ExperimentConfig,
    plan: CellPlan,
    pipeline: Pipeline,
    plans: list[CellPlan],
    rerun: dict[str, str],
    bar: Any,
    tuning_only: bool = False,
) -> None:
    """Run (or resume) one cell under its lock (``tuning_only``: the phases a tuning cell is read for)."""

    def phase(name: str, _id: str = plan.cell.id) -> None:
        bar.set_postfix_str(f"{_id}: {name}")

    with plan.lock():
        # checked again under the cell's lock: another run may have started or finished it meanwhile, with another
        # config (its saved train/eval configs are the cell's fingerprint)
        changed = stale_cells([plan], pipeline).get(plan.cell.id)
        if changed and plan.cell.id in rerun:
            print(f"[{plan.cell.id}] config changed ({changed}): running it again", file=sys.stderr)
            with _replacing(plan):
                run_cell(cfg, plan, pipeline, phase, plans, tuning_only=tuning_only)
        elif changed:
            raise UserError(
                f"cell {plan.cell.id} was run meanwhile by another goldfish process with a different "
                f"config ({changed}); it is not this run's: use another out= folder, or pass "
                f"--rerun-stale to replace it"
            )
        elif not plan.done:  # another run may have finished it while this one waited
            run_cell(cfg, plan, pipeline, phase, plans, tuning_only=tuning_only)


def describe_plans(plans: list[CellPlan]) -> str:
    """One line per cell: id, state, data folder -- for ``--list``."""
    lines = []
    for p in plans:
        state = "done" if p.done else ("trained" if p.train_summary.is_file() else "todo")
        lines.append(f"{p.cell.id:<48} {state:<8} data={p.data_dir}")
    return "\n".join(lines)
