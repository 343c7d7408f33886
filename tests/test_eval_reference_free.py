"""ReCaLL (Xie et al. 2024) and DC-PDD (Zhang et al. 2024): the published definitions on hand-computed examples, a
second implementation of ReCaLL's two likelihoods from plain forward passes, and both attacks in the membership
table of ``goldfish eval`` with an AUC and its interval."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from goldfish.cli import main
from goldfish.eval.membership import dc_pdd_score, recall_score, recall_scores, token_counts

from eval_fixtures import TEXTS, save_model_folder, tiny_llama, tiny_tokenizer, write_jsonl


def test_recall_is_the_ratio_of_the_conditional_to_the_unconditional_average_log_likelihood():
    assert recall_score(-3.0, -2.0) == 1.5  # a member's likelihood drops more after a nonmember prefix: > 1
    assert recall_score(-2.0, -2.0) == 1.0
    assert math.isnan(recall_score(-1.0, 0.0))


def test_dc_pdd_by_hand():
    tokens = [0, 1, 2, 1, 3]  # targets 1, 2, 1, 3: first occurrences of 1, 2, 3 at targets 0, 1, 3
    logp = np.log([0.5, 0.2, 0.9, 0.1])
    counts = np.array([0, 2, 1, 1])  # f = (1 + c) / (4 + 4) = 1/8, 3/8, 2/8, 2/8
    alpha = [0.5 * math.log(8 / 3), 0.2 * math.log(4), 0.1 * math.log(4)]  # 0.490, 0.277, 0.139
    assert dc_pdd_score(tokens, logp, counts, clip=1.0) == pytest.approx(sum(alpha) / 3)
    assert dc_pdd_score(tokens, logp, counts, clip=0.3) == pytest.approx((0.3 + alpha[1] + alpha[2]) / 3)
    assert dc_pdd_score(tokens, logp, counts, clip=0.01) == pytest.approx(0.01)  # every alpha above the bound
    assert token_counts([[1, 2], [1, 3]], 4).tolist() == [0, 2, 1, 1]


def _mean_logp(model, ids: list[int], first: int) -> float:
    """Average log p of targets first .. len-1 from one plain forward pass (the second implementation)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double()  # (T, V)
    logp = torch.log_softmax(logits, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]  # (T-1,)
    return float(logp[first - 1 :].mean())


def test_recall_scores_equal_plain_forward_passes():
    tok = tiny_tokenizer()
    model = tiny_llama(len(tok), seed=1)
    docs = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS[:3]]
    prefix = tok(TEXTS[5], add_special_tokens=False)["input_ids"][:10]
    loop = dict(window=24, stride=None, token_budget=4096, chunk=512, progress=False, logger=None)
    got = recall_scores(model, docs, prefix, skip=[2], loop=loop)
    n = 24 - len(prefix)  # the document's first n tokens fit beside the prefix
    for i, d in enumerate(docs[:2]):
        head = d[:n]
        want = _mean_logp(model, prefix + head, len(prefix) + 1) / _mean_logp(model, head, 1)
        assert got[i] == pytest.approx(want, rel=1e-4)
    assert math.isnan(got[2])  # a document of the prefix is not scored


def test_both_attacks_are_in_the_membership_table(tmp_path):
    tok = tiny_tokenizer()
    model = save_model_folder(tmp_path / "model", tiny_llama(len(tok), seed=2), tok)
    docs = write_jsonl(tmp_path / "docs.jsonl", TEXTS)
    non = write_jsonl(tmp_path / "non.jsonl", [" ".join(reversed(t.split())) for t in TEXTS], "non")
    out = tmp_path / "ev"
    assert (
        main(
            [
                "eval",
                "--model",
                str(model),
                "--data",
                str(docs),
                "--nonmembers",
                str(non),
                "--out",
                str(out),
                "tasks=[membership]",
                "progress=false",
                "membership.n_bootstrap=50",
                "membership.recall_shots=2",
            ]
        )
        == 0
    )
    res = json.loads((out / "results.json").read_text())
    attacks = res["membership"]["attacks"]
    for name in ("recall", "dc_pdd"):
        a = attacks[name]
        assert 0 <= a["auc"] <= 1 and a["auc_ci_low"] <= a["auc"] <= a["auc_ci_high"]
    assert attacks["recall"]["n_nonmembers"] == len(TEXTS) - 2 and attacks["dc_pdd"]["n_nonmembers"] == len(TEXTS)
    report = (out / "report.md").read_text()
    assert "| recall |" in report and "| dc_pdd |" in report


def test_a_registered_attack_joins_the_table(monkeypatch):
    """An attack is one registered function: its scores get an AUC like the others (here the document length, which
    separates the long members from the short nonmembers perfectly: AUC 1)."""
    from goldfish.eval import attack_names, membership

    monkeypatch.setattr(membership, "ATTACKS", dict(membership.ATTACKS))
    monkeypatch.setitem(attack_names.ATTACK_SPECS, "length", attack_names.AttackSpec("length"))  # its one line
    membership.register_attack("length")(lambda x: {"length": np.array([len(d) for d in x.docs], dtype=float)})
    tok = tiny_tokenizer()
    model = tiny_llama(len(tok), seed=1)
    members = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    nonmembers = [d[:8] for d in members]
    kw = dict(progress=False, window=64)
    section = membership.membership_section(
        membership.score_documents(model, members, **kw),
        membership.score_documents(model, nonmembers, **kw),
        n_bootstrap=20,
    )
    assert list(section["attacks"])[-1] == "length" and section["attacks"]["length"]["auc"] == 1.0
    assert list(section["attacks"])[:3] == ["loss", "min_k_20", "min_k_pp_20"]  # the registered order
