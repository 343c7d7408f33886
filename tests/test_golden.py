"""Golden losses: a fixed tiny run whose per-step losses and gradient norms must not move under refactors.

Two runs of the trainer in this process (one torch thread, fp32, seed 0, 6 steps of 2 micro-batches each):
the standard loss and the Goldfish loss (k=3, hash context h=4). Their per-step ``loss``, ``kept_loss``,
``dropped_loss``, ``grad_norm``, token counts and learning rates are stored in ``tests/golden/tiny_losses.json``. The
stored numbers come from the code before the architecture refactor (#12); a change that moves them changes what is
trained.

How close is close enough depends on the machine's arithmetic. The one that pinned the file reproduces it bit for bit
(one thread, the same kernels summing in the same order); step 1 sends the seeded initial weights through every
kernel of the forward pass, the backward pass and the gradient norm, so a machine whose step-1 values equal the file's
bit for bit rounds as the pinning one did, and there every value must be equal. Another instruction set sums in
another order: there each value may move by what fp32 rounding allows (``train_helpers.step_tolerance``). Counts
and learning rates are integers or exact Python arithmetic: equal everywhere.

Regenerate only for a deliberate change of the numerics (say why in the commit):
``GOLDFISH_UPDATE_GOLDEN=1 OMP_NUM_THREADS=1 pytest tests/test_golden.py`` rewrites the file and fails on purpose;
the check is the next run, without the variable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from train_helpers import STEP_KEYS, load_weights, make_prepared, step_tolerance, tiny_config

from goldfish.config import from_dict
from goldfish.io import read_jsonl
from goldfish.train import train
from goldfish.train_config import TrainConfig

GOLDEN = Path(__file__).parent / "golden" / "tiny_losses.json"
KEYS = ("loss", "kept_loss", "dropped_loss", "grad_norm", "kept_tokens", "dropped_tokens", "lr")
TOKENS = 4 * 32  # targets per step: 2 micro-batches of 2 rows x 32 positions
RUNS = {
    "standard": {},
    "goldfish": {"loss": {"type": "goldfish", "goldfish": {"k": 3, "h": 4}}},
}


def _run(data: Path, out: Path, overrides: dict) -> list[dict]:
    cfg = tiny_config(data, out, schedule={"max_steps": 6, "global_batch_size": 4, "micro_batch_size": 2})
    cfg.update(overrides)
    records = read_jsonl(train(from_dict(TrainConfig, cfg)) / "metrics.jsonl")
    return [{k: r[k] for k in KEYS} for r in records]


def _same_arithmetic(got: list[dict], expected: list[dict]) -> bool:
    """Step 1's rounded values equal the file's bit for bit: this machine rounds as the one that pinned it."""
    return all(got[0][key] == expected[0][key] for key in STEP_KEYS)


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
        pytest.fail(
            f"rewrote the golden {name!r} run in {GOLDEN}; review the diff, then rerun without "
            "GOLDFISH_UPDATE_GOLDEN to check it"
        )
    expected = json.loads(GOLDEN.read_text())[name]
    assert len(got) == len(expected) == 6
    exact = _same_arithmetic(got, expected)
    params = sum(t.numel() for t in load_weights(tmp_path / name).values())
    for step, (g, e) in enumerate(zip(got, expected), start=1):
        for key in KEYS:
            if exact or key not in STEP_KEYS or e[key] is None:
                assert g[key] == e[key], f"{name} step {step} {key}: {g[key]} != golden {e[key]} (exact: {exact})"
            else:
                assert g[key] == pytest.approx(e[key], rel=step_tolerance(key, step, TOKENS, params), abs=0), (
                    f"{name} step {step} {key}"
                )
    if name == "goldfish":  # the golden run really exercises the mask: some targets dropped every step
        assert all(e["dropped_tokens"] > 0 and e["dropped_loss"] is not None for e in expected)
    else:
        assert all(e["dropped_tokens"] == 0 for e in expected)
