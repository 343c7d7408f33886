"""Engine registry: ``get_engine(cfg, loss_fn)`` builds the engine named by ``cfg.engine``.

Engines are imported lazily, so a missing optional dependency (AxoNN) only matters to runs that choose it.
Adding an engine = one module in this package plus one line in ``ENGINES``.
"""

from __future__ import annotations

import importlib

from ..errors import UserError
from ..train_config import TrainConfig
from .base import Engine, Layout, LossFn, StepStats, current_world_size

# name -> "module:Class"
ENGINES: dict[str, str] = {
    "native": "goldfish.engines.native:NativeEngine",
    "axonn": "goldfish.engines.axonn:AxonnEngine",
}


def engine_class(name: str) -> type[Engine]:
    """The engine class registered under ``name`` (imported on first use)."""
    if name not in ENGINES:
        raise UserError(f"engine={name!r} is unknown; choose one of: {', '.join(ENGINES)}")
    module_name, class_name = ENGINES[name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UserError(
            f"engine={name!r} cannot be imported ({e}); install its extra, e.g. pip install -e '.[{name}]'"
        ) from None
    return getattr(module, class_name)


def engine_layout(cfg: TrainConfig, world_size: int, model_config=None) -> Layout:
    """The layout ``cfg``'s engine would use on ``world_size`` devices (validated; nothing is built)."""
    cls = engine_class(cfg.engine)
    return cls.layout_for(getattr(cfg, cls.section), world_size, model_config, cfg.schedule.micro_batch_size)


def get_engine(cfg: TrainConfig, loss_fn: LossFn) -> Engine:
    """Validate the layout for this world size, then construct ``cfg.engine`` from its own config section, the
    precision, the loss function and the model-wide speed options (``compile``, ``activation_checkpointing``); it
    joins the process group."""
    cls = engine_class(cfg.engine)
    engine_layout(cfg, current_world_size())  # fail before joining any process group
    return cls(
        getattr(cfg, cls.section),
        cfg.precision,
        loss_fn,
        compile=cfg.compile,
        activation_checkpointing=cfg.activation_checkpointing,
    )


__all__ = ["ENGINES", "Engine", "Layout", "LossFn", "StepStats", "engine_class", "engine_layout", "get_engine"]
