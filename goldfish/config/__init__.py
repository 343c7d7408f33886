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

Three modules, one job each: ``grammar`` (the value grammar, the strict YAML loader, reading a file),
``overrides`` (dotted keys, ``key=value`` overrides, a command line's file and overrides) and ``schema`` (the typed
dataclasses: options, building, aliases, saving, ``describe``, validation helpers, shipped configs by name). This
package root is their one public face: callers import from ``goldfish.config``.
"""

from .grammar import MAX_DIGITS, SHOWN_CHARS, YAML_MAX_VALUES, load_yaml, read_yaml, scalar, shown
from .overrides import (
    flatten,
    get_dotted,
    merged,
    parse_override,
    parse_overrides,
    pop_dotted,
    set_dotted,
    split_arguments,
)
from .schema import (
    INT_LIMIT,
    SEED_MAX,
    SHIPPED,
    aliases,
    check,
    check_at_most,
    check_seed,
    describe,
    find_config,
    from_dict,
    load_config,
    option,
    raise_problems,
    runtime_option,
    save_config,
    to_dict,
)
