"""Fault family 10 (issue 33): bad paths and damaged files are one line, never a traceback or a stuck run.

Paths: ``out=`` under a regular file, in a loop of symbolic links, with a 300-character name or beyond the longest
path; a folder of ``.txt`` files with a non-UTF-8 name; ``goldfish mask --file`` on a folder, a missing file, Latin-1
text or invalid UTF-8 on standard input; FIFOs where a file is read. Files: a damaged ``rng_*.json`` or
``trainer_state.json`` in the newest checkpoint makes auto-resume fall back to the one before (with a warning), and
every checkpoint damaged says how to proceed; a damaged ``summary.json`` in a series; a base model's card with a
``!!python/object`` tag or Latin-1 text no longer fails the fine-tune at export.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_faults import _prepare_argv, as_killed_at_step_4, assert_one_error, cli, hashes, train_argv

from goldfish.io import read_jsonl


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread, as the rest of the fault suite."""


@pytest.mark.parametrize(
    "case, needle",
    [
        ("under_a_file", "which is a file, not a folder"),
        ("symlink_loop", "loop of symbolic links"),
        ("name_of_300_characters", "too long"),
        ("path_beyond_the_longest", "too long"),
    ],
)
def test_a_bad_output_path_is_one_line(data, tmp_path, capsys, case, needle):
    (tmp_path / "file").write_text("mine")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    out = {
        "under_a_file": tmp_path / "file" / "run",
        "symlink_loop": tmp_path / "loop" / "run",
        "name_of_300_characters": tmp_path / ("r" * 300),
        "path_beyond_the_longest": tmp_path.joinpath(*(["d" * 200] * 25)),
    }[case]
    before = hashes(tmp_path)
    assert_one_error(*cli(train_argv(data, out), capsys), needle)
    assert hashes(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["file", "loop"]


def test_a_txt_file_with_a_non_utf8_name_is_one_line(tmp_path, capsys):
    folder = tmp_path / "texts"
    folder.mkdir()
    for i in range(30):
        (folder / f"doc{i}.txt").write_text(" ".join(["the river city king"] * 30))
    Path(os.fsdecode(bytes(folder) + b"/caf\xe9.txt")).write_text(" ".join(["the stone light"] * 30))
    assert_one_error(*cli(_prepare_argv(folder, tmp_path / "prep"), capsys), "caf\\xe9.txt", "not UTF-8")
    assert not (tmp_path / "prep").exists()


@pytest.mark.parametrize("source", ["folder", "missing", "latin1", "stdin_invalid_utf8"])
def test_mask_input_that_is_not_a_text_file_is_one_line(tmp_path, capsys, monkeypatch, source):
    import io
    import sys

    if source == "folder":
        argv, needle = ["--file", tmp_path], "it is a folder"
    elif source == "missing":
        argv, needle = ["--file", tmp_path / "missing.txt"], "missing.txt"
    elif source == "latin1":
        (tmp_path / "latin1.txt").write_bytes(b"caf\xe9 au lait\n")
        argv, needle = ["--file", tmp_path / "latin1.txt"], "is not UTF-8 text"
    else:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"caf\xe9 au lait\n")))
        argv, needle = ["--file", "-"], "standard input is not UTF-8 text"
    assert_one_error(*cli(["mask", *argv], capsys), needle)


def test_a_source_that_is_a_fifo_is_one_line_not_a_hang(tmp_path, capsys):
    os.mkfifo(tmp_path / "corpus.jsonl")
    assert_one_error(*cli(_prepare_argv(tmp_path / "corpus.jsonl", tmp_path / "prep"), capsys), "not a regular file")


@pytest.mark.parametrize(
    "damage",
    [
        "rng_truncated",
        "rng_wrong_shape",
        "rng_tensor_garbled",
        "state_wrong_step",
        "state_progress_text",
        "state_a_list",
    ],
)
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(data, tmp_path, capsys, damage):
    """Auto-resume skips it with a warning and finishes from step 2 -- bit-identical to the uninterrupted run --
    instead of failing on it at every rerun."""
    from safetensors.torch import save_file

    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    reference = hashes(run / "model")["model.safetensors"]
    as_killed_at_step_4(run)
    step4 = run / "checkpoints" / "step_000004"
    state = json.loads((step4 / "trainer_state.json").read_text())
    if damage == "rng_truncated":
        (step4 / "rng_rank00000.json").write_text('{"python": [3, [1, 2], null], "numpy"')
    elif damage == "rng_wrong_shape":
        (step4 / "rng_rank00000.json").write_text('{"python": 1, "numpy": [1]}')
    elif damage == "rng_tensor_garbled":
        import torch

        save_file({"torch_cpu": torch.zeros(3, dtype=torch.uint8)}, str(step4 / "rng_rank00000.safetensors"))
    elif damage == "state_wrong_step":
        (step4 / "trainer_state.json").write_text(json.dumps({**state, "step": 6}))
    elif damage == "state_progress_text":
        (step4 / "trainer_state.json").write_text(json.dumps({**state, "progress": "x"}))
    else:
        (step4 / "trainer_state.json").write_text("[1, 2]")
    rc, err = cli(train_argv(data, run), capsys)
    assert rc == 0 and f"skipping checkpoint {step4}" in err, err
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == list(range(1, 7))
    assert hashes(run / "model")["model.safetensors"] == reference


def test_every_checkpoint_damaged_says_how_to_proceed(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    as_killed_at_step_4(run)
    for folder in (run / "checkpoints").iterdir():
        (folder / "rng_rank00000.json").write_text("{")
    before = hashes(run)
    assert_one_error(*cli(train_argv(data, run), capsys), "no readable checkpoint", "--overwrite")
    assert hashes(run) == before
    assert cli([*train_argv(data, run), "--overwrite"], capsys)[0] == 0  # the way out it names works
    assert (run / "model" / "model.safetensors").is_file()


@pytest.mark.parametrize(
    "card",
    [
        b"---\nlicense: !!python/object/apply:os.system ['touch PWNED']\n---\n# card\n",
        b"---\nlicense: mit\n---\n# caf\xe9\n",
        b"---\nbase_model: [unclosed\n---\n",
    ],
)
def test_fine_tuning_a_model_whose_card_is_damaged_finishes(data, tmp_path, capsys, monkeypatch, card):
    """The base model's card only says what license and hub id it declares: unreadable, the new card says neither,
    with a warning -- the fine-tune (read at export, after all the training) is not lost on it."""
    monkeypatch.chdir(tmp_path)
    base = tmp_path / "base"
    assert cli(train_argv(data, tmp_path / "first"), capsys)[0] == 0
    shutil.copytree(tmp_path / "first" / "model", base)
    (base / "README.md").write_bytes(card)
    rc, err = cli(train_argv(data, tmp_path / "run", model={"path": str(base)}), capsys)
    assert rc == 0 and f"warning: model card {base / 'README.md'}" in err, err
    assert (tmp_path / "run" / "model" / "README.md").is_file() and not (tmp_path / "PWNED").exists()


def test_update_card_on_a_damaged_card_is_one_line_after_the_results_are_written(data, tmp_path, capsys):
    from test_faults import _eval_argv

    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    (run / "model" / "README.md").write_bytes(b"---\nlicense: mit\n---\n\xff\xfe")
    before = (run / "model" / "README.md").read_bytes()
    assert_one_error(
        *cli([*_eval_argv(run / "model", data, tmp_path / "ev"), "--update-card"], capsys), "README.md", "not UTF-8"
    )
    assert (run / "model" / "README.md").read_bytes() == before and (tmp_path / "ev" / "results.json").is_file()


def test_a_nul_character_or_non_utf8_text_in_a_path_setting_is_one_line(data, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text('out: "runs/a\\0b"\n')
    assert_one_error(*cli(["train", config, f"data.path={data}"], capsys), "NUL")
    assert_one_error(*cli(train_argv(data, os.fsdecode(bytes(tmp_path) + b"/r\xff")), capsys), "not UTF-8 text")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_prepare_source_path_under_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert_one_error(
        *cli(_prepare_argv(tmp_path / "file" / "corpus.jsonl", tmp_path / "prep"), capsys), "source.path not found"
    )
