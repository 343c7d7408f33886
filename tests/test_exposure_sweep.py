"""A size sweep with canaries, validation documents and tuning on them, end to end through ``run_experiment``
(tiny models, seconds of CPU each), checked against what the training loop actually read.

* every trained cell's ``exposure.json``: the tokens read, the targets' and canaries' shares of them and the copies
  read per label equal a recount over the rows the loop asked for (recorded by wrapping its step); a control
  trained on the background alone read no target and no canary;
* tuning by ``validation_loss`` picks, per size, the learning rate whose control has the lowest loss on the
  validation documents, which are neither members nor nonmembers;
* the report has the stream, per-stratum and exposure-threshold sections, and the scaling block E50 and canaries.
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from train_helpers import word_corpus

from goldfish.config import from_dict
from goldfish.data import load_prepared
from goldfish.experiment import default_pipeline, plan_cells
from goldfish.experiment.config import ExperimentConfig
from goldfish.experiment.runner import run_experiment


def _config(root) -> ExperimentConfig:
    tiny = {
        "train.model.name": "llama-demo",
        "train.model.num_layers": 1,
        "train.model.num_heads": 2,
        "train.model.intermediate_size": 64,
    }
    return from_dict(
        ExperimentConfig,
        {
            "name": "sweep",
            "out": str(root / "exp"),
            "control_mode": "background",
            "tune": {"axis": "lr", "by": "validation_loss", "per": ["size"]},
            "compare": {"axis": "size", "reference": "s16"},
            "data": {
                "name": "sweep",
                "source": {"name": "local", "path": str(root / "docs.jsonl")},
                "tokenizer": {"name": "bpe", "vocab_size": 300},
                "seq_len": 48,
                "packing": "pack",
                "min_tokens": 8,
                "doc_tokens": 16,
                "num_members": 12,
                "repetitions": [1, 2, 4],
                "nonmember_mode": "random_split",
                "num_nonmembers": 8,
                "num_validation": 6,
                "num_background": 20,
                "canaries": {"count": 6, "tokens": 12, "secret_tokens": 4},
            },
            "train": {
                "optim": {"warmup_frac": 0.0},
                "schedule": {"epochs": 1, "global_batch_size": 4, "micro_batch_size": 4},
                "checkpoint": {"every_steps": 0},
            },
            "eval": {
                "tasks": ["extraction", "membership", "canaries"],
                "canaries": {"n_candidates": 40},
                "data": {"prefix_lens": [8], "suffix_len": 8},
                "membership": {"n_bootstrap": 20},
                "report": False,
                "progress": False,
            },
            "grid": {
                "size": [
                    {"label": "s16", **tiny, "train.model.hidden_size": 16},
                    {"label": "s32", **tiny, "train.model.hidden_size": 32},
                ],
                "train.optim.lr": [3.0e-3, 1.0e-2],
            },
            "arms": {
                "standard": {"train.loss.type": "standard"},
                "goldfish": {"train.loss.type": "goldfish", "train.loss.goldfish.k": 4},
            },
        },
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    import goldfish.train as T

    root = tmp_path_factory.mktemp("sweep")
    word_corpus(root / "docs.jsonl", 70, 40, seed=5)
    cfg = _config(root)
    read: dict[str, list[np.ndarray]] = defaultdict(list)
    real_step = T._train_step
    mp = pytest.MonkeyPatch()
    mp.setattr(
        T,
        "_train_step",
        lambda c, engine, plan, rows, index, *rest: (
            read[str(c.out)].append(np.asarray(index)),
            real_step(c, engine, plan, rows, index, *rest),
        )[1],
    )
    try:
        run_experiment(cfg, progress=False)
    finally:
        mp.undo()
    return cfg, {p.cell.id: p for p in plan_cells(cfg, default_pipeline())}, read


def _recount(plan, consumed: np.ndarray) -> dict:
    """Tokens read per kind and copies read per member / canary, straight from the rows."""
    data = load_prepared(plan.train_data_dir, verify=False)
    evaluated = load_prepared(plan.data_dir, verify=False)
    m, b, c = len(evaluated.members), int(data.manifest["counts"]["background"]), len(evaluated.canaries)
    rows = data.train.batch(np.arange(len(data.train)))
    docs, pos = rows["document_ids"][consumed], rows["position_ids"][consumed]  # (steps x rows, T)
    starts = np.bincount(docs[(pos == 0) & (docs >= 0)], minlength=m + b + c)
    return {
        "tokens": int(rows["attention_mask"][consumed].sum()),
        "members": int(((docs >= 0) & (docs < m)).sum()),
        "canaries": int((docs >= m + b).sum()),
        "member_starts": starts[:m],
        "canary_starts": starts[m + b :],
        "member_labels": np.asarray(evaluated.members["repetitions"]),
        "canary_labels": np.asarray(evaluated.canaries["repetitions"]),
    }


def test_the_exposure_counts_are_what_the_training_loop_read(sweep):
    cfg, plans, read = sweep
    trained = [p for p in plans.values() if (p.dir / "exposure.json").is_file() and p.trains]
    assert len(trained) >= 6
    for plan in trained:
        found = json.loads((plan.dir / "exposure.json").read_text())
        mine = _recount(plan, np.concatenate(read[str(plan.train_cfg.out)]))
        s = found["stream"]
        assert (s["tokens"], s["members"], s["canaries"]) == (mine["tokens"], mine["members"], mine["canaries"])
        assert s["member_share"] == mine["members"] / mine["tokens"]  # a count over a count: one rounding, exact
        for kind, starts, labels in (
            ("members", mine["member_starts"], mine["member_labels"]),
            ("canaries", mine["canary_starts"], mine["canary_labels"]),
        ):
            expected = {
                str(r): [int(starts[labels == r].min()), int(starts[labels == r].max())] for r in np.unique(labels)
            }
            assert found["reads"][kind] == expected
            if plan.cell.control:  # trained on the background alone
                assert all(v == [0, 0] for v in expected.values())
            else:  # one epoch: a copy labelled x r is read exactly r times
                assert expected == {str(r): [int(r), int(r)] for r in np.unique(labels)}
        assert found["validation_documents"] == 6 and found["validation_loss"] > 0


def test_tuning_picks_the_lowest_validation_loss_per_size(sweep):
    cfg, plans, _ = sweep
    results = json.loads((cfg.out_dir / "results.json").read_text())
    assert results["tune"]["by"] == "validation_loss"
    for group in results["tune"]["groups"]:
        size = group["per"]["size"]
        losses = {}
        for p in plans.values():
            if p.cell.control and p.cell.values["size"] == size and (p.dir / "exposure.json").is_file():
                losses[p.cell.values["lr"]] = json.loads((p.dir / "exposure.json").read_text())["validation_loss"]
        assert group["losses"] == {str(k): v for k, v in losses.items()}
        assert str(group["chosen"]) == str(min(losses, key=losses.get))
    evaluated = load_prepared(next(iter(plans.values())).data_dir, verify=False)
    assert not set(evaluated.validation["id"]) & (set(evaluated.members["id"]) | set(evaluated.nonmembers["id"]))


def test_the_report_has_the_stream_strata_and_threshold_sections(sweep):
    cfg, _, _ = sweep
    report = (cfg.out_dir / "report.md").read_text()
    for heading in ("## Training stream", "## Per repetition stratum", "## Exposure threshold (E50) and canaries"):
        assert heading in report
    rows = json.loads((cfg.out_dir / "results.json").read_text())["scaling"]["rows"]
    arms = [r for r in rows if r["arm"] != "control"]
    assert arms and all(r["e50"]["status"] in ("interior", "above", "below") for r in arms)
    assert all(set(r["canaries"]["strata"]) == {"1", "2", "4"} for r in rows)
    assert (cfg.out_dir / "canary_exposure.png").is_file()


def test_the_loss_gap_split_by_the_mask_equals_a_recount_from_the_cells_files(sweep):
    """Per arm and size, the kept / dropped loss gap recomputed by hand from each cell's stored per-token log-probs:
    per member, (control - arm) mean NLL over the positions the Goldfish mask keeps / drops, less the mean of
    (control - arm) mean NLL over the nonmembers' every target."""
    from goldfish.config import load_config
    from goldfish.experiment.analyses.attacks import dropped_targets
    from goldfish.train_config import TrainConfig, goldfish_config

    cfg, plans, _ = sweep
    results = json.loads((cfg.out_dir / "results.json").read_text())
    chosen = {g["per"]["size"]: str(g["chosen"]) for g in results["tune"]["groups"]}
    cell = {
        (p.cell.arm, p.cell.values["size"]): p
        for p in plans.values()
        if str(p.cell.values["lr"]) == chosen[p.cell.values["size"]]
    }
    checked = 0
    for row in (r for r in results["scaling"]["rows"] if r["arm"] != "control"):
        gold = cell[("goldfish", row["size"])]
        prepared = load_prepared(gold.data_dir, verify=False)
        gcfg = goldfish_config(load_config(TrainConfig, gold.dir / "train_config.yaml", []), prepared)
        dropped = dropped_targets([list(x) for x in prepared.members["input_ids"]], gcfg)
        reps = np.asarray(prepared.members["repetitions"])
        arm, control = (
            json.loads((cell[(who, row["size"])].dir / "attacks.json").read_text()) for who in (row["arm"], "control")
        )

        def nll(found, split, positions=None):
            docs = [-np.asarray(x, float) for x in found["logprobs"][split]]
            return [
                x[p].mean() if p is not None else x.mean()
                for x, p in zip(docs, positions if positions is not None else [None] * len(docs))
            ]

        shift = np.mean(np.subtract(nll(control, "nonmembers"), nll(arm, "nonmembers")))
        for side, keep in (("kept", [~d for d in dropped]), ("dropped", dropped)):
            for r in np.unique(reps):
                gaps = [
                    c - a - shift
                    for c, a, k, rr in zip(nll(control, "members", keep), nll(arm, "members", keep), keep, reps)
                    if rr == r and k.any()
                ]
                found = row["strata"][str(r)][f"loss_gap_{side}"]
                # float64 means of <= 16 per-token NLLs below 50 nats, in another order, and their differences
                assert found["gap"] == pytest.approx(np.mean(gaps), abs=64 * 2.0**-52 * 50)
                assert found["n"] == len(gaps) and found["low"] <= found["gap"] <= found["high"]
                checked += 1
    assert checked == 2 * 2 * 2 * 3  # standard and goldfish, two sizes, kept and dropped, three strata
    assert "x4: kept / dropped" in (cfg.out_dir / "report.md").read_text()


def test_sizes_are_compared_on_the_same_targets_each_at_its_own_chosen_learning_rate(sweep):
    """compare: {axis: size, reference: s16} with lr tuned per size (one seed): every s32 arm cell is paired with the
    s16 cell of the same arm at s16's chosen lr (which may differ from s32's); the discordant counts equal a recount
    from the two cells' windows matched by sha256."""
    cfg, plans, _ = sweep
    results = json.loads((cfg.out_dir / "results.json").read_text())
    chosen = {g["per"]["size"]: str(g["chosen"]) for g in results["tune"]["groups"]}
    at = {
        (p.cell.arm, p.cell.values["size"]): p
        for p in plans.values()
        if not p.cell.control and str(p.cell.values["lr"]) == chosen[p.cell.values["size"]]
    }
    tests = {(t["arm"], t["repetitions"]): t for t in results["paired_axis"]}
    assert set(tests) == {(arm, r) for arm in ("standard", "goldfish") for r in (1, 2, 4, "all")}
    for arm in ("standard", "goldfish"):
        big, small = at[(arm, "s32")], at[(arm, "s16")]
        assert tests[(arm, "all")]["cells"] == [[big.cell.id, small.cell.id]]
        wa, wb = (json.loads((p.eval_dir / "results.json").read_text())["windows"] for p in (big, small))
        by_sha = {w["sha256"]: w for w in wb if w["split"] == "members"}
        pairs = [(w, by_sha[w["sha256"]]) for w in wa if w["split"] == "members"]
        assert tests[(arm, "all")]["n_windows"] == len(pairs) > 0
        assert tests[(arm, "all")]["exact_match"]["a_only"] == sum(
            x["exact_match"] and not y["exact_match"] for x, y in pairs
        )
        assert tests[(arm, "all")]["exact_match"]["b_only"] == sum(
            y["exact_match"] and not x["exact_match"] for x, y in pairs
        )
    assert "## Paired against size=s16" in (cfg.out_dir / "report.md").read_text()


def test_every_evaluated_cell_ranks_its_canaries_on_the_goldfish_positions(sweep):
    from goldfish.experiment.analyses.attacks import dropped_targets

    cfg, plans, _ = sweep
    evaluated = [p for p in plans.values() if p.results_file.is_file()]
    audited = [p for p in evaluated if (p.dir / "values.json").is_file()]
    assert audited and {p.cell.arm for p in audited} == {"standard", "goldfish", "control"}
    for plan in audited:
        found = json.loads((plan.dir / "values.json").read_text())
        prepared = load_prepared(plan.data_dir, verify=False)
        gold = next(p for p in plans.values() if p.cell.arm == "goldfish" and p.data_dir == plan.data_dir)
        dropped = np.concatenate(dropped_targets(prepared.canaries["input_ids"], gold.mask(prepared).base))
        assert found["mask"]["arm"] == "goldfish" and found["null_rank"] == 0.5
        # every canary target counted once, in the class the Goldfish cell's own mask puts it in
        assert (found["dropped"]["positions"], found["kept"]["positions"]) == (
            int(dropped.sum()),
            int((~dropped).sum()),
        )
        assert all(0 <= found[k]["mean_rank"] <= 1 for k in ("dropped", "kept"))
        assert set(found["by_label"]) == {str(r) for r in prepared.canaries["repetitions"]}
