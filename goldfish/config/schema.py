"""Typed config dataclasses: fields with their help (:func:`option`), building a config from a plain dict with every
problem collected (:func:`from_dict`), the alias table of old spellings, saving, ``describe`` for ``--help``, the
validation helpers, and finding a shipped config by name."""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Literal, TypeVar, Union

import yaml

from ..errors import ConfigError
from ..io import atomic_write_text
from .grammar import _Float, _Int, read_yaml, shown
from .overrides import merged, parse_overrides

T = TypeVar("T")

INT_LIMIT = 2**63  # every integer setting lies in (-2**63, 2**63): what torch's and NumPy's int64 can hold
SEED_MAX = 2**32 - 1  # seeds: 0 ... 2**32 - 1 (NumPy's and most tools' range)


def option(default: Any = dataclasses.MISSING, help: str = "", *, factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with a docstring (``help``), shown by ``describe`` and ``--help`` of each command."""
    kwargs: dict[str, Any] = {"metadata": {"help": help}}
    if factory is not dataclasses.MISSING:
        kwargs["default_factory"] = factory
    else:
        kwargs["default"] = default
    return dataclasses.field(**kwargs)


def runtime_option(help: str) -> Any:
    """A field set by code at run time (e.g. a table built from the tokenizer): never read from YAML or overrides,
    never saved, never shown by ``describe``; default None."""
    return dataclasses.field(default=None, repr=False, compare=False, metadata={"help": help, "runtime": True})


def _config_fields(cls_or_obj: Any) -> list[dataclasses.Field]:
    """The fields a config file may set and that are saved: all but :func:`runtime_option` ones."""
    return [f for f in dataclasses.fields(cls_or_obj) if f.init and not f.metadata.get("runtime")]


# --------------------------------------------------------------------------------------------- value coercion


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return f"list[{_type_name(args[0]) if args else 'any'}]"
    if origin is dict:
        return "mapping"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _plain(value: Any) -> Any:
    """``value`` with every number that remembers its text (:class:`_Int`, :class:`_Float`) made a plain one."""
    if isinstance(value, _Int):
        return int(value)
    if isinstance(value, _Float):
        return float(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value) if isinstance(value, tuple) else [_plain(v) for v in value]
    return value


def _coerce(value: Any, tp: Any, key: str, problems: list[str]) -> Any:
    """Convert a YAML value to the annotated type ``tp``; append a message to ``problems`` when impossible."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return _plain(value)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            problems.append(f"{key}: expected a mapping (section), got {shown(value)}")
            return None
        return _build(tp, value, key + ".", problems)
    if origin is Literal:
        allowed = typing.get_args(tp)
        plain = _plain(value)
        for option_ in allowed:  # True is not the literal 1, nor 1.0 the literal 1
            if option_ == plain and type(option_) is type(plain):
                return option_
        problems.append(f"{key}={shown(value)} is not one of {', '.join(repr(a) for a in allowed)}")
        return None
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        sections = [a for a in args if dataclasses.is_dataclass(a)]
        if isinstance(value, dict) and len(sections) == 1:  # an optional section: report the problems inside it
            return _coerce(value, sections[0], key, problems)
        errors: list[str] = []
        for arg in args:
            if arg is type(None):
                continue
            trial: list[str] = []
            out = _coerce(value, arg, key, trial)
            if not trial:
                return out
            errors.extend(trial)
        reason = ""
        if len(errors) == 1 and errors[0].startswith(f"{key}={shown(value)} is "):  # `float | None`: the float's
            reason = f" ({errors[0][len(f'{key}={shown(value)} is ') :]})"
        problems.append(f"{key}={shown(value)} is not a valid {_type_name(tp)}{reason}")
        return None
    if origin in (list, tuple):
        (inner,) = typing.get_args(tp)[:1] or (Any,)
        if not isinstance(value, (list, tuple)):
            value = [value]  # a single value where a list is expected: `prefix_lens=32`
        out = [_coerce(v, inner, f"{key}[{i}]", problems) for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            problems.append(f"{key}: expected a mapping, got {shown(value)}")
            return None
        return _plain(dict(value))
    if tp is bool:
        if isinstance(value, bool):
            return value
        problems.append(f"{key}={shown(value)} is not a boolean (use true or false)")
        return None
    if tp is int:
        return _integer(value, key, problems)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"{key}={shown(value)} is not a number")
            return None
        try:
            number = float(value)
        except OverflowError:  # an integer beyond float's range
            number = math.inf
        if not math.isfinite(number):
            problems.append(f"{key}={shown(value)} is not a finite number")
            return None
        return number
    if tp is str:
        return _string(value, key, problems)
    return _plain(value)


def _integer(value: Any, key: str, problems: list[str]) -> int | None:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{key}={shown(value)} is not an integer")
        return None
    if not -INT_LIMIT < value < INT_LIMIT:
        problems.append(f"{key}={shown(value)} is out of range: integer settings lie between -2**63 and 2**63")
        return None
    return int(value)


def _string(value: Any, key: str, problems: list[str]) -> str | None:
    """A ``str`` setting: a plain scalar's text as written (``0123`` stays ``"0123"``); a mapping, list, boolean or
    null is not text, and a NUL character is in no name or path."""
    if isinstance(value, (_Int, _Float)):
        return value.text
    if isinstance(value, (dict, list, bool)) or value is None:
        kind = "null" if value is None else "a boolean" if isinstance(value, bool) else "not text"
        text = "null" if value is None else str(value).lower()
        example = "" if isinstance(value, (dict, list)) else f" ({key}='{text}')"
        problems.append(f"{key}={shown(value)} is {kind}, not a string; quote it if you mean the text{example}")
        return None
    text = str(value)
    if "\0" in text:
        problems.append(f"{key}={shown(value)} contains a NUL character")
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: bytes of another encoding on the command line
        problems.append(f"{key}={shown(value)} is not UTF-8 text (a name in another encoding?); rename it")
        return None
    return text


# ----------------------------------------------------------------------------------- aliases (one name per setting)


def aliases(cls: Any) -> dict[str, str]:
    """A config class's alias table: ``{"old.dotted.key": "canonical.dotted.key"}`` relative to the class, from its
    ``ALIASES`` class variable (``ClassVar[dict[str, str]]``). An alias names a setting by another command's spelling
    or an earlier one; :func:`_build` reads it as the canonical key, so every file, override and shorthand accepts
    both, and the saved config holds the canonical one."""
    return dict(getattr(cls, "ALIASES", {}) or {})


def _pop_path(data: dict, path: list[str]) -> tuple[bool, Any]:
    node = data
    for part in path[:-1]:
        node = node.get(part)
        if not isinstance(node, dict):
            return False, None
    return (True, node.pop(path[-1])) if path[-1] in node else (False, None)


def _apply_aliases(cls: Any, data: dict, prefix: str, problems: list[str]) -> dict:
    """``data`` with every alias key of ``cls`` moved to its canonical key; an alias and its canonical key both
    setting the same value is a problem (sections given both ways are merged key by key)."""
    table = aliases(cls)
    if not table or not isinstance(data, dict):
        return data
    data = copy.deepcopy(data)
    for old, new in table.items():
        found, value = _pop_path(data, old.split("."))
        if not found:
            continue
        *parents, last = new.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        if not isinstance(node, dict):
            problems.append(f"{prefix}{'.'.join(parents)}: expected a mapping (section), got {shown(node)}")
        elif last not in node:
            node[last] = value
        elif isinstance(node[last], dict) and isinstance(value, dict) and not set(node[last]) & set(value):
            node[last] = {**node[last], **value}
        else:
            problems.append(
                f"{prefix}{old} and {prefix}{new} both given: they name one setting ({prefix}{old} is "
                f"the alias); keep {prefix}{new}"
            )
    return data


def _build(cls: type[T], data: dict, prefix: str, problems: list[str]) -> T:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in _config_fields(cls)}
    data = _apply_aliases(cls, data, prefix, problems)
    unknown = [k for k in data if k not in fields]
    for k in unknown:
        problems.append(f"unknown config key '{prefix}{k}'; valid keys here: {', '.join(sorted(fields))}")
    kwargs = {}
    for name, value in data.items():
        if name in fields:
            kwargs[name] = _coerce(value, hints[name], prefix + name, problems)
    if problems:
        return None  # type: ignore[return-value]
    try:
        return cls(**kwargs)
    except ConfigError as e:
        problems.append(str(e) if not prefix else f"{prefix.rstrip('.')}: {e}")
        return None  # type: ignore[return-value]


def from_dict(cls: type[T], data: dict | None) -> T:
    """Build config ``cls`` from a plain (possibly nested) dict, raising one :class:`ConfigError` for all problems."""
    problems: list[str] = []
    obj = _build(cls, data or {}, "", problems)
    if problems:
        raise ConfigError("; ".join(problems) if len(problems) > 1 else problems[0])
    return obj


def to_dict(obj: Any) -> Any:
    """Plain-value dict of a (nested) config dataclass, suitable for YAML/JSON."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in _config_fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj


SHIPPED = {"data": "recipes", "experiments": "configs"}


def find_config(spec: str | Path, folder: str) -> Path:
    """A config file named by its path or by its name, from any working directory: ``spec`` itself when it is a
    file or an absolute path; else the first match, relative to the working directory, then the checkout, then the
    installed package's copy of the shipped folders (:data:`SHIPPED`), of ``spec`` as a path (``data/x.yaml``, so
    the paths inside shipped configs work from anywhere) or as a name in ``folder`` (``train_tiny`` ->
    ``experiments/train_tiny.yaml``, ``paper/llama2_7b_extreme``). Unmatched: ``spec`` as given, for
    :func:`read_yaml`'s one-line error."""
    path = Path(spec).expanduser()
    if path.is_file() or path.is_absolute():
        return path
    yaml_suffix = path.suffix in (".yaml", ".yml")
    candidates = ([path] if yaml_suffix or "/" in str(spec) else []) + (
        [] if yaml_suffix else [Path(folder) / f"{spec}.yaml"]
    )
    package = Path(__file__).resolve().parents[1]  # goldfish/
    checkout = package.parent if (package.parent / "pyproject.toml").is_file() else None
    for relative in candidates:
        found = [root / relative for root in (Path.cwd(), checkout) if root is not None]
        if relative.parts[0] in SHIPPED:
            found.append(package / SHIPPED[relative.parts[0]] / Path(*relative.parts[1:]))
        for candidate in found:
            if candidate.is_file():
                return candidate
    return path


def load_config(cls: type[T], path: str | Path | None = None, overrides: Iterable[str] = ()) -> T:
    """Defaults < YAML file < ``key=value`` overrides -> validated config object of type ``cls``."""
    return from_dict(cls, merged(read_yaml(path) if path else {}, parse_overrides(overrides)))


def save_config(obj: Any, path: str | Path) -> None:
    """Write the resolved config as YAML (atomically)."""
    atomic_write_text(path, yaml.safe_dump(to_dict(obj), sort_keys=False))


def describe(cls: type, prefix: str = "") -> list[str]:
    """One line per (nested) key: ``key (type, default): help`` -- used by ``--help`` of config-driven commands."""
    lines = []
    hints = typing.get_type_hints(cls)
    for f in _config_fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            lines.extend(describe(tp, prefix + f.name + "."))
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = "required"
        lines.append(f"  {prefix}{f.name} ({_type_name(tp)}, default {default!r}): {f.metadata.get('help', '')}")
    lines += [f"  {prefix}{old}: alias of {prefix}{new}" for old, new in aliases(cls).items()]
    return lines


def check(condition: bool, problems: list[str], message: str) -> None:
    """Collect a validation problem (use in ``__post_init__``, then :func:`raise_problems`)."""
    if not condition:
        problems.append(message)


def check_at_most(value: object, high: int, problems: list[str], key: str, why: str) -> None:
    """Collect a problem when the integer ``value`` exceeds ``high``: a count that sizes work or memory is refused
    where the config is read, not after the work it would have cost (``why``: what grows with it)."""
    check(
        not isinstance(value, int) or value <= high,
        problems,
        f"{key}={shown(value)} is beyond {high:,}, the most this setting takes ({why})",
    )


def check_seed(seed: object, problems: list[str], key: str = "seed") -> None:
    """Collect a problem unless ``seed`` is an integer in 0 ... :data:`SEED_MAX`."""
    check(
        isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= SEED_MAX,
        problems,
        f"{key}={shown(seed)} must be an integer between 0 and {SEED_MAX} (2**32 - 1)",
    )


def raise_problems(problems: list[str]) -> None:
    """Raise one :class:`ConfigError` naming every collected problem."""
    if problems:
        raise ConfigError("; ".join(problems))
