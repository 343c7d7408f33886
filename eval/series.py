"""``goldfish eval`` over a series of models on the same data: a size family (``series.models``) or the checkpoints
of one training run (``series.checkpoints``), into one results folder.

Each model is evaluated by :func:`goldfish.eval.run.run_eval` with the same settings into ``<out>/models/<label>/eval``
(resumable window by window, fingerprinted like any evaluation); a checkpoint is first exported to a Hugging Face
folder ``<out>/models/<label>/model`` (:func:`goldfish.checkpoint.export_checkpoint`: safetensors read by name into
the architecture of the run's final ``model/``, never unpickled), removed again once the whole series is evaluated
unless ``series.keep_exports``. ``<out>/models/<label>/source.json`` records what was evaluated (path, step, tokens,
weight files' name/size/mtime); a model whose source and results are already there is not evaluated again, so a
rerun after a run wrote more checkpoints evaluates only the new ones. The series folder's own fingerprint covers the
evaluation settings, so one folder never mixes two; ``overwrite=true`` evaluates the whole series afresh beside
the old folder and replaces it when finished (``goldfish.ownership``).

For a run's checkpoints the labels are ``step_<N>`` (the final ``model/`` is the last, ``final: true``) and the reads
of every target up to each step are counted from the rows the trainer consumed (``goldfish.data.order.consumed_rows`` of
the run's ``config.yaml``). Outputs, written together at the end (analysis: :mod:`goldfish.eval.series_analysis`):
``series.json`` (schema ``goldfish-series/1``), ``series.csv`` (one row per model), ``trajectories.csv`` (one row per
window), ``report.md`` and plots.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from goldfish.checkpoint import COMPLETE, STATE_FILE, export_checkpoint, list_checkpoints
from goldfish.config import shown, to_dict
from goldfish.errors import UserError
from goldfish.io import atomic_write_json, read_json
from goldfish.ownership import component_problem, writing
from goldfish.provenance import refuse_mismatch
from goldfish.run_folder import TrainRun
from goldfish.train_config import TRAIN_OPTIONAL, saved_train_fingerprint

from .config import EvalConfig, SeriesSection
from .run import run_eval
from .series_analysis import analyse, checkpoint_reads, write_series
from .shard import Shard, current
from .state import OPERATIONAL, claim_folder, weights_stamp

SOURCE = "source.json"
MODELS = "models"
SERIES_KEYS = (
    "series.models",
    "series.labels",
    "series.checkpoints",
    "series.keep_exports",
    "series.memorized",
    "model.path",
)  # the list itself lives in each model's source.json; memorized only re-analyses


@dataclasses.dataclass(frozen=True)
class Entry:
    """One model of a series: a model path, or a checkpoint folder of ``run`` (exported before evaluation)."""

    label: str
    path: str
    checkpoint: bool = False
    step: int | None = None
    tokens: int | None = None
    run: str | None = None
    final: bool = False

    def stamp(self) -> list:
        """(name, bytes, mtime) of the weight files: what the source.json of the model records."""
        if self.checkpoint:
            f = Path(self.path) / "model_rank00000.safetensors"
            return [[f.name, f.stat().st_size, f.stat().st_mtime_ns]] if f.is_file() else []
        return weights_stamp(self.path)


AGAIN = "restore it, or train the run again"  # what to do about a damaged file of a run or its series


def _step_of(folder: Path, state: dict) -> int:
    """The step a checkpoint's trainer_state.json records; a damaged record is one line naming the checkpoint."""
    step = (state.get("progress") if isinstance(state.get("progress"), dict) else {}).get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise UserError(
            f"checkpoint {folder} is damaged (its trainer_state.json records no step); delete it or "
            f"restore it, then rerun the series"
        )
    return step


def run_entries(run: str | Path) -> list[Entry]:
    """The complete checkpoints of a training run folder, oldest first, then its final ``model/``. A checkpoint
    that another run (another fingerprint) wrote is refused, as the trainer refuses to resume from it."""
    run = Path(run).expanduser()
    if not run.is_dir():
        raise UserError(f"series.checkpoints={run} is not a folder; give a training run folder (with checkpoints/)")
    summary = TrainRun(run).read_summary()
    final_step = summary.get("steps")
    fingerprint = saved_train_fingerprint(run)
    out = []
    for folder in list_checkpoints(run):
        if not (folder / COMPLETE).is_file():
            continue
        if fingerprint is None:
            raise UserError(
                f"{run} has checkpoints but no fingerprint.json or config.yaml, so which run wrote them "
                "cannot be told; give the folder of the training run itself"
            )
        state = read_json(folder / STATE_FILE, {}, expect=dict, fix=AGAIN)
        refuse_mismatch(
            state.get("fingerprint"),
            fingerprint,
            f"checkpoint {folder}",
            f"it was not written by the run in {run}: move it out of {TrainRun(run).checkpoints}",
            TRAIN_OPTIONAL,
        )
        progress = state.get("progress")
        step = _step_of(folder, state)
        if step != final_step:  # the last checkpoint holds the final model/'s weights: evaluate that once
            out.append(Entry(f"step_{step:06d}", str(folder), True, step, progress.get("tokens"), str(run)))
    if TrainRun(run).has_model():
        out.append(
            Entry(
                f"step_{final_step:06d}" if final_step is not None else "final",
                str(TrainRun(run).model),
                False,
                final_step,
                summary.get("tokens"),
                str(run),
                final=True,
            )
        )
    if not out:
        raise UserError(
            f"{run} holds no complete checkpoint and no model/; train with checkpoint.every_steps=N "
            "checkpoint.keep_last=0 to keep a series of checkpoints"
        )
    return out


def series_entries(series: SeriesSection) -> list[Entry]:
    """The models of ``series``, in order (labels unique)."""
    if series.checkpoints:
        return run_entries(series.checkpoints)
    labels = series.labels or [
        Path(p).name if Path(p).name not in ("model", "train") else f"{Path(p).parent.name}-{Path(p).name}"
        for p in series.models
    ]
    for label, path in zip(labels, series.models):  # each names a folder <out>/models/<label>: it must stay inside
        problem = component_problem(label)
        if problem:
            given = "series.labels" if series.labels else f"the label taken from {path}"
            raise UserError(f"{given}: {shown(label)} {problem}; give series.labels, one plain name per model")
    if len(set(labels)) != len(labels):
        raise UserError(f"series.models give repeated labels {labels}; set series.labels")
    out = []
    for label, path in zip(labels, series.models):
        summary = TrainRun(path).read_summary()  # a training run folder says how long it trained
        out.append(Entry(label, path, step=summary.get("steps"), tokens=summary.get("tokens")))
    return out


def series_fingerprint(cfg: EvalConfig) -> dict[str, Any]:
    """What one series folder must hold for all its models: the evaluation settings (not the list of models)."""
    config = to_dict(cfg)
    for key in OPERATIONAL + SERIES_KEYS:
        section, _, name = key.rpartition(".")
        (config[section] if section else config).pop(name, None)
    return {"series": True, "config": config}


def _evaluate(cfg: EvalConfig, entry: Entry, folder: Path, shard: Shard) -> dict:
    """The results of one model of the series, evaluated now unless its source and results are there already. Rank
    0 checks, records and exports; under a split evaluation every rank then evaluates it (its share)."""
    done = None
    if shard.main:
        source = {**dataclasses.asdict(entry), "weights": entry.stamp()}
        saved = read_json(folder / SOURCE, {}, expect=dict, fix=AGAIN)
        if saved and saved != source:
            raise UserError(
                f"{folder} holds the evaluation of another model ({saved.get('path')}, or these weights "
                "before they changed); use another out folder, or overwrite=true to evaluate the series "
                "again"
            )
        results = folder / "eval" / "results.json"
        if saved == source and results.is_file():
            done = read_json(results, {}, expect=dict, fix=AGAIN)
        else:
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write_json(folder / SOURCE, source)
            if entry.checkpoint and not (folder / "model" / "config.json").is_file():
                export_checkpoint(entry.path, TrainRun(entry.run).model, str(folder / "model"))
    done = shard.broadcast(done)  # after rank 0's export: every rank can load it
    if done is not None:
        return done
    model = str(folder / "model") if entry.checkpoint else entry.path
    one = dataclasses.replace(
        cfg,
        out=str(folder / "eval"),
        report=False,
        series=SeriesSection(),
        model=dataclasses.replace(cfg.model, path=model),
    )
    return run_eval(one)


def run_series(cfg: EvalConfig) -> dict:
    """Evaluate every model of ``cfg.series`` on ``cfg.data`` into ``cfg.out`` and write the series analysis."""
    if cfg.model.path:
        raise UserError(
            "model.path (--model) and series.* are both set; a series evaluates series.models or "
            "series.checkpoints instead of one model"
        )
    if not cfg.data.path or not cfg.out:
        raise UserError(
            "a series needs --data and --out, e.g. goldfish eval series.checkpoints=runs/x/cells/"
            "standard/train --data runs/x/prepared/<hash> --out runs/x/series_standard"
        )
    entries = series_entries(cfg.series)
    fingerprint = series_fingerprint(cfg)
    # overwrite=true: the series is evaluated afresh beside the old folder, which it replaces when finished
    shard = current()
    with writing(cfg.out, "eval", replace=cfg.overwrite, option="overwrite=true", main=shard.main) as folder:
        out = Path(shard.broadcast(str(folder.path)))  # rank 0's (a staging folder while replacing)
        if shard.main:
            claim_folder(folder, fingerprint)  # refuses other evaluation settings before anything is written, marks it
        results = [_evaluate(cfg, e, out / MODELS / e.label, shard) for e in entries]
        reads = checkpoint_reads(entries, results)
        analysis = analyse(entries, results, cfg.series.memorized, reads)
        analysis["config"] = to_dict(cfg)
        if not shard.main:
            return analysis
        write_series(analysis, out, cfg.report)
        if not cfg.series.keep_exports:
            for e in entries:
                if e.checkpoint:
                    shutil.rmtree(out / MODELS / e.label / "model", ignore_errors=True)
    return analysis
