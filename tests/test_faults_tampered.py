"""Fault family 5 (issue 33): tampered or changing prepared folders never reach a model.

The manifest lists the sha256 of every tokenizer file; a training run reads and checks those files when it starts
and ships exactly them in its exported model -- nothing else of the prepared folder, whatever is planted there, and
the same bytes even if the folder is replaced (``prepare --overwrite``) while the run trains. A swapped or linked
tokenizer file is one line before any training.
"""

from __future__ import annotations

import os
import shutil

import pytest
from safetensors.torch import load_file
from test_faults import assert_one_error, cli, train_argv
from train_helpers import tiny_config

import goldfish.train as trainer
from goldfish.config import from_dict
from goldfish.train import train
from goldfish.train_config import TrainConfig


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread (as the other fault suites)."""


def _copy(data, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    return copy


def test_a_file_planted_in_the_tokenizer_folder_never_reaches_the_model(data, tmp_path):
    copy = _copy(data, tmp_path)
    listed = sorted(p.name for p in (copy / "tokenizer").iterdir())
    (copy / "tokenizer" / "model.safetensors").write_bytes(b"planted weights")
    secret = tmp_path / "private.txt"
    secret.write_text("a private file")
    (copy / "tokenizer" / "notes.txt").symlink_to(secret)
    run = train(from_dict(TrainConfig, tiny_config(copy, tmp_path / "run")))
    model = run / "model"
    assert not (model / "notes.txt").exists()
    weights = load_file(str(model / "model.safetensors"))  # the trained weights, not the planted bytes
    assert weights and all(t.numel() for t in weights.values())
    shipped = {p.name for p in model.iterdir()} & set(listed)
    assert shipped == set(listed)  # every tokenizer file the manifest lists, from the data's own bytes
    for name in listed:
        assert (model / name).read_bytes() == (data / "tokenizer" / name).read_bytes()


@pytest.mark.parametrize("damage", ["swapped", "symlink", "missing"])
def test_a_changed_tokenizer_file_is_one_line_before_training(data, tmp_path, capsys, damage):
    copy = _copy(data, tmp_path)
    target = copy / "tokenizer" / "tokenizer.json"
    if damage == "swapped":
        target.write_text(target.read_text().replace('"<eos>"', '"<EOS>"'))
    elif damage == "symlink":
        real = tmp_path / "elsewhere.json"
        real.write_bytes(target.read_bytes())
        target.unlink()
        target.symlink_to(real)
    else:
        target.unlink()
    assert_one_error(*cli(train_argv(copy, tmp_path / "run"), capsys), "tokenizer.json")
    assert not (tmp_path / "run").exists()


def test_the_tokenizer_shipped_is_the_one_read_at_the_start(data, tmp_path, monkeypatch):
    """A ``prepare --overwrite`` of the folder while the run trains changes nothing the run ships."""
    copy = _copy(data, tmp_path)
    before = {p.name: p.read_bytes() for p in (copy / "tokenizer").iterdir()}
    real_finish = trainer._finish

    def finish(*args, **kwargs):  # the folder is rewritten after training read it, before the model is exported
        for p in (copy / "tokenizer").iterdir():
            p.write_bytes(b"{}")
        return real_finish(*args, **kwargs)

    monkeypatch.setattr(trainer, "_finish", finish)
    run = train(from_dict(TrainConfig, tiny_config(copy, tmp_path / "run")))
    for name, data_bytes in before.items():
        assert (run / "model" / name).read_bytes() == data_bytes
    assert os.path.getsize(copy / "tokenizer" / "tokenizer.json") == 2  # it really was rewritten meanwhile
