"""Resolve every cell into real prepare/train/eval configs -- all of them, before anything runs.

The :class:`Pipeline` names the three config classes and the functions a cell calls. The toolkit's own one is
:func:`goldfish.experiment.pipeline.default_pipeline`; tests inject fakes with the same shape.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Sequence

from ..config import from_dict, merged
from ..errors import ConfigError
from .config import Cell, ExperimentConfig, HardwareConfig, data_hash, expand_cells, hardware_for, legacy_data_hashes
from .config import load_data_recipe, resolve_base_model, split_overrides

DONE = "DONE"  # a cell's completion marker (see goldfish.experiment.runner)

# Keys the runner sets in every cell (they wire the three phases together; a user value for them is replaced).
TRAIN_WIRING = {"data": "data.path", "out": "out"}
EVAL_WIRING = {"model": "model.path", "data": "data.path", "out": "out"}
ATTACKS_FILE = "attacks.json"  # a cell's extra analysis (goldfish.experiment.analysis)
EXPOSURE_FILE = "exposure.json"  # what a cell's model read, and its validation loss (goldfish.experiment.exposure)
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


@dataclasses.dataclass
class Pipeline:
    """What a cell runs. ``prepare(cfg, out=, overwrite=False, progress=False) -> Path``, ``train(cfg) -> Path``,
    ``evaluate(cfg, model) -> dict`` (the ``goldfish-eval/1`` results); ``initial_model(train_cfg) -> Path`` writes the
    untrained model a from-scratch control cell evaluates to ``<train_cfg.out>/model``; ``baseline(plan, model)``
    (optional) writes the cell's k baseline after evaluation; ``analyse(plan, plans, model)`` writes the cell's
    ``attacks.json`` (None: skipped); ``exposure(plan, model)`` its ``exposure.json`` (None: skipped); ``card(plan)`` adds
    the cell's headline numbers to its trained model's card. ``open_model(eval_cfg)`` (optional) returns the handle
    ``model`` evaluate, baseline, exposure and analyse receive: the cell's model, loaded once, on first use, for every phase
    after training (None: each phase gets None and loads what it needs)."""

    prepare_config: type
    train_config: type
    eval_config: type
    prepare: Callable[..., Path]
    train: Callable[[Any], Path]
    evaluate: Callable[[Any], dict]
    initial_model: Callable[[Any], Path]
    baseline: Callable[["CellPlan", Any], Any] | None = None
    analyse: Callable[[Any, list, Any], dict] | None = None
    open_model: Callable[[Any], Any] | None = None
    exposure: Callable[["CellPlan", Any], dict] | None = None
    card: Callable[["CellPlan"], Any] | None = None


class _CellProblems(ConfigError):
    """One cell's problems, one message per section (kept apart so identical ones can be merged across cells)."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclasses.dataclass
class CellPlan:
    """A cell with its resolved configs and folders: ``<out>/cells/<id>/{train,eval}``, shared prepared data."""

    cell: Cell
    dir: Path
    data_dir: Path
    prepare_cfg: Any
    train_cfg: Any
    eval_cfg: Any
    hardware: HardwareConfig
    start_model: str | None = None  # the model a fine-tune starts from (None: from scratch)
    train_data: tuple[Any, Path] | None = None  # (prepare config, folder) it trains on when not data_dir's rows

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
    def train_dir(self) -> Path:
        return self.dir / "train"

    @property
    def eval_dir(self) -> Path:
        return self.dir / "eval"

    @property
    def model_dir(self) -> Path:
        """The trained model (Hugging Face format) the trainer exports into the cell's train folder."""
        return self.train_dir / "model"

    @property
    def done(self) -> bool:
        """The cell finished: its ``DONE`` marker (written last, atomically, by the runner) exists."""
        return (self.dir / DONE).is_file()

    def mask(self, prepared: Any) -> Any:
        """The Goldfish mask this cell's training applies (a ``GoldfishConfig``; None for the standard loss): what its
        run folder recorded (``mask.json``), or, before it has trained, what its config resolves to with the data's
        special ids -- the same function the trainer uses (``goldfish.train_config.goldfish_config``)."""
        from ..train_config import MASK_FILE, goldfish_config, read_mask_settings

        if (self.train_dir / MASK_FILE).is_file():
            return read_mask_settings(self.train_dir, prepared.tokenizer)
        return goldfish_config(self.train_cfg, prepared)


def _known_keys(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


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
    """``<prepared>/<data hash>``; or the folder the same data was prepared in before newer data keys existed, when
    only that one exists (so an older experiment folder keeps its data and its cells stay current)."""
    current = cfg.prepared_dir / data_hash(prepare_cfg)
    if not current.exists():
        for legacy in legacy_data_hashes(prepare_cfg):
            if (cfg.prepared_dir / legacy).exists():
                return cfg.prepared_dir / legacy
    return current


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
    try:
        start = starting_model(cfg, train, cell.overrides)
    except ConfigError as e:
        problems.append(f"base_model: {e}")
        start = ""
    data = merged(recipe, routed["data"])
    if start:  # the data follows the starting model's vocabulary (a recipe's BPE training corpus no longer applies)
        data = merged(data, {TOKENIZER_KEY: start, TOKENIZER_SOURCE_KEY: None})
    prepare_cfg = build(pipeline.prepare_config, data, "data")
    if cfg.tune.axis and cfg.tune.by == "validation_loss" and not getattr(prepare_cfg, "num_validation", 1):
        problems.append("data: tune.by=validation_loss needs validation documents: set data.num_validation "
                        "(e.g. 100)")
    data_dir = prepared_folder(cfg, prepare_cfg) if prepare_cfg is not None else cfg.prepared_dir / "invalid"
    cell_dir = cfg.out_dir / "cells" / cell.id
    train_data = None
    if cell.control and cfg.control_mode == "background" and prepare_cfg is not None:
        background_cfg = build(pipeline.prepare_config, merged(data, BACKGROUND_ONLY), "data")
        train_data = (background_cfg, prepared_folder(cfg, background_cfg))
    if start:
        train = merged(train, {MODEL_PATH_KEY: start})
    train_dir = train_data[1] if train_data else data_dir
    train = merged(train, {TRAIN_WIRING["data"]: str(train_dir), TRAIN_WIRING["out"]: str(cell_dir / "train")})
    train = _tracked(_quiet(train, pipeline.train_config), pipeline.train_config, cfg.name, cell.id)
    train_cfg = build(pipeline.train_config, train, "train")
    ev = merged(cfg.eval, routed["eval"])
    model = start if (cell.control and start and train_data is None) else str(cell_dir / "train" / "model")
    ev = merged(ev, {EVAL_WIRING["model"]: model, EVAL_WIRING["data"]: str(data_dir),
                     EVAL_WIRING["out"]: str(cell_dir / "eval")})
    eval_cfg = build(pipeline.eval_config, _quiet(ev, pipeline.eval_config), "eval")
    try:
        hardware = hardware_for(cfg, {k.partition(".")[2]: v for k, v in cell.overrides.items()
                                      if k.startswith("hardware.")})
    except ConfigError as e:
        problems.append(f"hardware: {e}")
        hardware = cfg.hardware
    if problems:
        raise _CellProblems(problems)
    return CellPlan(cell, cell_dir, data_dir, prepare_cfg, train_cfg, eval_cfg, hardware, start or None, train_data)


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


def control_of(plan: CellPlan, plans: Sequence[CellPlan]) -> CellPlan | None:
    """The control cell of ``plan``'s grid point, evaluated on the same data (None for a control itself, or
    without one): its scores calibrate the cell's reference attack and leakage audit."""
    if plan.cell.control:
        return None
    return next((p for p in plans if p.cell.control and p.cell.values == plan.cell.values
                 and p.data_dir == plan.data_dir), None)
