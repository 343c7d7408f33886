"""Experiment trackers: each step's ``metrics.jsonl`` record, also as TensorBoard events and a Weights & Biases run.

The trainer hands every record it writes to ``metrics.jsonl`` to :class:`Tracker` as well (main process only), so
the three always hold the same scalars: loss, kept and dropped loss, their token counts and dropped fraction, lr,
grad norm, step time, tokens/s, MFU, epoch and tokens seen. Tags are ``train/<key>``; the step is the optimizer step.

* TensorBoard (``logging.tensorboard``): event files in ``<out>/tensorboard``, plus a custom-scalars chart with kept
  and dropped loss on one plot. ``tensorboard --logdir <experiment out>`` shows every trained cell as its own run.
  A resumed run purges the steps after its checkpoint (TensorBoard's ``purge_step``), as ``metrics.jsonl`` does.
* W&B (``logging.wandb``): a run in ``<out>/wandb``, **offline** unless ``logging.wandb_mode=online``: offline makes
  no network call (``mode="offline"`` for the run and for W&B's process-wide settings, over ``WANDB_MODE``; no
  usage telemetry either); ``wandb sync`` uploads it later. Online needs the
  user's API key and is refused in one line without one. The run id is kept in ``<out>/wandb/goldfish-run-id`` so a
  resumed training continues the same run; the x-axis is ``train/step``, so re-logged steps after a resume are
  plotted at their step.

Both are optional extras; :class:`goldfish.train_config.LoggingConfig` refuses a missing one when the config loads.
"""

from __future__ import annotations

import netrc
import os
import secrets
from pathlib import Path
from typing import Any

from .config import to_dict
from .errors import UserError
from .io import atomic_write_text
from .train_config import TrainConfig

TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
RUN_ID_FILE = "goldfish-run-id"  # inside <out>/wandb: the W&B run id, reused when training resumes
# one TensorBoard chart with both curves: the loss Goldfish trains on and the loss on the tokens it leaves out
LAYOUT = {"goldfish": {"kept vs dropped loss": ["Multiline", ["train/kept_loss", "train/dropped_loss"]]}}


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """``{"train/<key>": value}`` for every number of a metrics record but the step (None, e.g. the dropped loss of
    a standard run, is left out)."""
    return {
        f"train/{k}": float(v)
        for k, v in record.items()
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


class Tracker:
    """The enabled trackers of a run; ``log(record)`` after each step, ``close()`` (or ``with``) at the end.

    ``enabled`` is false on every process but the main one (nothing is written or imported there); ``start_step``
    is the step training resumes after (0 for a new run); ``out``: the folder being written (the staging folder of a
    replacement, :mod:`goldfish.ownership`), ``cfg.out`` by default."""

    def __init__(self, cfg: TrainConfig, enabled: bool = True, start_step: int = 0, out: Path | None = None):
        self._tb = self._wandb = None
        if not enabled:
            return
        log, out = cfg.logging, Path(cfg.out) if out is None else out
        if log.tensorboard:
            self._tb = _tensorboard(out / TENSORBOARD_DIR, start_step)
        if log.wandb:
            self._wandb = _wandb_run(cfg, out / WANDB_DIR)

    def log(self, record: dict[str, Any]) -> None:
        values = scalars(record)
        if self._tb is not None:
            for tag, value in values.items():
                self._tb.add_scalar(tag, value, record["step"])
            self._tb.flush()  # a killed run keeps every step logged so far, as metrics.jsonl does
        if self._wandb is not None:
            self._wandb.log({"train/step": record["step"], **values})

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _tensorboard(folder: Path, start_step: int):
    from torch.utils.tensorboard import SummaryWriter

    # purge_step: TensorBoard hides the events of earlier sessions from this step on (they are logged again)
    writer = SummaryWriter(str(folder), purge_step=start_step + 1 if start_step else None)
    writer.add_custom_scalars(LAYOUT)
    return writer


def has_api_key() -> bool:
    """Whether the user gave W&B credentials: ``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE`` or a ``wandb login``
    entry in the netrc file (``NETRC``, default ``~/.netrc``)."""

    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("://")[-1].split("/")[0].split(":")[0]
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _run_id(folder: Path) -> str:
    """The W&B run id of this run folder: made once, reused by every resumed session."""
    path = folder / RUN_ID_FILE
    if path.is_file():
        return path.read_text(encoding="utf-8").strip()
    run_id = secrets.token_hex(4)
    atomic_write_text(path, run_id + "\n")
    return run_id


def _wandb_run(cfg: TrainConfig, folder: Path):
    log = cfg.logging
    if log.wandb_mode == "online" and not has_api_key():
        raise UserError(
            "logging.wandb_mode=online needs your W&B API key: set WANDB_API_KEY or run `wandb login`; "
            "or keep the default offline mode and upload later with `wandb sync <out>/wandb/offline-run-*`"
        )
    import wandb

    # the process-wide settings too: W&B's usage telemetry reads them, not wandb.init's mode, and would post to the
    # server from an "offline" run otherwise
    wandb.setup(settings=wandb.Settings(mode=log.wandb_mode))
    folder.mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=log.project,
        entity=log.entity or None,
        group=log.group or None,
        name=log.run_name or Path(cfg.out).resolve().name,
        job_type="train",
        tags=[cfg.loss.type],
        config=to_dict(cfg),
        dir=str(folder.parent),
        id=_run_id(folder),
        resume="allow",
        mode=log.wandb_mode,  # wins over WANDB_MODE and the settings files: offline is never overridden to online
        settings=wandb.Settings(console="off", silent=True),  # stdout stays the trainer's own
    )
    run.define_metric("train/step")
    run.define_metric("train/*", step_metric="train/step")
    return run
