"""Engine registry: ``get_engine(cfg)`` builds the engine named by ``cfg.engine``.

Engines are imported lazily, so a missing optional dependency (AxoNN) only matters to runs that choose it.
Adding an engine = one module in this package plus one line in ``ENGINES``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import UserError
from .base import Engine, StepStats

if TYPE_CHECKING:
    from ..train_config import TrainConfig

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
        raise UserError(f"engine={name!r} cannot be imported ({e}); install its extra, e.g. "
                        f"pip install -e '.[{name}]'") from None
    return getattr(module, class_name)


def get_engine(cfg: "TrainConfig") -> Engine:
    """Construct the engine of ``cfg.engine``; it reads its own config sections and joins the process group."""
    return engine_class(cfg.engine)(cfg)


__all__ = ["ENGINES", "Engine", "StepStats", "engine_class", "get_engine"]
