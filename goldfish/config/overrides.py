"""Dotted keys and ``key=value`` overrides: the one implementation of ``a.b.c`` keys into nested mappings (behind
every command's overrides, an experiment's arm and grid settings, fingerprints and their comparisons), and the
reading of a command line's config file and overrides."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from ..errors import ConfigError
from .grammar import load_yaml, scalar, shown


def _parts(key: str | Sequence[str]) -> list[str]:
    return key.split(".") if isinstance(key, str) else list(key)


def flatten(mapping: dict, prefix: str = "") -> dict[str, Any]:
    """``{"train": {"loss": {"type": x}}, "eval.p": 1}`` -> ``{"train.loss.type": x, "eval.p": 1}``; an empty dict
    stays a value (``{"a": {}}`` -> ``{"a": {}}``), so flattening loses nothing."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, full + "."))
        else:
            out[full] = value
    return out


def set_dotted(data: dict, key: str | Sequence[str], value: Any) -> None:
    """``data["a"]["b"] = value`` for ``key="a.b"`` (or ``["a", "b"]``), creating sections (a copy of the value is
    stored, so ``data`` never shares a mutable value with its source)."""
    *parents, last = _parts(key)
    node = data
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[last] = copy.deepcopy(value)


def get_dotted(data: dict, key: str | Sequence[str], default: Any = None) -> Any:
    """``data["a"]["b"]`` for ``key="a.b"``, or ``default`` where a section or the key is absent."""
    node: Any = data
    for part in _parts(key):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def pop_dotted(data: dict, key: str | Sequence[str], default: Any = None) -> Any:
    """Remove ``key="a.b"`` from ``data`` and return its value (``default`` where absent)."""
    *parents, last = _parts(key)
    node = get_dotted(data, parents, None) if parents else data
    return node.pop(last, default) if isinstance(node, dict) else default


def merged(base: dict, overrides: dict[str, Any]) -> dict:
    """A deep copy of ``base`` with dotted ``overrides`` applied in order."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        set_dotted(out, key, value)
    return out


# --------------------------------------------------------------------------------------------- overrides


def split_arguments(positional: Sequence[str]) -> tuple[str | None, list[str]]:
    """A command's positional arguments -> (config file or None, ``key=value`` overrides): the first one is the file
    unless it reads as ``key=value`` and names no file (a run configured on the command line alone)."""
    args = list(positional)
    if args and ("=" not in args[0] or Path(args[0]).is_file()):
        return args[0], args[1:]
    return None, args


def parse_overrides(texts: Iterable[str]) -> dict[str, Any]:
    """``["optim.lr=3e-4", "seed=1"]`` -> ``{"optim.lr": 3e-4, "seed": 1}`` (a later one wins)."""
    out: dict[str, Any] = {}
    for text in texts:
        keys, value = parse_override(text)
        out[".".join(keys)] = value
    return out


_LINE_BREAKS = ("\n", "\r", "\x85", "\u2028", "\u2029")


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"optim.lr=3e-4"`` -> (["optim", "lr"], 3e-4). The value is read by :func:`scalar` as typed (no YAML
    comment, anchor or mapping inside it); a value starting with ``[``, ``{`` or a quote is read as YAML (a list,
    a mapping, a quoted string). A line break anywhere is refused: it would be folded into a space."""
    if any(c in text for c in _LINE_BREAKS):
        raise ConfigError(f"override {shown(text)} contains a line break; a key=value override is one line")
    if "=" not in text:
        raise ConfigError(f"override '{text}' is not of the form key=value (e.g. optim.lr=3e-4)")
    key, raw = text.split("=", 1)
    key = key.strip().lstrip("-").replace("-", "_")
    if not key:
        raise ConfigError(f"override '{text}' has an empty key")
    value = raw.strip()
    where = f"override '{key}'"
    if not value:
        return key.split("."), ""
    if value[0] in "[{'\"":
        try:
            return key.split("."), load_yaml(value, where)
        except yaml.YAMLError as e:
            what = {"[": "list", "{": "mapping"}.get(value[0], "quoted string")
            why = getattr(e, "problem", None) or e
            raise ConfigError(
                f"{where}: {shown(value)} is not a valid YAML {what} ({why}); check its brackets and quotes"
            ) from None
    return key.split("."), scalar(value, where)
