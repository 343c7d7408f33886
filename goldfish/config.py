"""One config system for every entry point: typed dataclasses <-> YAML <-> ``key=value`` overrides.

Precedence, lowest to highest: **dataclass defaults < YAML file < command-line ``key=value`` overrides**.

* A config is a (nested) dataclass. Every field carries a docstring in ``field(metadata={"help": ...})``
  (use :func:`option`), and the class validates itself in ``__post_init__`` by raising :class:`ConfigError`.
* ``load_config(TrainConfig, "run.yaml", ["optim.lr=1e-3", "model.size=10M"])`` builds it. Override values are
  parsed as YAML scalars/lists (``k=4``, ``tags=[a,b]``, ``bf16=true``), keys are dotted paths into nested sections.
* Unknown keys are an error that lists the valid keys; all problems are collected and reported in one message.
* :func:`save_config` writes the resolved config (atomically) beside checkpoints and results so a run can be
  reproduced exactly.

No ``exec``, no environment variables, no cluster paths in defaults.
"""

from __future__ import annotations

import copy
import dataclasses
import reprlib
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Literal, TypeVar, Union

import yaml

from .errors import ConfigError
from .io import atomic_write_text

T = TypeVar("T")

INT_LIMIT = 2**63  # every integer setting lies in (-2**63, 2**63): what torch's and NumPy's int64 can hold
SEED_MAX = 2**32 - 1  # seeds: 0 ... 2**32 - 1 (NumPy's and most tools' range)
YAML_MAX_VALUES = 1_000_000  # a config expanding to more values (YAML aliases: "billion laughs") is refused
SHOWN_CHARS = 200  # a user's value quoted in an error message is cut to this many characters
_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 80, 80, 8, 8, 3


def shown(value: Any) -> str:
    """A short ``repr`` of a user's value for an error message: bounded work and length, whatever the value."""
    text = _REPR.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


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


def _coerce(value: Any, tp: Any, key: str, problems: list[str]) -> Any:
    """Convert a YAML value to the annotated type ``tp``; append a message to ``problems`` when impossible."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            problems.append(f"{key}: expected a mapping (section), got {shown(value)}")
            return None
        return _build(tp, value, key + ".", problems)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value in allowed:
            return value
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
        problems.append(f"{key}={shown(value)} is not a valid {_type_name(tp)}")
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
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        problems.append(f"{key}={shown(value)} is not a boolean (use true or false)")
        return None
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{key}={shown(value)} is not an integer")
            return None
        if not -INT_LIMIT < value < INT_LIMIT:
            problems.append(f"{key}={shown(value)} is out of range: integer settings lie between -2**63 and 2**63")
            return None
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str):
                try:
                    return float(value)  # YAML reads "1e-3" as a string
                except ValueError:
                    pass
            problems.append(f"{key}={shown(value)} is not a number")
            return None
        return float(value)
    if tp is str:
        if isinstance(value, (dict, list)):
            problems.append(f"{key}={shown(value)} is not a string")
            return None
        return str(value)
    return value


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
            problems.append(f"{prefix}{old} and {prefix}{new} both given: they name one setting ({prefix}{old} is "
                            f"the alias); keep {prefix}{new}")
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


# --------------------------------------------------------------------------------------------- overrides


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"optim.lr=3e-4"`` -> (["optim", "lr"], 3e-4). Values are parsed as YAML (numbers, bools, lists, null)."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' is not of the form key=value (e.g. optim.lr=3e-4)")
    key, raw = text.split("=", 1)
    key = key.strip().lstrip("-").replace("-", "_")
    if not key:
        raise ConfigError(f"override '{text}' has an empty key")
    try:
        value = load_yaml(raw, f"override '{key}'") if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def _expanded_values(node: yaml.Node, memo: dict[int, int]) -> int:
    """How many values ``node`` stands for once every alias is expanded (memoised per node: linear work)."""
    if id(node) not in memo:
        memo[id(node)] = 0  # a node that contains itself counts once (PyYAML refuses to build it anyway)
        children: list = []
        if isinstance(node, yaml.MappingNode):
            children = [item for pair in node.value for item in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        memo[id(node)] = 1 + sum(_expanded_values(child, memo) for child in children)
    return memo[id(node)]


def load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load`` with bounded work: a document whose aliases would expand to more than
    :data:`YAML_MAX_VALUES` values, or that nests deeper than Python can follow, is one :class:`ConfigError`."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_values(node, {})
        if size > YAML_MAX_VALUES:
            raise ConfigError(f"{where} expands to {size:.3g} values through YAML aliases (&anchor / *alias), more "
                              f"than the {YAML_MAX_VALUES:,} a config may hold; write the values out")
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigError(f"{where} nests too deeply to read; flatten it") from None
    finally:
        loader.dispose()


def merge_override(data: dict, path: list[str], value: Any) -> None:
    """Set ``data[path[0]][path[1]]... = value``, creating sections as needed."""
    node = data
    for part in path[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[path[-1]] = value


def read_yaml(path: str | Path) -> dict:
    """Read a YAML mapping, with one-line errors for a missing or malformed file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path} (check the path or the shipped config's name, or run without "
                          f"a file to use the defaults)")
    try:
        data = load_yaml(path.read_text(encoding="utf-8"), f"config file {path}")
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys to values, not {type(data).__name__}")
    return data


# the checkout's folders of shipped configs -> where a wheel installs them (package data, pyproject.toml)
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
    candidates = ([path] if yaml_suffix or "/" in str(spec) else []) + ([] if yaml_suffix else
                                                                         [Path(folder) / f"{spec}.yaml"])
    package = Path(__file__).resolve().parent
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
    data = read_yaml(path) if path else {}
    for text in overrides:
        keys, value = parse_override(text)
        merge_override(data, keys, value)
    return from_dict(cls, data)


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


def check_seed(seed: object, problems: list[str], key: str = "seed") -> None:
    """Collect a problem unless ``seed`` is an integer in 0 ... :data:`SEED_MAX`."""
    check(isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= SEED_MAX, problems,
          f"{key}={shown(seed)} must be an integer between 0 and {SEED_MAX} (2**32 - 1)")


def raise_problems(problems: list[str]) -> None:
    """Raise one :class:`ConfigError` naming every collected problem."""
    if problems:
        raise ConfigError("; ".join(problems))
