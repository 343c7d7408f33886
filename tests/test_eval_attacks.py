"""The model-free blind baseline, the reference and hash-aware attacks and kept/dropped accuracy on constructed
per-token log-probs, against hand-computed values and the ROC code of goldfish.eval.membership."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from tolerances import U64, rounding

from goldfish.eval.attacks import blind_scores, calibrated, kept_scores, teacher_forced_accuracy
from goldfish.eval.membership import evaluate_attack


def test_blind_scores_are_the_negated_zlib_ratio():
    texts = ["abababababababababab", "the quick brown fox jumps"]
    expected = [-len(zlib.compress(t.encode())) / len(t.encode()) for t in texts]
    assert blind_scores(texts).tolist() == expected  # the same one division


def test_blind_baseline_sees_a_shift_but_not_a_random_split():
    rng = np.random.default_rng(0)
    words = "river city music league station album county species party film".split()

    def prose(n: int) -> list[str]:
        return [" ".join(rng.choice(words, size=40)) for _ in range(n)]

    repetitive = ["la " * 40 for _ in range(30)]  # a different kind of text: compresses far better
    pool = prose(200)
    same = evaluate_attack(blind_scores(pool[:100]), blind_scores(pool[100:]), n_bootstrap=0)["auc"]
    shifted = evaluate_attack(blind_scores(repetitive), blind_scores(pool[:30]), n_bootstrap=0)["auc"]
    # the AUC of m = n = 100 exchangeable scores has sd sqrt((m + n + 1) / (12 m n)) = 0.041 (Mann-Whitney); 0.1 is
    # 2.4 of them (the documents are seeded, so this guards a change of the baseline, not chance)
    assert abs(same - 0.5) < 0.1
    assert shifted == 1.0


def test_reference_attack_removes_document_difficulty_that_fools_the_loss_attack():
    rng = np.random.default_rng(1)
    n, length = 40, 30
    # per-document difficulty shared by target and reference; members are 0.2 nats/token easier for the target
    difficulty = rng.uniform(-6.0, -1.0, size=2 * n)
    ref = [d + rng.normal(0, 0.05, length) for d in difficulty]
    target = [r + (0.2 if i < n else 0.0) for i, r in enumerate(ref)]
    loss_auc = evaluate_attack([t.mean() for t in target[:n]], [t.mean() for t in target[n:]], n_bootstrap=0)["auc"]
    scores = calibrated(target, ref)
    # float64 (r + 0.2) - r and a mean of 30: rounding relative to the terms' scale (|r| <= 6.2)
    tol = rounding(length + 2, U64) * 6.2
    assert scores[:n] == pytest.approx(np.full(n, 0.2), abs=tol) and scores[n:] == pytest.approx(np.zeros(n), abs=tol)
    assert evaluate_attack(scores[:n], scores[n:], n_bootstrap=0)["auc"] == 1.0
    assert loss_auc < 0.75  # difficulty dominates the raw loss


def test_hash_aware_scores_use_only_kept_targets():
    logp = [np.array([-1.0, -5.0, -2.0, -7.0]), np.array([-3.0, -3.0])]
    kept = [np.array([True, False, True, False]), np.array([False, False])]
    scores = kept_scores(logp, kept)
    assert scores[0] == -1.5 and np.isnan(scores[1])  # (-1 - 2) / 2: exact in binary
    ref = [np.array([-2.0, -2.0, -2.0, -2.0]), np.array([-1.0, -1.0])]
    assert calibrated(logp, ref, kept)[0] == 0.5  # mean of (1, 0) over the kept targets: exact


def test_teacher_forced_accuracy_on_kept_and_dropped_positions():
    correct = [np.array([1, 1, 0, 1], bool), np.array([0, 1], bool)]
    dropped = [np.array([0, 1, 1, 0], bool), np.array([0, 1], bool)]
    acc = teacher_forced_accuracy(correct, dropped)
    assert acc["accuracy"] == 4 / 6  # counts over counts: one rounded division each, as written here
    assert acc["kept_accuracy"] == 2 / 3 and acc["dropped_accuracy"] == 2 / 3
    assert (acc["n_kept"], acc["n_dropped"]) == (3, 3)
