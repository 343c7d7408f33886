"""The mask-consistent adversary: batched KV-cached decoding against a slow per-step reference, the teacher-forced
measures' invariants, the mask settings from a run folder, ``goldfish eval ... decoding.adversary=mask_consistent``
end to end, and the hash-preceding strategy closing the channel."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from goldfish.cli import main
from goldfish.eval import adversary
from goldfish.eval.generate import generate
from goldfish.eval.stats import mcnemar_exact
from goldfish.masks import GoldfishConfig, config_mask, next_token_drops

from eval_fixtures import TEXTS, save_model_folder, tiny_llama, tiny_tokenizer, write_jsonl
from tolerances import proportion_se
from test_eval_cli import _documented


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return tiny_llama(len(tok), seed=3)


def _candidate_drops(seq: list[int], gcfg: GoldfishConfig, vocab: int) -> torch.Tensor:
    """(V,) the mask's decision for the next position under each candidate: the row ``seq + [v]`` masked whole."""
    rows = torch.tensor([seq + [v] for v in range(vocab)])
    return config_mask(rows, gcfg)[:, -1]


@torch.no_grad()
def _reference_decode(model, prefix: list[int], steps: int, gcfg: GoldfishConfig, told, threshold: float):
    """The documented rule one step at a time: a full forward pass of the whole sequence (no cache, batch 1), the
    candidates' decisions by masking each extended row, the restricted argmax."""
    seq = list(prefix)
    for step in range(steps):
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
        drops = _candidate_drops(seq, gcfg, len(logits))
        if told is not None:
            allowed = drops if told[step] else ~drops
        else:
            allowed = drops if torch.softmax(logits, -1).max() < threshold else torch.ones_like(drops)
        seq.append(int(logits.masked_fill(~allowed, float("-inf")).argmax()) if allowed.any() else int(logits.argmax()))
    return seq[len(prefix) :]


@pytest.mark.parametrize("strategy", ["hash", "hash-table"])
def test_batched_mask_consistent_decoding_equals_the_per_step_reference(model, tok, strategy):
    gcfg = GoldfishConfig(k=3, h=5, strategy=strategy, special_ids=[0])
    docs = [tok(t)["input_ids"] for t in TEXTS]
    prefixes = [d[: 6 + 2 * i] for i, d in enumerate(docs)]  # lengths 6..16: left padding in every batch
    steps = 10
    rng = np.random.default_rng(0)
    told = [rng.random(steps) < 1 / 3 for _ in prefixes]
    for variant_told, threshold in ((told, 0.9), (None, 0.5)):
        got = adversary.mask_consistent_generate(
            model, prefixes, steps, gcfg, told=variant_told, threshold=threshold, batch_size=4, progress=False
        )
        for i, p in enumerate(prefixes):
            ref = _reference_decode(model, p, steps, gcfg, None if variant_told is None else told[i], threshold)
            assert got[i] == ref, (strategy, variant_told is None, i)


def test_next_token_drops_equals_masking_each_extended_row():
    g = torch.Generator().manual_seed(1)
    for strategy in ("hash", "hash-preceding", "static", "hash-table"):
        gcfg = GoldfishConfig(k=4, h=5, strategy=strategy, special_ids=[1], seed=3)
        ctx = torch.randint(0, 40, (4, 11), generator=g)
        ctx[0, :4] = -1  # left padding
        ctx[1, 7] = 1  # a special id inside: a document boundary
        got = next_token_drops(ctx, gcfg, 40)
        for b in range(4):
            row = ctx[b][ctx[b] >= 0] if strategy == "hash-table" else ctx[b]  # hash-table: the row after its padding
            assert torch.equal(got[b], _candidate_drops(row.tolist(), gcfg, 40)), (strategy, b)
        assert not got[:, 1].any()  # a special candidate is never dropped


def test_next_token_drops_canonical_equals_masking_each_extended_row():
    from goldfish.data import load_tokenizer
    from goldfish.fold import token_fold

    gpt2 = load_tokenizer("gpt2")
    gcfg = GoldfishConfig(k=4, h=3, strategy="canonical", fold=token_fold(gpt2))
    ctx = torch.tensor([gpt2("The quick brown fox jumps over")["input_ids"]])
    got = next_token_drops(ctx, gcfg, len(gpt2), chunk=8192)
    some = torch.randint(0, len(gpt2), (300,), generator=torch.Generator().manual_seed(2))
    rows = torch.cat([ctx.expand(300, -1), some[:, None]], dim=1)
    assert torch.equal(got[0, some], config_mask(rows, gcfg)[:, -1])
    assert 0.15 < got.float().mean() < 0.35  # about 1/k of the vocabulary would be dropped


def test_teacher_forced_restriction_never_loses_a_hit_and_the_oracle_allows_the_truth(model, tok):
    gcfg = GoldfishConfig(k=2, h=4, special_ids=[0])
    docs = [tok(t)["input_ids"] for t in TEXTS]
    prefixes, suffixes = [d[:8] for d in docs], [d[8:20] for d in docs]
    told = []
    for d in docs:
        told.append(config_mask(torch.tensor([d]), gcfg)[0, 8:20].numpy())
    out = adversary.teacher_forced(model, prefixes, suffixes, told, gcfg, 0.9, batch_size=4, progress=False)
    for o in out:  # the truth is always allowed, so a plain hit stays a hit
        assert o["tf_oracle_dropped_hits"] >= o["tf_dropped_hits"]
        assert o["tf_switch_dropped_hits"] >= o["tf_dropped_hits"]
    # the true next token is always among the candidates the told decision allows (the oracle never excludes it)
    for d in docs:
        for t in range(8, 20):
            drops = next_token_drops(torch.tensor([d[:t]]), gcfg, len(tok))[0]
            assert bool(drops[d[t]]) == bool(config_mask(torch.tensor([d]), gcfg)[0, t])


def test_hash_preceding_closes_the_channel(model, tok):
    """Against hash-preceding the decision at a position is the same for every candidate, so the restriction tells
    an attacker nothing: the oracle decodes exactly what greedy decodes, and a random guesser restricted by the mask
    is no better than an unrestricted one -- against hash its chance rises k-fold."""
    gcfg = GoldfishConfig(k=4, h=5, strategy="hash-preceding")
    docs = [tok(t)["input_ids"] for t in TEXTS]
    prefixes = [d[:10] for d in docs]
    told = [config_mask(torch.tensor([d]), gcfg)[0, 10:22].numpy() for d in docs]
    assert sum(t.sum() for t in told) > 0
    oracle = adversary.mask_consistent_generate(model, prefixes, 12, gcfg, told=told, batch_size=3, progress=False)
    assert oracle == generate(model, prefixes, 12, batch_size=3, progress=False)
    # the allowed set: every candidate (hash-preceding) vs ~1/k of them (hash), over many contexts
    g = torch.Generator().manual_seed(4)
    ctx = torch.randint(1, 5000, (64, 20), generator=g)
    for strategy, expected in (("hash-preceding", None), ("hash", 0.25)):
        drops = next_token_drops(ctx, GoldfishConfig(k=4, h=13, strategy=strategy), 5000)  # (64, V)
        per_context = drops.float().mean(1)
        if expected is None:
            assert set(per_context.tolist()) <= {0.0, 1.0}  # one decision for every candidate
        else:
            # 64 x 5000 independent hash decisions of probability 1/k: the mean within 4 standard errors
            # (proportion_se(0.25, 320,000) = 7.7e-4), each context's share of 5000 above 0.2 (8 of its 0.0061)
            band = 4 * proportion_se(expected, drops.numel())
            assert abs(per_context.mean().item() - expected) < band and per_context.min() > 0.2


def _run_folder(root, tok, loss: dict):
    run = root / "run"
    save_model_folder(run / "model", tiny_llama(len(tok), seed=5), tok)
    (run / "config.yaml").write_text(yaml.safe_dump({"loss": loss}))
    return run


def test_mask_settings_from_the_run_folder_and_overrides(tmp_path, tok):
    run = _run_folder(
        tmp_path,
        tok,
        {"type": "goldfish", "goldfish": {"k": 8, "h": 7, "strategy": "hash", "seed": 2, "special_ids": [5]}},
    )
    from goldfish.eval.config import MaskSection

    gcfg = adversary.resolve_mask(MaskSection(), str(run), tok)
    assert (gcfg.k, gcfg.h, gcfg.seed, gcfg.strategy) == (8, 7, 2, "hash")
    assert gcfg.special_ids == sorted({5, tok.eos_token_id, tok.pad_token_id})
    assert adversary.resolve_mask(MaskSection(k=4), str(run), tok).k == 4  # a key set in the eval config wins
    assert adversary.resolve_mask(MaskSection(), str(run / "model"), tok).k == 8  # an experiment cell's model/
    std = _run_folder(tmp_path / "std", tok, {"type": "standard"})
    from goldfish.errors import UserError

    with pytest.raises(UserError, match="standard loss; set goldfish.k and goldfish.h"):
        adversary.resolve_mask(MaskSection(), str(std), tok)
    assert adversary.resolve_mask(MaskSection(k=4, h=13), str(std / "model"), tok).h == 13


def test_goldfish_eval_with_the_mask_consistent_adversary(tmp_path, tok, capsys):
    run = _run_folder(tmp_path, tok, {"type": "goldfish", "goldfish": {"k": 3, "h": 5, "strategy": "hash"}})
    docs = write_jsonl(tmp_path / "docs.jsonl", TEXTS)
    out = tmp_path / "ev"
    args = [
        "eval",
        "--model",
        str(run),
        "--data",
        str(docs),
        "--out",
        str(out),
        "data.prefix_lens=[8,12]",
        "data.suffix_len=6",
        "progress=false",
        "membership.n_bootstrap=20",
        "report=false",
    ]
    assert main(args + ["decoding.adversary=mask_consistent", "decoding.switch_threshold=0.6"]) == 0
    res = json.loads((out / "results.json").read_text())
    adv = res["adversary"]
    assert adv["mask"] == {"k": 3, "h": 5, "strategy": "hash", "seed": 0, "special_ids": [0]}
    assert adv["switch_threshold"] == 0.6 and [r["prefix_len"] for r in adv["rows"]] == [8, 12]
    for w in res["windows"]:
        doc = tok(TEXTS[int(w["doc_id"][3:])])["input_ids"]
        gcfg = GoldfishConfig(k=3, h=5, special_ids=[0])
        told = config_mask(torch.tensor([doc]), gcfg)[0, w["start"] + w["prefix_len"] :][:6].numpy()
        assert w["mask_dropped"] == int(told.sum())
        assert w["greedy_dropped_hits"] == sum(
            int(d and g == t) for g, t, d in zip(w["generation_ids"], w["truth_ids"], told)
        )
        assert 0 <= w["mc_oracle_dropped_hits"] <= w["mask_dropped"]
    doc = _documented()  # every field emitted is documented in eval/SCHEMA.md
    assert "adversary" in doc["top level"] and set(adv) <= doc["adversary"]
    assert set().union(*map(set, adv["rows"])) <= doc["adversary.rows"]
    assert set().union(*map(set, res["windows"])) <= doc["windows"]
    row = adv["rows"][0]
    ws = [w for w in res["windows"] if w["prefix_len"] == 8]
    n_dropped = sum(w["mask_dropped"] for w in ws)
    assert row["n_dropped"] == n_dropped
    if n_dropped:
        hits = sum(w["tf_oracle_dropped_hits"] for w in ws)
        # the mean of 0/1 float64 values: an exact sum, one correctly rounded division, as here
        assert row["dropped_accuracy"]["tf_oracle"]["mean"] == hits / n_dropped
    assert row["mcnemar_vs_greedy"]["mc_oracle"] == mcnemar_exact(
        [w["mc_oracle_exact_match"] for w in ws], [w["exact_match"] for w in ws]
    )
    # a checkpoint without mask settings: one error line naming the keys, exit 2, nothing written
    plain = tmp_path / "ev2"
    hf = save_model_folder(tmp_path / "hf", tiny_llama(len(tok), seed=5), tok)  # no run folder around it
    capsys.readouterr()
    args2 = [a if a != str(run) else str(hf) for a in args]
    args2[args2.index(str(out))] = str(plain)
    assert main(args2 + ["decoding.adversary=mask_consistent"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "goldfish.k" in err[0] and not plain.exists()
