"""Resolve every cell into real prepare/train/eval configs -- all of them, before anything runs -- and name every
file of a cell (:class:`CellFolder`) and of the experiment (:class:`StudyFiles`): no other module spells a run file,
but a per-cell analysis (``goldfish.experiment.analyses``), which names its own output in its module.

The :class:`Pipeline` names the three config classes and the functions a cell calls. The toolkit's own one is
:func:`goldfish.experiment.pipeline.default_pipeline`; tests inject fakes with the same shape.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Sequence

from goldfish.eval.state import MEMBERSHIP_PARTIAL

from ..config import flatten, from_dict, merged
from ..errors import ConfigError
from ..ownership import FolderLock
from ..run_folder import TrainRun
from ..train_config import goldfish_config, read_mask_settings
from .config import ExperimentConfig, HardwareConfig, UtilityConfig, data_hash, hardware_for, load_data_recipe
from .config import resolve_base_model
from .grid import Cell, expand_cells, split_overrides

DONE = "DONE"  # a cell's completion marker, written last (see goldfish.experiment.phases)

# Keys the runner sets in every cell (they wire the three phases together; a user value for them is replaced).
TRAIN_WIRING = {"data": "data.path", "out": "out"}
EVAL_WIRING = {"model": "model.path", "data": "data.path", "out": "out"}
# the evaluation keeps its membership pass's per-token scores: the attacks phase reads them (one scoring pass)
EVAL_KEEPS_TOKENS = {"membership.keep_tokens": True}
MODEL_PATH_KEY = "model.path"  # in the train section: the model a fine-tune starts from
TOKENIZER_KEY = "tokenizer.name"  # in the data section: set to the starting model, so the vocabularies agree
TOKENIZER_SOURCE_KEY = "tokenizer.source"  # a trained BPE's corpus: cleared when the model brings its tokenizer
BACKGROUND_ONLY = {"train_members": False}  # the data of a control trained on the background alone


def starting_model(cfg: ExperimentConfig, train: dict, overrides: dict[str, Any] | None = None) -> str:
    """The cell's starting model ('' = none): its own ``train.model.path``, else its arm's or grid item's
    ``base_model`` (a keyword is resolved; a folder is checked when the cell runs), else the experiment's."""
    own = (train.get("model") or {}).get("path") if isinstance(train.get("model"), dict) else None
    if own:
        return str(own)
    if overrides and "base_model" in overrides:
        return resolve_base_model(str(overrides["base_model"] or ""), must_exist=False)
    return cfg.base_model


@dataclasses.dataclass(frozen=True)
class Step:
    """One of the tools a cell calls: its config class (``config``), ``run`` and, optionally, ``fingerprint(cfg)``:
    the flat settings that determine its results, by the command's own rules (``goldfish train``'s and ``goldfish
    eval``'s fingerprints): a started cell whose saved config gives other ones is stale (None: every setting
    counts)."""

    config: type
    run: Callable[..., Any]
    fingerprint: Callable[[Any], dict] | None = None


@dataclasses.dataclass(frozen=True)
class Train(Step):
    """Training: ``run(cfg) -> Path``; ``initial_model(train_cfg, out) -> Path`` writes the untrained model a
    from-scratch control cell evaluates to ``out`` (the cell's ``model_dir``)."""

    initial_model: Callable[[Any, Path], Path] | None = None


@dataclasses.dataclass(frozen=True)
class Evaluate(Step):
    """Evaluation: ``run(cfg, model) -> dict`` (the ``goldfish-eval/1`` results); ``card(plan)`` (optional) adds the
    cell's headline numbers to its trained model's card, after the analyses (None: no card phase)."""

    card: Callable[["CellPlan"], Any] | None = None


@dataclasses.dataclass
class Pipeline:
    """What a cell runs: ``prepare`` (``run(cfg, out=, overwrite=False, progress=False) -> Path``), ``train`` and
    ``evaluate`` (:class:`Step`, :class:`Train`, :class:`Evaluate`: each with its config class);
    ``open_model(eval_cfg)`` (optional) returns the handle ``model`` evaluation and the analyses receive: the cell's
    model, loaded once, on first use, for every phase after training (None: each phase gets None and loads what it
    needs); ``analyses``: the per-cell analyses the cell runs after evaluation, each in its phase's place in
    ``goldfish.experiment.analyses.ANALYSES`` (None: every one of them; a test fake lists its own, or none)."""

    prepare: Step
    train: Train
    evaluate: Evaluate
    open_model: Callable[[Any], Any] | None = None
    analyses: tuple | None = None


class _CellProblems(ConfigError):
    """One cell's problems, one message per section (kept apart so identical ones can be merged across cells)."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclasses.dataclass
class CellFolder:
    """Every file of a cell's folder ``<out>/cells/<id>``, named here once."""

    dir: Path

    @property
    def train_dir(self) -> Path:
        """The training run folder (``goldfish train``'s layout: config, metrics, checkpoints, model, summary)."""
        return self.dir / "train"

    @property
    def eval_dir(self) -> Path:
        """The evaluation's out folder (``goldfish eval``'s layout, eval/SCHEMA.md)."""
        return self.dir / "eval"

    @property
    def train_run(self) -> TrainRun:
        """The training run folder's files (``goldfish.run_folder.TrainRun``)."""
        return TrainRun(self.train_dir)

    @property
    def model_dir(self) -> Path:
        """The trained model (Hugging Face format) the trainer exports into the cell's train folder."""
        return self.train_run.model

    @property
    def train_summary(self) -> Path:
        """The trainer's ``summary.json``: written last, so the training phase is finished once it exists."""
        return self.train_run.summary

    @property
    def metrics_file(self) -> Path:
        """The trainer's per-step log (``metrics.jsonl``)."""
        return self.train_run.metrics

    @property
    def mask_file(self) -> Path:
        """The Goldfish mask training applied (``goldfish.train_config.write_mask_settings``)."""
        return self.train_run.mask

    @property
    def results_file(self) -> Path:
        """The evaluation's ``results.json`` (``goldfish-eval/1``)."""
        return self.eval_dir / "results.json"

    @property
    def membership_scores(self) -> Path:
        """The evaluation's per-document membership scores (``goldfish.eval.state``), kept after it finishes."""
        return self.eval_dir / MEMBERSHIP_PARTIAL

    @property
    def attacks_file(self) -> Path:
        """The cell's attacks analysis (``goldfish.experiment.analyses.attacks``)."""
        return self.dir / "attacks.json"

    @property
    def train_config_file(self) -> Path:
        """The cell's resolved train config, saved before it trains (what its outputs were made with)."""
        return self.dir / "train_config.yaml"

    @property
    def eval_config_file(self) -> Path:
        """The cell's resolved eval config, saved with the train config."""
        return self.dir / "eval_config.yaml"

    @property
    def record_file(self) -> Path:
        """``cell.json``: the cell's id, arm, values, overrides, data folder and this run's phase times."""
        return self.dir / "cell.json"

    @property
    def done_file(self) -> Path:
        """The completion marker, written last and atomically."""
        return self.dir / DONE

    @property
    def done(self) -> bool:
        """The cell finished: its ``DONE`` marker exists."""
        return self.done_file.is_file()

    @property
    def set_aside(self) -> Path:
        """Where ``--rerun-stale`` keeps the old cell until the new one is done: ``cells/.<id>.replaced``."""
        return self.dir.with_name(f".{self.dir.name}.replaced")

    def lock(self, wait: bool = True) -> FolderLock:
        """The exclusive lock on running this cell (``cells/.<id>.lock``): another run of the experiment holding it is
        waited for (one line says which), or with ``wait=False`` refused (UserError)."""

        def waiting(holder: str) -> None:
            print(
                f"[{self.dir.name}] being run by another goldfish process ({holder}): waiting for it", file=sys.stderr
            )

        return FolderLock(self.dir, wait=wait, on_wait=waiting)


def manifest_of(prepared: Path) -> Path:
    """A prepared folder's ``manifest.json``: written last by ``goldfish prepare``, so the folder is complete once it
    exists."""
    return Path(prepared) / "manifest.json"


@dataclasses.dataclass
class CellPlan(CellFolder):
    """A cell with its resolved configs and folders: ``<out>/cells/<id>/{train,eval}``, shared prepared data."""

    cell: Cell
    data_dir: Path
    prepare_cfg: Any
    train_cfg: Any
    eval_cfg: Any
    hardware: HardwareConfig
    start_model: str | None = None  # the model a fine-tune starts from (None: from scratch)
    train_data: tuple[Any, Path] | None = None  # (prepare config, folder) it trains on when not data_dir's rows
    utility: UtilityConfig = dataclasses.field(default_factory=UtilityConfig)  # the experiment's utility check

    @property
    def trains(self) -> bool:
        """Whether the cell trains: every arm; a control only with ``control_mode: background``."""
        return not self.cell.control or self.train_data is not None

    @property
    def train_data_dir(self) -> Path:
        """The prepared folder whose rows it trains on (a background-trained control: the rows without members;
        it is evaluated, like every cell, on ``data_dir``: the same members, nonmembers and tokenizer)."""
        return self.train_data[1] if self.train_data is not None else self.data_dir

    @property
    def prepared(self) -> list[tuple[Any, Path]]:
        """(prepare config, folder) of every prepared folder the cell reads: its data, and its training data when
        that differs."""
        return [(self.prepare_cfg, self.data_dir)] + ([self.train_data] if self.train_data else [])

    def mask(self, prepared: Any) -> Any:
        """The Goldfish mask this cell's training applies (a ``GoldfishConfig``; None for the standard loss): what its
        run folder recorded (``mask.json``), or, before it has trained, what its config resolves to with the data's
        special ids -- the same function the trainer uses (``goldfish.train_config.goldfish_config``)."""
        if self.mask_file.is_file():
            return read_mask_settings(self.train_dir, prepared.tokenizer)
        return goldfish_config(self.train_cfg, prepared)


@dataclasses.dataclass(frozen=True)
class StudyFiles:
    """The experiment folder's own files, named here once: the study's outputs and the cells' folder."""

    out: Path

    @property
    def cells(self) -> Path:
        return Path(self.out) / "cells"

    @property
    def results(self) -> Path:
        """``results.json`` (``goldfish-experiment/1``, goldfish/experiment/SCHEMA.md)."""
        return Path(self.out) / "results.json"

    @property
    def table(self) -> Path:
        """``results.csv``: one row per cell x prefix length x repetition stratum."""
        return Path(self.out) / "results.csv"

    @property
    def summary(self) -> Path:
        """``summary.json``: the headline numbers per arm (or per cell)."""
        return Path(self.out) / "summary.json"

    @property
    def report(self) -> Path:
        return Path(self.out) / "report.md"

    @property
    def config(self) -> Path:
        """``experiment.yaml``: the config of these results."""
        return Path(self.out) / "experiment.yaml"


def _known_keys(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _has_key(cls: type, dotted: str) -> bool:
    """Whether the config class ``cls`` has the (nested) key ``dotted``."""
    head, _, rest = dotted.partition(".")
    if head not in _known_keys(cls):
        return False
    if not rest:
        return True
    inner = typing.get_type_hints(cls)[head]
    return dataclasses.is_dataclass(inner) and _has_key(inner, rest)


# without a bar the trainer prints every log_every steps; in a cell only the last, plus (when stdout is no terminal,
# e.g. a log file) one line per goldfish.train.LOG_INTERVAL_S seconds, so the experiment log shows training progress
QUIET_LOG_EVERY = 1_000_000


def _quiet(section: dict, cls: type) -> dict:
    """Inner progress bars and per-step log lines off (the experiment shows one bar over cells; every step is
    still in metrics.jsonl), unless the user set them."""
    keys = _known_keys(cls)
    if "progress" in keys and "progress" not in section:
        section = dict(section, progress=False)
    if "log_every" in keys and "log_every" not in section:
        section = dict(section, log_every=QUIET_LOG_EVERY)
    return section


def _tracked(section: dict, cls: type, group: str, name: str) -> dict:
    """The cell's TensorBoard/W&B run: named by the cell id, grouped by the experiment (unless the user named them)."""
    if "logging" not in _known_keys(cls):
        return section
    logging = dict(section.get("logging") or {})
    logging.setdefault("group", group)
    logging.setdefault("run_name", name)
    return dict(section, logging=logging)


def prepared_folder(cfg: ExperimentConfig, prepare_cfg: Any) -> Path:
    """``<prepared>/<data hash>``."""
    return cfg.prepared_dir / data_hash(prepare_cfg)


def plan_cell(cfg: ExperimentConfig, cell: Cell, pipeline: Pipeline, recipe: dict) -> CellPlan:
    """Build one cell's three configs through their dataclasses (raises ConfigError naming the section)."""
    routed = split_overrides(cell.overrides)
    problems: list[str] = []

    def build(cls: type, data: dict, section: str) -> Any:
        try:
            return from_dict(cls, data)
        except ConfigError as e:
            problems.append(f"{section}: {e}")
            return None

    train = merged(cfg.train, routed["train"])
    if cfg.threads is not None and "threads" not in flatten(train) and _has_key(pipeline.train.config, "threads"):
        train = merged(train, {"threads": cfg.threads})
    try:
        start = starting_model(cfg, train, cell.overrides)
    except ConfigError as e:
        problems.append(f"base_model: {e}")
        start = ""
    data = merged(recipe, routed["data"])
    if start:  # the data follows the starting model's vocabulary (a recipe's BPE training corpus no longer applies)
        data = merged(data, {TOKENIZER_KEY: start, TOKENIZER_SOURCE_KEY: None})
    prepare_cfg = build(pipeline.prepare.config, data, "data")
    if cfg.tune.axis and cfg.tune.by == "validation_loss" and not getattr(prepare_cfg, "num_validation", 1):
        problems.append("data: tune.by=validation_loss needs validation documents: set data.num_validation (e.g. 100)")
    data_dir = prepared_folder(cfg, prepare_cfg) if prepare_cfg is not None else cfg.prepared_dir / "invalid"
    folder = CellFolder(StudyFiles(cfg.out_dir).cells / cell.id)
    train_data = None
    if cell.control and cfg.control_mode == "background" and prepare_cfg is not None:
        background_cfg = build(
            pipeline.prepare.config, merged(data, {**BACKGROUND_ONLY, **flatten(cfg.control_data)}), "data"
        )
        train_data = (background_cfg, prepared_folder(cfg, background_cfg))
    if start:
        train = merged(train, {MODEL_PATH_KEY: start})
    train_dir = train_data[1] if train_data else data_dir
    train = merged(train, {TRAIN_WIRING["data"]: str(train_dir), TRAIN_WIRING["out"]: str(folder.train_dir)})
    train = _tracked(_quiet(train, pipeline.train.config), pipeline.train.config, cfg.name, cell.id)
    train_cfg = build(pipeline.train.config, train, "train")
    ev = merged(cfg.eval, routed["eval"])
    if (
        cfg.threads is not None
        and "model.threads" not in flatten(ev)
        and _has_key(pipeline.evaluate.config, "model.threads")
    ):
        ev = merged(ev, {"model.threads": cfg.threads})
    model = start if (cell.control and start and train_data is None) else str(folder.model_dir)
    ev = merged(
        ev,
        {
            EVAL_WIRING["model"]: model,
            EVAL_WIRING["data"]: str(data_dir),
            EVAL_WIRING["out"]: str(folder.eval_dir),
            **{k: v for k, v in EVAL_KEEPS_TOKENS.items() if _has_key(pipeline.evaluate.config, k)},
        },
    )
    eval_cfg = build(pipeline.evaluate.config, _quiet(ev, pipeline.evaluate.config), "eval")
    try:
        hardware = hardware_for(
            cfg, {k.partition(".")[2]: v for k, v in cell.overrides.items() if k.startswith("hardware.")}
        )
    except ConfigError as e:
        problems.append(f"hardware: {e}")
        hardware = cfg.hardware
    if problems:
        raise _CellProblems(problems)
    return CellPlan(
        folder.dir, cell, data_dir, prepare_cfg, train_cfg, eval_cfg, hardware, start or None, train_data, cfg.utility
    )


def plan_cells(cfg: ExperimentConfig, pipeline: Pipeline) -> list[CellPlan]:
    """Plans for every cell, or ONE ConfigError listing every distinct problem with the cells it affects."""
    recipe = load_data_recipe(cfg)
    cells = expand_cells(cfg)
    plans: list[CellPlan] = []
    problems: dict[str, list[str]] = defaultdict(list)  # message -> cell ids
    for cell in cells:
        try:
            plans.append(plan_cell(cfg, cell, pipeline, recipe))
        except _CellProblems as e:
            for message in e.problems:
                problems[message].append(cell.id)
    if problems:
        parts = []
        for message, ids in problems.items():
            where = "every cell" if len(ids) == len(cells) else ", ".join(ids[:3]) + (" ..." if len(ids) > 3 else "")
            parts.append(f"{message} [{where}]")
        raise ConfigError(f"experiment '{cfg.name}' has invalid cells: " + "; ".join(parts))
    return plans


def control_of(plan: CellPlan, plans: Sequence[CellPlan], values: dict | None = None) -> CellPlan | None:
    """The control cell at the grid point ``values`` (default: ``plan``'s own), evaluated on the same data (None for
    a control itself, or without one): its scores calibrate the cell's reference attack and leakage audit. Where
    each arm is tuned on its own cells, the caller passes ``plan``'s point with the tuned axis at the control's
    choice (:func:`goldfish.experiment.tune.control_point`)."""
    if plan.cell.control:
        return None
    values = plan.cell.values if values is None else values
    return next((p for p in plans if p.cell.control and p.cell.values == values and p.data_dir == plan.data_dir), None)
