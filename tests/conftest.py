"""Fixtures shared by the training tests."""

from __future__ import annotations

import pytest
import torch

from train_helpers import make_prepared


@pytest.fixture
def one_thread():
    """Run a test with one torch thread (bit-identical numerics with the one-thread subprocesses it compares to)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A tiny prepared folder: 16 rows x 32 tokens, vocabulary 64 (see ``train_helpers.make_prepared``)."""
    return make_prepared(tmp_path_factory.mktemp("prepared") / "tiny", rows=16, seq_len=32, vocab=64)
