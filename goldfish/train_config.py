"""``TrainConfig``: every setting of ``goldfish train``, one typed section per component, the step plan it implies
(:func:`make_plan`, :func:`learning_rate`) and what a run folder records of it (the resolved Goldfish mask, the
train fingerprint).

Each component reads only its own section: the data loader ``data``, :func:`goldfish.models.build_model` ``model``,
the loss ``loss``, the schedule ``optim``/``schedule``, the engines ``engine``/``parallel``/``axonn``, the
checkpointer ``checkpoint``. Precedence: dataclass defaults < YAML file < ``key=value`` overrides
(:func:`goldfish.config.load_config`). Validation here is local (positive integers, known names); checks that need
the world size (mesh shape, batch divisibility) happen once the engine knows it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from pathlib import Path
from typing import Any, ClassVar, Literal, Union

from .config import check, check_seed, flatten, from_dict, load_config, option, raise_problems, shown, to_dict
from .errors import ConfigError, UserError
from .fold import token_fold
from .io import atomic_write_json, read_json
from .masks import GoldfishConfig
from .precision import canonical_precision
from .provenance import as_stored, code_version, read_fingerprint
from .run_folder import TrainRun
from .sizes import SIZES


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclasses.dataclass
class DataConfig:
    """Prepared data (the output of ``goldfish prepare``)."""

    path: str = option("data/prepared/wikipedia_demo", "prepared data folder (holds train/, manifest.json, tokenizer/)")
    shuffle: bool = option(True, "shuffle rows with a seeded permutation per epoch (false: file order)")


@dataclasses.dataclass
class ModelConfig:
    """Which Llama to train: a size from the table (``goldfish.sizes.SIZES``) or a local model to fine-tune."""

    name: str | None = option("llama-demo", "size from the table, e.g. llama-1M, llama-10M, tinyllama-1.1B")
    path: str | None = option(None, "local Hugging Face folder or .gguf file to fine-tune (overrides name)")
    hidden_size: int | None = option(None, "override: model width")
    num_layers: int | None = option(None, "override: number of transformer blocks")
    num_heads: int | None = option(None, "override: attention heads")
    num_kv_heads: int | None = option(None, "override: key/value heads (grouped-query attention)")
    intermediate_size: int | None = option(None, "override: MLP width")
    tie_embeddings: bool | None = option(None, "override: share input embedding and output head")
    max_position_embeddings: int | None = option(None, "override: longest sequence (default: the size's value)")

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(
            self.name is not None or self.path is not None,
            problems,
            "model: set model.name (a size, e.g. llama-1M) or model.path (a local model to fine-tune)",
        )
        for key in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            value = getattr(self, key)
            check(value is None or _positive(value), problems, f"{key}={shown(value)} must be a positive integer")
        if self.name is not None and self.path is None:
            check(
                self.name in SIZES,
                problems,
                f"name={shown(self.name)} is not a known size; choose one of: {', '.join(SIZES)}",
            )
        raise_problems(problems)


@dataclasses.dataclass
class LossConfig:
    """Standard causal-LM loss, or Goldfish loss (drop a pseudo-random 1/k of target tokens)."""

    type: Literal["standard", "goldfish"] = option("standard", "standard | goldfish")
    goldfish: GoldfishConfig = option(factory=GoldfishConfig, help="Goldfish mask settings (used when type=goldfish)")
    ce_chunk_tokens: int = option(
        0,
        "native engine: compute the CE from the final hidden states in chunks of this "
        "many tokens, never holding the whole (tokens, vocab) logits (0: whole logits; "
        "e.g. 1024 saves GiBs at vocab 32k-50k, costs one more head matmul)",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(
            isinstance(self.ce_chunk_tokens, int)
            and not isinstance(self.ce_chunk_tokens, bool)
            and self.ce_chunk_tokens >= 0,
            problems,
            f"ce_chunk_tokens={shown(self.ce_chunk_tokens)} must be an integer >= 0 (0: whole logits)",
        )
        raise_problems(problems)


@dataclasses.dataclass
class OptimConfig:
    """AdamW with linear warmup and cosine decay to ``min_lr_ratio * lr``."""

    lr: float = option(1e-3, "peak learning rate")
    betas: list[float] = option(factory=lambda: [0.9, 0.95], help="AdamW betas [beta1, beta2]")
    weight_decay: float = option(0.1, "AdamW decoupled weight decay (not applied to norms and biases)")
    eps: float = option(1e-8, "AdamW epsilon")
    warmup_frac: float = option(0.05, "fraction of all steps spent in linear warmup (ignored if warmup_steps set)")
    warmup_steps: int | None = option(None, "warmup length in steps (overrides warmup_frac)")
    min_lr_ratio: float = option(0.1, "final learning rate as a fraction of lr (cosine decay)")
    max_grad_norm: float | None = option(1.0, "clip the global gradient norm to this (null: no clipping)")

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(self.lr > 0, problems, f"lr={self.lr} must be > 0")
        check(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            problems,
            f"betas={self.betas} must be two numbers in [0, 1)",
        )
        check(self.weight_decay >= 0, problems, f"weight_decay={self.weight_decay} must be >= 0")
        check(self.eps > 0, problems, f"eps={self.eps} must be > 0")
        check(0 <= self.warmup_frac < 1, problems, f"warmup_frac={self.warmup_frac} must be in [0, 1)")
        check(
            self.warmup_steps is None or self.warmup_steps >= 0,
            problems,
            f"warmup_steps={self.warmup_steps} must be >= 0",
        )
        check(0 <= self.min_lr_ratio <= 1, problems, f"min_lr_ratio={self.min_lr_ratio} must be in [0, 1]")
        check(
            self.max_grad_norm is None or self.max_grad_norm > 0,
            problems,
            f"max_grad_norm={self.max_grad_norm} must be > 0 (or null for no clipping)",
        )
        raise_problems(problems)


@dataclasses.dataclass
class ScheduleConfig:
    """How long to train and how big a step is. Training stops at the first budget reached (none set: 1 epoch)."""

    epochs: float | None = option(None, "passes over the training rows (may be fractional)")
    max_steps: int | None = option(None, "optimizer steps")
    max_tokens: int | None = option(None, "token budget: input tokens seen (rounded up to whole steps)")
    global_batch_size: int = option(8, "rows per optimizer step, summed over data-parallel ranks")
    micro_batch_size: int = option(
        8,
        "rows per forward pass on one data-parallel rank (gradient accumulation = "
        "global_batch_size / (micro_batch_size * dp))",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(self.epochs is None or self.epochs > 0, problems, f"epochs={self.epochs} must be > 0")
        for key in ("max_steps", "max_tokens"):
            value = getattr(self, key)
            check(value is None or _positive(value), problems, f"{key}={shown(value)} must be a positive integer")
        for key in ("global_batch_size", "micro_batch_size"):
            value = getattr(self, key)
            check(_positive(value), problems, f"{key}={shown(value)} must be a positive integer")
        raise_problems(problems)


@dataclasses.dataclass
class ParallelConfig:
    """Mesh of the native engine. Checked against the world size by the engine."""

    tp: int = option(1, "tensor-parallel degree")
    pp: int = option(1, "pipeline-parallel stages")
    dp: int = option(0, "data-parallel degree (0: world_size / (tp * pp))")
    pp_schedule: Literal["gpipe", "1f1b"] = option("1f1b", "pipeline schedule: gpipe | 1f1b")
    pp_microbatches: int = option(0, "pipeline micro-batches per micro-batch (0: one per stage)")
    fsdp: bool = option(False, "shard parameters, gradients and optimizer state over data-parallel ranks (FSDP2)")
    fsdp_mixed_precision: bool = option(
        False,
        "with fsdp and precision=bf16: all-gather bf16 parameters and "
        "reduce-scatter fp32 gradients (FSDP2 MixedPrecisionPolicy; half the "
        "parameter traffic); fp32 master weights stay sharded",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(_positive(self.tp), problems, f"tp={shown(self.tp)} must be a positive integer")
        check(_positive(self.pp), problems, f"pp={shown(self.pp)} must be a positive integer")
        check(
            isinstance(self.dp, int) and self.dp >= 0,
            problems,
            f"dp={shown(self.dp)} must be an integer >= 0 (0: derived from the world size)",
        )
        check(
            isinstance(self.pp_microbatches, int) and self.pp_microbatches >= 0,
            problems,
            f"pp_microbatches={shown(self.pp_microbatches)} must be an integer >= 0",
        )
        raise_problems(problems)


@dataclasses.dataclass
class AxonnConfig:
    """AxoNN's 3D tensor-parallel grid (engine=axonn); data parallelism fills the rest of the world."""

    row: int = option(1, "tensor-parallel grid rows")
    col: int = option(1, "tensor-parallel grid columns")
    depth: int = option(1, "tensor-parallel grid depth")
    overlap_communication: bool = option(False, "overlap AxoNN's collectives with compute")

    def __post_init__(self) -> None:
        problems: list[str] = []
        for key in ("row", "col", "depth"):
            value = getattr(self, key)
            check(_positive(value), problems, f"{key}={shown(value)} must be a positive integer")
        raise_problems(problems)


@dataclasses.dataclass
class CheckpointConfig:
    """Atomic checkpoints with exact resume."""

    every_steps: int = option(100, "save every N optimizer steps (0: only at the end)")
    keep_last: int = option(
        2, "keep the newest N checkpoints (0: keep all); in a finished run model/ counts as the newest"
    )
    keep_optimizer: bool = option(
        False,
        "keep the optimizer state (and the final checkpoint) when the run finishes; "
        "false: a finished run keeps model/ and its earlier checkpoints' weights "
        "only (1/3 of the disk with AdamW), enough for a checkpoint series",
    )
    resume: str = option("auto", "auto (newest complete checkpoint in out/checkpoints) | never | <checkpoint path>")

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(
            isinstance(self.every_steps, int) and self.every_steps >= 0,
            problems,
            f"every_steps={shown(self.every_steps)} must be an integer >= 0",
        )
        check(
            isinstance(self.keep_last, int) and self.keep_last >= 0,
            problems,
            f"keep_last={shown(self.keep_last)} must be an integer >= 0",
        )
        check(bool(self.resume), problems, "resume must be auto, never or a checkpoint path")
        raise_problems(problems)


@dataclasses.dataclass
class LoggingConfig:
    """Where each step's metrics go besides ``metrics.jsonl`` (the same scalars, written by the main process only;
    see :mod:`goldfish.tracking`). Changes nothing a run computes: not part of its fingerprint."""

    tensorboard: bool = option(
        False,
        "write TensorBoard event files to <out>/tensorboard (needs the tensorboard "
        "extra: pip install -e '.[tensorboard]' in the checkout, docs/install.md)",
    )
    wandb: bool = option(
        False, "log a Weights & Biases run in <out>/wandb (needs the wandb extra); offline unless wandb_mode=online"
    )
    wandb_mode: Literal["offline", "online"] = option(
        "offline",
        "offline: no network, upload later with `wandb sync <out>/wandb/offline-run-*` | online: upload "
        "while training (needs your API key: WANDB_API_KEY or `wandb login`)",
    )
    project: str = option("goldfish", "W&B project")
    entity: str = option("", "W&B entity (team or user; empty: your default entity)")
    group: str = option("", "W&B group (goldfish experiment sets the experiment's name)")
    run_name: str = option("", "W&B run name (goldfish experiment sets the cell id; empty: the run folder's name)")

    def __post_init__(self) -> None:
        problems: list[str] = []
        for flag, package in (("tensorboard", "tensorboard"), ("wandb", "wandb")):
            check(
                not getattr(self, flag) or importlib.util.find_spec(package) is not None,
                problems,
                f"logging.{flag}=true needs the {package} package: pip install {package} (the toolkit's "
                f"'{package}' extra) or set logging.{flag}=false",
            )
        raise_problems(problems)


@dataclasses.dataclass
class TrainConfig:
    """Everything ``goldfish train`` needs; saved as ``<out>/config.yaml`` beside the run."""

    # goldfish.k (goldfish eval's spelling of the mask settings) = loss.goldfish.k (goldfish.config.aliases)
    ALIASES: ClassVar[dict[str, str]] = {"goldfish": "loss.goldfish"}

    data: DataConfig = option(factory=DataConfig, help="prepared data")
    model: ModelConfig = option(factory=ModelConfig, help="model size or local model")
    loss: LossConfig = option(factory=LossConfig, help="standard or Goldfish loss")
    optim: OptimConfig = option(factory=OptimConfig, help="optimizer and learning-rate schedule")
    schedule: ScheduleConfig = option(factory=ScheduleConfig, help="training length and batch sizes")
    precision: str = option(
        "auto",
        "auto | fp32 | bf16 (auto: bf16 where it is native and faster than fp32 by the "
        "device's class -- CUDA with bf16, CPUs with AMX, the AVX512-BF16 CPUs of "
        "goldfish.hardware.CPU_CLASSES -- else fp32, never timed; bf16: autocast over "
        "fp32 master weights; float32/bfloat16 are aliases; see goldfish.precision)",
    )
    threads: Union[int, None] = option(
        None,
        "CPU threads per process (torch.set_num_threads); default: the "
        "physical cores divided among a launch's processes on this node "
        "(OMP_NUM_THREADS when set) for the goldfish command; a library "
        "call keeps its process's setting; how a run computes, not what: not in "
        "the fingerprint",
    )
    compile: bool = option(
        False,
        "torch.compile every decoder layer (the first step pays the compilation; fuses "
        "norms, rotary and SwiGLU kernels; under torchrun too with the native engine)",
    )
    activation_checkpointing: bool = option(
        False,
        "native engine: recompute each decoder layer's activations in "
        "backward instead of keeping them (less memory, ~1/3 more "
        "compute; lets a larger micro-batch fit)",
    )
    engine: Literal["native", "axonn"] = option("native", "distributed engine: native | axonn")
    parallel: ParallelConfig = option(factory=ParallelConfig, help="native engine mesh")
    axonn: AxonnConfig = option(factory=AxonnConfig, help="AxoNN engine grid")
    checkpoint: CheckpointConfig = option(factory=CheckpointConfig, help="checkpointing and resume")
    seed: int = option(0, "seed of model init and data order")
    out: str = option("runs/train", "run folder (config, metrics, checkpoints, final model)")
    log_every: int = option(1, "print a log line every N steps (metrics.jsonl always gets every step)")
    progress: bool = option(True, "show a tqdm progress bar (main process, when attached to a terminal)")
    logging: LoggingConfig = option(factory=LoggingConfig, help="TensorBoard and W&B logging of the step metrics")

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(_positive(self.log_every), problems, f"log_every={shown(self.log_every)} must be a positive integer")
        check(
            self.threads is None or _positive(self.threads),
            problems,
            f"threads={shown(self.threads)} must be a positive integer (or unset: the physical cores)",
        )
        precision = canonical_precision(self.precision, ("auto", "fp32", "bf16"))
        check(
            precision is not None,
            problems,
            f"precision={shown(self.precision)} must be auto, fp32 or bf16 for training",
        )
        self.precision = precision or self.precision
        check(bool(self.out), problems, "out must name a run folder, e.g. out=runs/tiny")
        check_seed(self.seed, problems)
        raise_problems(problems)


# ------------------------------------------------------------------------------------ the step plan


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes and lengths derived from the config, the data and the data-parallel degree."""

    rows: int  # training rows
    seq_len: int
    global_batch: int  # rows per optimizer step
    micro_batch: int  # rows per forward on one rank
    dp_size: int
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len


def check_batch(schedule: ScheduleConfig, dp_size: int) -> None:
    """Every data-parallel rank takes the same whole number of micro-batches per step (one error, every factor)."""
    g, m = schedule.global_batch_size, schedule.micro_batch_size
    if g % (m * dp_size):
        # dp counts the processes that read distinct rows of a step: native dp, but every process under
        # engine=axonn (its tensor-parallel grid reads separate rows too), so 4 processes with row=2 col=2 split by 4
        fit = m * dp_size * math.ceil(g / (m * dp_size))
        smaller = [d for d in range(m, 0, -1) if g % (d * dp_size) == 0]
        hint = f" or micro_batch_size={smaller[0]}" if smaller else ""
        raise UserError(
            f"schedule.global_batch_size={g} is not divisible by micro_batch_size({m})·dp({dp_size})="
            f"{m * dp_size} (dp: processes reading distinct rows; every process with engine=axonn); "
            f"use global_batch_size={fit}{hint}"
        )


MAX_STEPS = 10**12  # optimizer steps of one run: far beyond any run (at 1 ms a step, 30 years)


def make_plan(schedule: ScheduleConfig, optim: OptimConfig, rows: int, seq_len: int, dp_size: int) -> Plan:
    """Check batch divisibility and resolve the training length; training stops at the first budget."""
    check_batch(schedule, dp_size)
    g, m = schedule.global_batch_size, schedule.micro_batch_size
    if rows < g:
        raise UserError(f"the training split has {rows} rows, fewer than schedule.global_batch_size={g}; lower it")
    # every row is trained on once per epoch: the last batch of an epoch is topped up with empty rows (see
    # take_rows), so labelled repetition counts are what the model sees per epoch
    steps_per_epoch = -(-rows // g)
    budgets = []
    if schedule.epochs is not None:
        budgets.append(max(1, round(schedule.epochs * steps_per_epoch)))
    if schedule.max_steps is not None:
        budgets.append(schedule.max_steps)
    if schedule.max_tokens is not None:
        budgets.append(math.ceil(schedule.max_tokens / (g * seq_len)))
    total = min(budgets) if budgets else steps_per_epoch
    if total > MAX_STEPS:
        raise UserError(
            f"the schedule asks for {total:.3g} optimizer steps (schedule.epochs={schedule.epochs}, "
            f"max_steps={schedule.max_steps}, max_tokens={schedule.max_tokens}), beyond {MAX_STEPS:.0e}: "
            f"no run lasts that long; give a budget in steps, tokens or epochs that you mean"
        )
    warmup = optim.warmup_steps if optim.warmup_steps is not None else int(optim.warmup_frac * total)
    return Plan(rows, seq_len, g, m, dp_size, steps_per_epoch, total, min(warmup, total))


def learning_rate(step: int, plan: Plan, optim: OptimConfig) -> float:
    """Learning rate of 0-based ``step``: linear warmup to ``lr``, then cosine decay to ``min_lr_ratio * lr``."""
    if step < plan.warmup_steps:
        return optim.lr * (step + 1) / plan.warmup_steps
    progress = (step - plan.warmup_steps) / max(1, plan.total_steps - plan.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return optim.lr * (optim.min_lr_ratio + (1.0 - optim.min_lr_ratio) * cosine)


# ------------------------------------------------------------------------------------ what a run folder records

# ScheduleConfig keys that set the result. micro_batch_size too: it splits a step into passes of the same total in
# exact arithmetic, but the float sums then round in another order, so a run resumed with another one would equal
# neither (bit for bit) -- a resume with another micro_batch_size is refused like any other change
_SCHEDULE_KEYS = ("epochs", "max_steps", "max_tokens", "global_batch_size", "micro_batch_size")
TRAIN_OPTIONAL = ("data.sha256", "data.layout", "code")  # unknown (not different) where one fingerprint lacks them


def goldfish_config(cfg: TrainConfig, prepared: Any) -> GoldfishConfig | None:
    """The mask training applies: the Goldfish section with the data's special ids (EOS/BOS/pad) added and, for the
    ``canonical`` strategy, the fold table of the data's tokenizer; ``None`` for the standard loss. ``prepared``: a
    ``goldfish.data.Prepared`` (its ``manifest`` and ``tokenizer``)."""
    if cfg.loss.type != "goldfish":
        return None
    tokenizer = prepared.manifest["tokenizer"]
    specials = set(cfg.loss.goldfish.special_ids)
    specials |= {int(tokenizer[k]) for k in ("eos_id", "bos_id", "pad_id") if tokenizer.get(k) is not None}
    fold = token_fold(prepared.tokenizer) if cfg.loss.goldfish.strategy == "canonical" else None
    return dataclasses.replace(cfg.loss.goldfish, special_ids=sorted(specials), fold=fold)


def write_mask_settings(out: str | Path, gcfg: GoldfishConfig | None) -> None:
    """``<out>/mask.json``: ``{"loss": "standard"}``, or ``{"loss": "goldfish", "goldfish": {k, h, strategy, seed,
    special_ids}}`` -- the resolved mask, so what reads a run (the experiment's k baseline and attacks) uses the mask
    training applied without resolving it again. ``canonical`` adds ``"fold": "tokenizer"``: its table is rebuilt
    from the run's tokenizer."""
    record: dict[str, Any] = {"loss": "standard" if gcfg is None else "goldfish"}
    if gcfg is not None:
        record["goldfish"] = to_dict(gcfg)
        if gcfg.strategy == "canonical":
            record["fold"] = "tokenizer"
    atomic_write_json(TrainRun(out).mask, record)


def read_mask_settings(folder: str | Path, tokenizer: Any = None) -> GoldfishConfig | None:
    """The mask a run folder recorded (:func:`write_mask_settings`): a :class:`GoldfishConfig`, or None for a
    standard run. ``tokenizer`` (the run's) rebuilds the fold table of ``canonical``. One-line error when absent."""
    path = TrainRun(folder).mask
    if not path.is_file():
        raise UserError(f"{path} is missing: {folder} holds no finished training run's mask (train it first)")
    record = read_json(path, fix="train the run again")
    try:
        gcfg = from_dict(GoldfishConfig, record["goldfish"]) if record["loss"] == "goldfish" else None
    except (KeyError, TypeError, ConfigError) as e:
        raise UserError(f"{path} is damaged ({e}); train the run again") from None
    if gcfg is not None and gcfg.strategy == "canonical":
        if tokenizer is None:
            raise UserError(f"{path}: the canonical mask needs the run's tokenizer to rebuild its fold table")
        gcfg.fold = token_fold(tokenizer)
    return gcfg


def train_fingerprint(cfg: TrainConfig, data_sha256: str | None, data_layout: str | None = None) -> dict[str, Any]:
    """What determines a training run's result (see :mod:`goldfish.provenance`): the train split's sha256 and the
    manifest fields that lay its rows out (``goldfish.data.Prepared.train_layout``; ``None``: left out, for a check
    made before the data exists), data order, model, loss (``loss.goldfish.*`` only for the
    Goldfish loss), optimizer, the schedule keys that set the result (the micro-batch size included: it changes the
    rounding), precision, seed and code version. Knobs that change *how* a run computes but not *what* (engine and
    layout, compilation, checkpointing, logging, the run folder) are left out."""
    flat: dict[str, Any] = {"code": code_version()}
    if data_sha256 is not None:
        flat["data.sha256"] = data_sha256
    if data_layout is not None:
        flat["data.layout"] = data_layout
    flat["data.shuffle"] = cfg.data.shuffle
    flat.update(flatten(to_dict(cfg.model), "model."))
    flat["loss.type"] = cfg.loss.type
    if cfg.loss.type == "goldfish":
        flat.update(flatten(to_dict(cfg.loss.goldfish), "loss.goldfish."))
    flat.update(flatten(to_dict(cfg.optim), "optim."))
    schedule = to_dict(cfg.schedule)
    flat.update({f"schedule.{key}": schedule[key] for key in _SCHEDULE_KEYS})
    flat["precision"] = cfg.precision
    flat["seed"] = cfg.seed
    return as_stored(flat)


def saved_train_fingerprint(out: str | Path) -> dict[str, Any] | None:
    """The fingerprint of the run in ``out``: its ``fingerprint.json``, or for a run folder written before
    fingerprints existed, the one its ``config.yaml`` implies (without data and code); ``None`` for a new folder."""
    saved = read_fingerprint(out)
    legacy = TrainRun(out).config
    if saved is not None or not legacy.is_file():
        return saved
    try:
        implied = train_fingerprint(load_config(TrainConfig, legacy), None)
    except ConfigError as e:
        raise UserError(
            f"{out} holds a run whose {legacy.name} this version cannot read ({e}); pass --fresh to train "
            f"in a new folder or --overwrite to replace it"
        ) from None
    del implied["code"]  # unknown: the code that trained it is not recorded
    return implied
