"""``tests/tiers.py`` names only tests that exist: a test renamed or removed leaves no stale name behind, and a name
listed there that matches nothing would silently leave a slow test in ``make test-unit``'s tier."""

from __future__ import annotations

import ast
from pathlib import Path

from tiers import INTEGRATION

TESTS = Path(__file__).resolve().parent


def test_functions(module: str) -> set[str]:
    """The names of the test functions a test module defines (at its top and in its classes)."""
    path = TESTS / f"{module}.py"
    if not path.is_file():
        return set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [*tree.body, *(n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body)]
    return {
        n.name for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")
    }


test_functions.__test__ = False  # a helper, not a test


def stale_names(listed: dict[str, set[str]]) -> list[str]:
    """The entries of a tiers list (module -> test names, "*" for the whole module) that name no existing test."""
    missing = [f"{module}.py is no test module" for module in listed if not (TESTS / f"{module}.py").is_file()]
    return missing + [
        f"{module}::{name}"
        for module, names in sorted(listed.items())
        if (TESTS / f"{module}.py").is_file()
        for name in sorted(set(names) - {"*"} - test_functions(module))
    ]


stale_names.__test__ = False


def test_the_check_finds_a_stale_name():
    fake = {"test_tiers": {"test_the_check_finds_a_stale_name", "test_renamed_away"}, "test_gone": {"*"}}
    assert stale_names(fake) == ["test_gone.py is no test module", "test_tiers::test_renamed_away"]


def test_every_name_in_tiers_is_a_test_that_exists():
    assert len(INTEGRATION) > 10  # the list is read
    missing = stale_names(INTEGRATION)
    assert not missing, (
        "tests/tiers.py names tests that do not exist (renamed or removed? update the list): " + ", ".join(missing)
    )
