"""The one grammar of every config value: YAML read by a strict loader (YAML 1.2's core schema for plain scalars,
a key given twice refused, bounded alias expansion) and the plain-scalar grammar an override's value shares with it.
The package docstring (``goldfish/config/__init__.py``) states the rules."""

from __future__ import annotations

import math
import re
import reprlib
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

YAML_MAX_VALUES = 1_000_000  # a config expanding to more values (YAML aliases: "billion laughs") is refused
SHOWN_CHARS = 200  # a user's value quoted in an error message is cut to this many characters
_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 80, 80, 8, 8, 3


def shown(value: Any) -> str:
    """A short ``repr`` of a user's value for an error message: bounded work and length, whatever the value."""
    text = value.text if isinstance(value, (_Int, _Float)) else _REPR.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


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
    return type(
        name,
        (base,),
        {
            "__new__": __new__,
            "__getnewargs__": __getnewargs__,
            "__module__": __name__,
            "__qualname__": name,
            "__doc__": _remembering.__doc__,
        },
    )


_Int = _remembering(int)
_Float = _remembering(float)


# YAML 1.2 core schema: the only plain scalars that are not text
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT = re.compile(r"^[-+]?[0-9]+$")
_FLOAT = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
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
                    raise ConfigError(
                        f"{self.where}: key '{shown(key_node.value)[1:-1]}' is given twice (lines "
                        f"{seen[key_node.value]} and {line}); keep one"
                    )
                seen[key_node.value] = line
        return super().construct_mapping(node, deep)

    def construct_yaml_number(self, node: yaml.ScalarNode) -> Any:
        return _number(node.value, self.where)


_StrictLoader.yaml_implicit_resolvers = {}
for _tag, _pattern, _first in (
    ("bool", _BOOL, "tTfF"),
    ("int", _INT, "-+0123456789"),
    ("float", _FLOAT, "-+0123456789."),
    ("null", _NULL, ["~", "n", "N", ""]),
    ("merge", re.compile(r"^(?:<<)$"), "<"),
):
    _StrictLoader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", _pattern, list(_first))
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_number)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_number)
for _type, _represent in ((_Int, yaml.SafeDumper.represent_int), (_Float, yaml.SafeDumper.represent_float)):
    yaml.SafeDumper.add_representer(_type, _represent)  # a value read here dumps as the plain number it is


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
            raise ConfigError(
                f"{where} expands to {size:.3g} values through YAML aliases (&anchor / *alias), more "
                f"than the {YAML_MAX_VALUES:,} a config may hold; write the values out"
            )
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigError(f"{where} nests too deeply to read; flatten it") from None
    finally:
        loader.dispose()


def read_yaml(path: str | Path) -> dict:
    """Read a YAML mapping, with one-line errors for a missing or malformed file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"config file not found: {path} (check the path or the shipped config's name, or run without "
            f"a file to use the defaults)"
        )
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
