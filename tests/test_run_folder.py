"""A training run folder's files are named once (``goldfish.run_folder.TrainRun``) and JSON is read by one reader
(``goldfish.io.read_json``): its default for a missing file, its one-line error for a damaged one."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from goldfish.errors import UserError
from goldfish.io import read_json
from goldfish.run_folder import TrainRun

REPO = Path(__file__).resolve().parents[1]


def test_the_names_of_a_run_folder(tmp_path):
    run = TrainRun(str(tmp_path))  # a str or a path
    assert run.path == tmp_path
    assert (run.model, run.summary, run.metrics, run.mask, run.config, run.checkpoints) == (
        tmp_path / "model",
        tmp_path / "summary.json",
        tmp_path / "metrics.jsonl",
        tmp_path / "mask.json",
        tmp_path / "config.yaml",
        tmp_path / "checkpoints",
    )


def test_a_run_is_finished_with_its_summary_and_its_exported_model(tmp_path):
    run = TrainRun(tmp_path)
    run.model.mkdir()
    assert not run.finished() and not run.has_model()
    (run.model / "config.json").write_text("{}")
    assert run.has_model() and not run.finished()
    assert run.read_summary() == {}  # none yet
    run.summary.write_text(json.dumps({"steps": 6}))
    assert run.finished() and run.read_summary() == {"steps": 6}


@pytest.mark.parametrize("text, why", [('{"steps": 6, ', "not JSON"), ("[1, 2]", "not a JSON object")])
def test_a_damaged_summary_is_one_line_naming_it_and_what_to_do(tmp_path, text, why):
    TrainRun(tmp_path).summary.write_text(text)
    with pytest.raises(UserError, match=f"summary.json is damaged \\({why}.*restore it, or train the run again") as e:
        TrainRun(tmp_path).read_summary()
    assert "\n" not in str(e.value)


def test_read_json_default_and_expected_type(tmp_path):
    missing, listed = tmp_path / "missing.json", tmp_path / "list.json"
    with pytest.raises(FileNotFoundError):
        read_json(missing)
    assert read_json(missing, None) is None and read_json(missing, {}) == {}
    listed.write_text("[1]")
    assert read_json(listed) == [1] and read_json(listed, {}, expect=list) == [1]
    with pytest.raises(UserError, match="list.json is damaged \\(not a JSON object\\); delete it to have it written"):
        read_json(listed, expect=dict)
    listed.write_bytes(b"\xff{")
    with pytest.raises(UserError, match="list.json is damaged \\(not JSON: .*; fix it so"):
        read_json(listed, fix="fix it so")


def test_no_other_module_spells_a_run_folders_file_names():
    """``metrics.jsonl`` and ``mask.json`` as literals appear only in ``run_folder`` (``summary.json`` also names an
    experiment's own summary, ``plan.StudyFiles``, so it is not scanned)."""
    names = {"metrics.jsonl", "mask.json"}
    found = []
    for path in sorted((REPO / "goldfish").rglob("*.py")) + sorted((REPO / "eval").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value}")
    assert found and all(f.startswith("goldfish/run_folder.py:") for f in found), found
