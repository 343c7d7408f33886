"""Golden losses: a fixed tiny run whose per-step losses and gradient norms must not move under refactors.

Two runs of the trainer in this process (one torch thread, fp32, seed 0, 6 steps of 2 micro-batches each):
the standard loss and the Goldfish loss (k=3, hash context h=4). Their per-step ``loss``, ``kept_loss``,
``dropped_loss``, ``grad_norm`` and token counts are stored in ``tests/golden/tiny_losses.json`` and checked to 1e-6
(relative, or absolute near 0). The stored numbers come from the code before the architecture refactor (#12); a change
that moves them changes what is trained.

Regenerate only for a deliberate change of the numerics (say why in the commit):
``GOLDFISH_UPDATE_GOLDEN=1 OMP_NUM_THREADS=1 pytest tests/test_golden.py`` rewrites the file and fails on purpose;
the check is the next run, without the variable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from train_helpers import make_prepared, tiny_config

from goldfish.config import from_dict
from goldfish.io import read_jsonl
from goldfish.train import train
from goldfish.train_config import TrainConfig

GOLDEN = Path(__file__).parent / "golden" / "tiny_losses.json"
KEYS = ("loss", "kept_loss", "dropped_loss", "grad_norm", "kept_tokens", "dropped_tokens", "lr")
RUNS = {
    "standard": {},
    "goldfish": {"loss": {"type": "goldfish", "goldfish": {"k": 3, "h": 4}}},
}


def _run(data: Path, out: Path, overrides: dict) -> list[dict]:
    cfg = tiny_config(data, out, schedule={"max_steps": 6, "global_batch_size": 4, "micro_batch_size": 2})
    cfg.update(overrides)
    records = read_jsonl(train(from_dict(TrainConfig, cfg)) / "metrics.jsonl")
    return [{k: r[k] for k in KEYS} for r in records]


@pytest.fixture(scope="module")
def golden_data(tmp_path_factory):
    """16 packed rows x 32 tokens, vocabulary 64, seed 0 (``train_helpers.make_prepared``)."""
    return make_prepared(tmp_path_factory.mktemp("golden") / "tiny", rows=16, seq_len=32, vocab=64, seed=0)


@pytest.mark.parametrize("name", list(RUNS))
def test_golden_losses(golden_data, tmp_path, one_thread, name):
    got = _run(golden_data, tmp_path / name, RUNS[name])
    if os.environ.get("GOLDFISH_UPDATE_GOLDEN") == "1":
        stored = json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {}
        stored[name] = got
        GOLDEN.write_text(json.dumps(stored, indent=1) + "\n")
        # never a pass: a run that wrote the expectations cannot also check against them
        pytest.fail(f"rewrote the golden {name!r} run in {GOLDEN}; review the diff, then rerun without "
                    "GOLDFISH_UPDATE_GOLDEN to check it")
    expected = json.loads(GOLDEN.read_text())[name]
    assert len(got) == len(expected) == 6
    for step, (g, e) in enumerate(zip(got, expected), start=1):
        for key in KEYS:
            if e[key] is None or isinstance(e[key], int):
                assert g[key] == e[key], f"{name} step {step} {key}: {g[key]} != golden {e[key]}"
            else:
                assert g[key] == pytest.approx(e[key], rel=1e-6, abs=1e-6), f"{name} step {step} {key}"
    if name == "goldfish":  # the golden run really exercises the mask: some targets dropped every step
        assert all(e["dropped_tokens"] > 0 and e["dropped_loss"] is not None for e in expected)
    else:
        assert all(e["dropped_tokens"] == 0 for e in expected)
