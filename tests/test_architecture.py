"""The import graph of the installed package: no cycles between files, imports go down the layers only, and our
modules are imported at a module's top except in the CLI layer.

Every module under ``goldfish/`` and ``eval/`` (installed as ``goldfish.eval``) is parsed with ``ast``; every
``import`` and ``from ... import`` that names one of our modules is an edge, wherever it sits (module top, function
body, ``if TYPE_CHECKING:``), because a function-local import hides a dependency without removing it. So such imports
are allowed only where ARCHITECTURE.md says: in the CLI layer (``goldfish.cli`` and ``goldfish.commands``), where a
command imports the modules that do its work when it runs, so ``goldfish COMMAND --help`` stays fast. Layers, bottom
to top (see ARCHITECTURE.md):

0. base: the package root, the config system, io, output-folder ownership and locks, errors, the mask and loss
   library (with the canonical fold), the collator and the Hugging Face / TRL trainers (``hf``), perf, the size
   table, the precision names, provenance (code version, fingerprints)
1. data: ``goldfish.data``
2. models and engines: ``models``, ``model_source`` (where a model comes from), ``train_config`` (the sections the
   engines receive), ``goldfish.engines``
3. trainer: ``train``, ``checkpoint``, ``estimate``, ``tracking``, ``modelcard``
4. evaluation: ``goldfish.eval``
5. experiment runner and CLI: ``goldfish.experiment``, ``goldfish.commands``, ``cli``, ``__main__``

A module may import its own layer (without a cycle) or a lower one, never a higher one; the engines import nothing
from the mask or loss modules (Goldfish reaches them only through the injected loss function). Modules are split
by job, not by length (ARCHITECTURE.md): one past ``REVIEW_LINES`` is listed (a warning) for review to ask whether it
still does one job; only one past ``MAX_LINES`` fails.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base",
        (
            "goldfish",
            "goldfish.config",
            "goldfish.io",
            "goldfish.ownership",
            "goldfish.errors",
            "goldfish.hashing",
            "goldfish.masks",
            "goldfish.loss",
            "goldfish.collator",
            "goldfish.fold",
            "goldfish.perf",
            "goldfish.sizes",
            "goldfish.precision",
            "goldfish.hardware",
            "goldfish.gguf_cache",
            "goldfish.provenance",
            "goldfish.hf",
            "goldfish.run_folder",
        ),
    ),
    ("data", ("goldfish.data",)),
    ("models and engines", ("goldfish.models", "goldfish.model_source", "goldfish.train_config", "goldfish.engines")),
    (
        "trainer",
        ("goldfish.train", "goldfish.checkpoint", "goldfish.estimate", "goldfish.tracking", "goldfish.modelcard"),
    ),
    ("evaluation", ("goldfish.eval",)),
    ("experiment and CLI", ("goldfish.experiment", "goldfish.commands", "goldfish.cli", "goldfish.__main__")),
]


def module_name(path: Path) -> str:
    """``goldfish/data/prepare.py`` -> ``goldfish.data.prepare``; ``eval/run.py`` -> ``goldfish.eval.run``."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[0] == "eval":
        parts = ["goldfish", *parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    files = sorted((REPO / "goldfish").rglob("*.py")) + sorted((REPO / "eval").rglob("*.py"))
    return {module_name(f): f for f in files}


MODULES = modules()


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Our modules that one import statement loads (``from pkg import sub`` names the submodule)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    out = []
    for name in names:
        while name not in MODULES and "." in name:  # goldfish.data.config.DataConfig -> goldfish.data.config
            name = name.rsplit(".", 1)[0]
        if name in MODULES and name != module:
            out.append(name)
    return out


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first import}."""
    graph: dict[str, dict[str, int]] = {}
    for module, path in MODULES.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, node):
                    edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


GRAPH = import_graph()
LAZY_LAYER = ("goldfish.cli", "goldfish.commands")  # where a function may import our modules (ARCHITECTURE.md)


def function_local_imports() -> dict[str, list[tuple[int, str]]]:
    """module -> [(line, our module)] of every import inside a function body (def, async def, lambda)."""
    found: dict[str, list[tuple[int, str]]] = {}
    for module, path in MODULES.items():

        def visit(node: ast.AST, inside: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
                    found.setdefault(module, []).extend((child.lineno, t) for t in _targets(module, child))
                visit(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    return {module: edges for module, edges in found.items() if edges}


LOCAL = function_local_imports()


def layer_of(module: str) -> int:
    """Index in ``LAYERS`` of the longest entry that names ``module`` or one of its packages (the package root
    ``goldfish`` names only itself: a new top-level module must be placed in a layer explicitly)."""
    best, length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module.startswith(prefix + ".") and prefix != "goldfish"
            if (module == prefix or inside) and len(prefix) > length:
                best, length = index, len(prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in tests/test_architecture.py")
    return best


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search with colours)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_is_real():
    """The parser sees the package as it is (guards the other tests against passing on an empty graph)."""
    expected = {"goldfish.train", "goldfish.engines.native", "goldfish.eval.run", "goldfish.experiment.runner"}
    assert expected <= set(GRAPH)
    assert "goldfish.engines" in GRAPH["goldfish.train"]
    assert "goldfish.eval.config" in GRAPH["goldfish.eval.run"]  # absolute and relative imports both resolved
    assert "goldfish.errors" in GRAPH["goldfish.eval.loading"]


def test_function_local_imports_only_in_the_cli_layer():
    """A function-local import of our modules hides an edge from whoever reads the module's imports: only a
    command's module may defer what its command runs (ARCHITECTURE.md)."""
    assert "goldfish.train" in {t for _, t in LOCAL.get("goldfish.commands.train", [])}  # the scan sees them
    hidden = [
        f"{module}:{line} imports {target}"
        for module, edges in sorted(LOCAL.items())
        if not module.startswith(LAZY_LAYER)
        for line, target in edges
    ]
    assert not hidden, "function-local imports outside the CLI layer: " + "; ".join(hidden)


def test_find_cycle_and_layer_of_on_known_inputs():
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": 1}, "b": {}, "c": {"a": 1, "b": 1}}) is None
    assert layer_of("goldfish.engines.native") == 2 and layer_of("goldfish.eval.run") == 4
    assert layer_of("goldfish") == 0 and layer_of("goldfish.experiment") == 5
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("goldfish.brand_new_module")


def test_no_import_cycles_between_files():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module):
    here = layer_of(module)
    upward = [
        f"{target} (line {line}, layer {LAYERS[layer_of(target)][0]})"
        for target, line in GRAPH[module].items()
        if layer_of(target) > here
    ]
    assert not upward, f"{module} (layer {LAYERS[here][0]}) imports upward: {', '.join(upward)}"


def test_engines_know_nothing_of_goldfish():
    """The engine seam: the loss comes in as a function; masks and loss stay outside goldfish.engines."""
    for module, edges in GRAPH.items():
        if module.startswith("goldfish.engines"):
            bad = sorted(set(edges) & {"goldfish.masks", "goldfish.loss", "goldfish.collator"})
            assert not bad, f"{module} imports {bad}"


REVIEW_LINES = 500  # past this a module is listed for review: does it still do one job? (a guide, not a cap)
MAX_LINES = 800  # past this it surely does more than one: the test fails
RULE = "split by job, not by length (ARCHITECTURE.md, 'Modules by job')"


def lengths_over(limit: int) -> dict[str, int]:
    """Module -> lines, of the modules longer than ``limit``."""
    return {
        module: n
        for module, path in MODULES.items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > limit
    }


def test_modules_are_split_by_job_not_by_length():
    """Modules over ``REVIEW_LINES`` are named in a warning (pytest's summary shows it) for the review to judge; a
    module over ``MAX_LINES`` fails, with the rule to split it by."""
    assert lengths_over(0) and not lengths_over(10**9)  # the scan reads every module
    review = lengths_over(REVIEW_LINES)
    if review:
        warnings.warn(
            f"modules over {REVIEW_LINES} lines, for review -- does each still do one job? "
            + ", ".join(f"{m} ({n})" for m, n in sorted(review.items()))
            + f"; {RULE}",
            stacklevel=1,
        )
    long = lengths_over(MAX_LINES)
    assert not long, (
        f"modules over {MAX_LINES} lines: "
        + ", ".join(f"{m} ({n})" for m, n in sorted(long.items()))
        + f"; {RULE}: move each job it does into a module of its own"
    )
