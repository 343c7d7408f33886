"""One config system for every entry point: typed dataclasses <-> YAML <-> ``key=value`` overrides.

Precedence, lowest to highest: **dataclass defaults < YAML file < command-line ``key=value`` overrides**.

* A config is a (nested) dataclass. Every field carries a docstring in ``field(metadata={"help": ...})``
  (use :func:`option`), and the class validates itself in ``__post_init__`` by raising :class:`ConfigError`.
* ``load_config(TrainConfig, "run.yaml", ["optim.lr=1e-3", "model.size=10M"])`` builds it. Keys are dotted paths
  into nested sections. One strict scalar grammar reads every value, in files and overrides alike (YAML 1.2's core
  schema, not PyYAML's 1.1): ``true``/``false``, ``null``/``~``, decimal integers and decimal floats (``1e-3``,
  ``.inf``); nothing else changes type -- ``yes``, ``0x1F``, ``12:30``, ``2024-01-01`` are text. A plain scalar
  keeps the text it was written as, so a ``str`` field gets ``0123`` as ``"0123"``, never 83. An override value is
  taken as typed (``out=runs/x #1`` is that text: no YAML comment, anchor or mapping inside it); only ``[...]``,
  ``{...}`` and quoted values are read as YAML. A line break in an override, a key given twice in a mapping and a
  non-finite number for a float setting are each one error.
* Unknown keys are an error that lists the valid keys; all problems are collected and reported in one message.
* :func:`save_config` writes the resolved config (atomically) beside checkpoints and results so a run can be
  reproduced exactly.

No ``exec``, no environment variables, no cluster paths in defaults.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import reprlib
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence, TypeVar, Union

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
    text = value.text if isinstance(value, (_Int, _Float)) else _REPR.repr(value)
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
            reason = f" ({errors[0][len(f'{key}={shown(value)} is '):]})"
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


# --------------------------------------------------------------------------------------------- dotted keys
# One implementation of ``a.b.c`` keys into nested mappings, behind every command: overrides, an experiment's arm and
# grid settings, fingerprints (flat dicts) and their comparisons.

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


def _remembering(base: type) -> type:
    """``base`` (int or float) whose values remember the text of the plain scalar they were read from (``0123``,
    ``1.10``): what a ``str`` setting gets. They compare, hash, print and serialise as plain numbers."""
    def __new__(cls, value, text: str):
        number = base.__new__(cls, value)
        number.text = text
        return number

    def __getnewargs__(self) -> tuple:  # copy and pickle
        return base(self), self.text

    name = f"_{base.__name__.title()}"
    return type(name, (base,), {"__new__": __new__, "__getnewargs__": __getnewargs__, "__module__": __name__,
                                "__qualname__": name, "__doc__": _remembering.__doc__})


_Int = _remembering(int)
_Float = _remembering(float)


# YAML 1.2 core schema: the only plain scalars that are not text
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT = re.compile(r"^[-+]?[0-9]+$")
_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
MAX_DIGITS = 100  # a number written with more characters is refused before Python converts it (bounded work)


def _number(text: str, where: str) -> Any:
    """``text`` (matching :data:`_INT` or :data:`_FLOAT`) as an :class:`_Int` or :class:`_Float`."""
    if len(text) > MAX_DIGITS:
        raise ConfigError(f"{where}: a number of {len(text):,} characters ({text[:20]}...) is beyond any setting")
    if _INT.match(text):
        return _Int(int(text, 10), text)
    if not _FLOAT.match(text):  # an explicit !!int / !!float tag on other text
        raise ConfigError(f"{where}: {shown(text)} is not a decimal number")
    special = {".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}
    lowered = text.lower()
    return _Float(special[lowered] if lowered in special else float(text), text)


def scalar(text: str, where: str = "value") -> Any:
    """A plain scalar by the one grammar of every value (module docstring): null, a boolean, an integer or a float
    (each remembering ``text``), else ``text`` itself."""
    if _NULL.match(text):
        return None
    if _BOOL.match(text):
        return text.lower() == "true"
    if _INT.match(text) or _FLOAT.match(text):
        return _number(text, where)
    return text


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading scalars by :func:`scalar`'s grammar (not YAML 1.1's ``yes``, ``0123`` octal,
    ``12:30`` sexagesimal, dates) and refusing a key given twice in one mapping. ``where`` names the text."""

    where = "YAML"

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                line = key_node.start_mark.line + 1
                if key_node.value in seen:
                    raise ConfigError(f"{self.where}: key '{shown(key_node.value)[1:-1]}' is given twice (lines "
                                      f"{seen[key_node.value]} and {line}); keep one")
                seen[key_node.value] = line
        return super().construct_mapping(node, deep)

    def construct_yaml_number(self, node: yaml.ScalarNode) -> Any:
        return _number(node.value, self.where)


_StrictLoader.yaml_implicit_resolvers = {}
for _tag, _pattern, _first in (("bool", _BOOL, "tTfF"), ("int", _INT, "-+0123456789"),
                               ("float", _FLOAT, "-+0123456789."), ("null", _NULL, ["~", "n", "N", ""]),
                               ("merge", re.compile(r"^(?:<<)$"), "<")):
    _StrictLoader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", _pattern, list(_first))
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_number)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_number)
for _type, _represent in ((_Int, yaml.SafeDumper.represent_int), (_Float, yaml.SafeDumper.represent_float)):
    yaml.SafeDumper.add_representer(_type, _represent)  # a value read here dumps as the plain number it is

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
            raise ConfigError(f"{where}: {shown(value)} is not a valid YAML {what} ({why}); check its brackets and "
                              f"quotes") from None
    return key.split("."), scalar(value, where)


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
    loader = _StrictLoader(text)
    loader.where = where
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
    check(not isinstance(value, int) or value <= high, problems,
          f"{key}={shown(value)} is beyond {high:,}, the most this setting takes ({why})")


def check_seed(seed: object, problems: list[str], key: str = "seed") -> None:
    """Collect a problem unless ``seed`` is an integer in 0 ... :data:`SEED_MAX`."""
    check(isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= SEED_MAX, problems,
          f"{key}={shown(seed)} must be an integer between 0 and {SEED_MAX} (2**32 - 1)")


def raise_problems(problems: list[str]) -> None:
    """Raise one :class:`ConfigError` naming every collected problem."""
    if problems:
        raise ConfigError("; ".join(problems))
