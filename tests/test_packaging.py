"""What the wheel declares: every third-party package that goldfish/ or eval/ imports is a dependency or an
optional extra in pyproject.toml (an undeclared one works in the repository's venv only because something else
pulled it in). The wheel itself is built and installed into a clean venv by CI (.ci/wheel)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys

import pytest
from train_helpers import REPO

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

# imports that need a package other than the one they name: torch.utils.tensorboard is torch's code but imports
# the tensorboard package
INDIRECT = {"torch.utils.tensorboard": "tensorboard"}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def declared() -> dict[str, str]:
    """{normalised distribution: where declared} for the dependencies and every optional extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    out = {}
    for where, requirements in [
        ("dependencies", project["dependencies"]),
        *((f"extra {k}", v) for k, v in project["optional-dependencies"].items()),
    ]:
        for requirement in requirements:
            out.setdefault(_normalise(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]), where)
    return out


def imports() -> dict[str, list[str]]:
    """{imported top-level module (or INDIRECT key): [files]} over goldfish/ and eval/, function-local imports
    included; the standard library and the package itself left out."""
    found: dict[str, list[str]] = {}
    for path in sorted((REPO / "goldfish").rglob("*.py")) + sorted((REPO / "eval").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                key = next((k for k in INDIRECT if name == k or name.startswith(k + ".")), name.split(".")[0])
                if key.split(".")[0] not in sys.stdlib_module_names and key.split(".")[0] not in (
                    "goldfish",
                    "__future__",
                ):
                    found.setdefault(key, []).append(str(path.relative_to(REPO)))
    return found


def distributions(module: str) -> set[str]:
    """The distributions that provide an import name (installed metadata; the name itself when not installed)."""
    if module in INDIRECT:
        return {_normalise(INDIRECT[module])}
    provided = importlib.metadata.packages_distributions().get(module)
    return {_normalise(d) for d in provided} if provided else {_normalise(module)}


def test_the_scan_sees_the_package():
    found = imports()
    assert {"torch", "yaml", "pyarrow", "torch.utils.tensorboard", "wandb"} <= set(found)
    assert "os" not in found and "goldfish" not in found
    assert distributions("yaml") == {"pyyaml"} and distributions("sklearn") == {"scikit-learn"}


def test_every_third_party_import_is_declared():
    have = declared()
    missing = {module: files[0] for module, files in imports().items() if not distributions(module) & set(have)}
    assert not missing, f"imported but not declared in pyproject.toml (module: first file): {missing}"


def test_optional_integrations_are_extras_not_dependencies():
    have = declared()
    for extra in ("tensorboard", "wandb", "trl", "axonn"):
        assert have[extra] == f"extra {extra}"
    assert have["pyarrow"] == have["huggingface-hub"] == "dependencies"


def test_every_code_folder_is_a_package_of_the_wheel():
    """setuptools lists the packages by name (eval/ installs as goldfish.eval): a new subpackage left out of the list
    is missing from the wheel while every test in the checkout passes (it happened: goldfish.experiment.sections)."""
    tool = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    where = {folder: package for package, folder in tool["package-dir"].items()}
    code = set()
    for init in [*(REPO / "goldfish").rglob("__init__.py"), *(REPO / "eval").rglob("__init__.py")]:
        rel = init.parent.relative_to(REPO).as_posix()
        top = next(f for f in sorted(where, key=len, reverse=True) if rel == f or rel.startswith(f + "/"))
        code.add(".".join([where[top], *rel[len(top) :].strip("/").split("/")]).strip("."))
    assert code and code <= set(tool["packages"]), f"not in [tool.setuptools] packages: {code - set(tool['packages'])}"
