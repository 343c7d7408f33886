"""A cell's attacks analysis, the whole of it (:data:`ATTACKS`: its phase, its part of the cell summary): its
``attacks.json``, per-token scores of its model on the member and nonmember documents (one pass of
:mod:`goldfish.eval.scoring`), and what the experiment derives from them beyond ``goldfish eval``'s membership
section. (The attacks themselves, functions of per-token values with no model inside, are
:mod:`goldfish.eval.attacks`.)

* teacher-forced top-1 accuracy on the positions the Goldfish mask keeps vs drops (the experiment's Goldfish mask is
  applied to every arm, so a standard model and the control are measured on the same positions);
* the hash-aware attack (score only the kept targets; the hash is public), plain and reference-calibrated;
* the reference attack calibrated by the control cell's model (the starting model of a fine-tune);
* the LOSS and reference AUC per exposure count (members with r repetitions vs all nonmembers), each with its
  bootstrap CI;
* the LOSS attack and the held-out (nonmember) loss, the same quantities as ``goldfish eval``'s membership section,
  so an experiment may leave that task out (``eval.tasks: [extraction]``) and score each document once;
* the dropped-token leakage audit as a difference in differences: (cell - control of its grid point) on the member
  positions the Goldfish mask drops (and keeps) minus (cell - control) on the held-out documents.

The control cell of a grid point runs first and stores its per-token log-probs and top-1 correctness, which the other
cells of the same data use as the reference. Everything is a function of the saved model and the prepared data, so
rerunning the phase gives the same file.

Fields (the schema of ``attacks.json``; targets t = 1..L-1 of each document, documents in the prepared folder's order):

* ``logprobs``: ``{"members" | "nonmembers": [[log p(t) ...] per document]}``;
* ``correct``: ``{"members" | "nonmembers": [[1 if the argmax at t is the token, else 0 ...] per document]}``;
* ``doc_ids``: ``{"members" | "nonmembers": [document id ...]}`` (the prepared folder's ``id``), which pairs two
  cells' documents by identity;
* ``heldout_loss``, ``member_loss``: mean per-document NLL of the nonmembers / members;
* ``member_nll_by_split`` (cells with a Goldfish mask on their data): ``{"kept" | "dropped": [mean NLL of each
  member document over the positions the mask keeps / drops, null where it has none]}`` -- what the size sweep's
  loss gap splits by (:mod:`goldfish.experiment.scaling`);
* ``accuracy``: teacher-forced top-1 accuracy of the members, ``accuracy``, ``kept_accuracy``, ``dropped_accuracy``,
  ``n_kept``, ``n_dropped``; ``heldout_accuracy``: the nonmembers' ``accuracy``;
* ``attacks``: ``{attack: {auc, auc_ci_low, auc_ci_high, tpr_at_1pct_fpr, roc_fpr, roc_tpr, n_members,
  n_nonmembers}}`` for ``loss``, ``reference``, ``kept_loss``, ``kept_reference`` (those that apply; the ROC
  down-sampled as in ``goldfish eval``);
* ``scores``: ``{attack: {"members" | "nonmembers": [score per document]}}`` for the attacks above (higher =
  member; null where a document has no position to score);
* ``by_exposure``: ``{r: {"loss" | "reference": auc}}``; ``by_exposure_ci``: ``{r: {attack: [ci_low, ci_high]}}``;
* ``leakage`` (cells with a control on their grid point and a Goldfish mask on their data, not the control itself):
  ``did``: ``{"dropped" | "kept": {"accuracy" | "loss": {member_diff, heldout_diff, did, ci_low, ci_high, p_value,
  n_member_documents, n_member_positions, n_heldout_documents, n_heldout_positions}}}`` -- the headline: top-1
  accuracy and loss (-log p) of this cell minus the control's on the member positions the mask drops / keeps
  (``member_diff``, token-weighted) minus the same difference on every held-out target (``heldout_diff``), with a
  95 % bootstrap CI and two-sided p-value resampling member and held-out documents
  (:func:`goldfish.eval.stats.difference_in_differences`); and, beside it, the members-only difference
  ``{"dropped" | "kept": {"accuracy" | "loss": {arm, control, diff, diff_ci_low, diff_ci_high, n_documents,
  n_positions}}}`` (confounded: training moves the model on unseen text too). ``accuracy`` is absent where the
  control's file predates ``correct`` of that split. The audit's validity (:func:`leakage_audit`):
  ``placebo``: ``{"accuracy" | "loss": difference_in_differences}`` -- the same audit with the mask applied to
  nonmembers (half of them, on the positions it would drop, against the other half): no document there was
  trained on, so it must be ~0; where it is not, the held-out text is no valid reference for these positions and the
  reading is inconclusive; ``mde``: ``{"accuracy" | "loss": the minimum detectable DiD at this design's size}``
  (2.80 standard errors: a two-sided 5 % test with 80 % power); ``supervised_fraction``: the share of the audited
  positions the cell's own loss trained on (0 for the Goldfish arm on its own mask and for its no-leak twin, ~p for a
  positive control with ``supervised_fraction: p``, 1 for a standard arm: the known leak of a positive control);
  ``reading``: ``{"accuracy" | "loss": "leak" | "none detected" | "negative" | "inconclusive"}``;
* ``leakage_by_mask`` (same cells): ``{arm: leakage as above}`` for the mask of every other Goldfish arm of the grid
  point (another seed, another k): positive controls with a known supervised fraction, e.g. a Goldfish arm with
  another mask seed audited on this mask's positions trains on ~(1 - 1/k) of them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from goldfish.eval import attacks
from goldfish.eval.membership import evaluate_attack, target_pass
from goldfish.eval.stats import (
    difference_in_differences,
    minimum_detectable_effect,
    paired_difference,
    se_from_interval,
)

from ...data import load_prepared
from ...io import atomic_write_json, read_json, read_jsonl
from ...masks import GoldfishConfig, config_mask
from ..plan import CellFolder, CellPlan
from .base import Analysis, Others, listed, summary_key

AUC_FIELDS = (
    "auc",
    "auc_ci_low",
    "auc_ci_high",
    "tpr_at_1pct_fpr",
    "tpr_at_1pct_fpr_note",
    "tpr_at_0.1pct_fpr",
    "tpr_at_0.1pct_fpr_note",
    "roc_fpr",
    "roc_tpr",
    "n_members",
    "n_nonmembers",
)


def dropped_targets(docs: Sequence[Sequence[int]], gcfg: GoldfishConfig) -> list[np.ndarray]:
    """Per document, (L-1,) bool: True where Goldfish drops target t = 1..L-1 (the document alone in a row, as in
    ``one_per_row`` training, where the row starts at the document's first token)."""
    return [config_mask(torch.as_tensor([list(d)]), gcfg)[0, 1:].numpy() for d in docs]


def member_nll_by_split(logp: Sequence[np.ndarray], dropped: Sequence[np.ndarray]) -> dict[str, list]:
    """``{"kept" | "dropped": [mean -log p over each document's kept / dropped targets, or None where it has
    none]}``."""

    def mean_nll(lp: np.ndarray, where: np.ndarray) -> float | None:
        return float(-np.asarray(lp)[where].mean()) if where.any() else None

    return {
        "kept": [mean_nll(lp, ~np.asarray(d, bool)) for lp, d in zip(logp, dropped)],
        "dropped": [mean_nll(lp, np.asarray(d, bool)) for lp, d in zip(logp, dropped)],
    }


def _auc(members: np.ndarray, nonmembers: np.ndarray, n_bootstrap: int, seed: int) -> dict:
    result = evaluate_attack(members, nonmembers, n_bootstrap=n_bootstrap, seed=seed)
    return {k: result[k] for k in AUC_FIELDS}


def exposure_aucs(
    scores: dict[str, dict[str, np.ndarray]], reps: np.ndarray, n_bootstrap: int, seed: int
) -> tuple[dict, dict]:
    """The LOSS and reference AUC per exposure count r (members with r copies vs all nonmembers):
    ``({r: {attack: auc}}, {r: {attack: [ci_low, ci_high]}})``, the CI bootstrapped like every other AUC."""
    found = {
        str(int(r)): {
            name: _auc(s["members"][reps == r], s["nonmembers"], n_bootstrap, seed)
            for name, s in scores.items()
            if name in ("loss", "reference")
        }
        for r in np.unique(reps)
    }
    return (
        {r: {name: a["auc"] for name, a in by.items()} for r, by in found.items()},
        {r: {name: [a["auc_ci_low"], a["auc_ci_high"]] for name, a in by.items()} for r, by in found.items()},
    )


def _reading(measure: str, did: dict, placebo: dict | None) -> str:
    """What an audit shows for one measure: ``inconclusive`` where the placebo's interval excludes 0 (the reference is
    not valid for these positions), else ``leak`` / ``negative`` where the DiD's interval excludes 0 (accuracy above
    0 or loss below 0 = the dropped tokens better predicted than the shift explains), else ``none detected``."""
    if placebo and placebo.get("ci_low") is not None and (placebo["ci_low"] > 0 or placebo["ci_high"] < 0):
        return "inconclusive"
    if did.get("ci_low") is None or did["ci_low"] <= 0 <= did["ci_high"]:
        return "none detected"
    better = did["ci_low"] > 0 if measure == "accuracy" else did["ci_high"] < 0
    return "leak" if better else "negative"


def leakage_audit(
    arm: dict[str, dict[str, list]],
    control: dict[str, dict[str, list]],
    dropped: Sequence[np.ndarray],
    n_bootstrap: int,
    seed: int,
    nonmember_dropped: Sequence[np.ndarray] | None = None,
    supervised: Sequence[np.ndarray] | None = None,
) -> dict[str, Any]:
    """The dropped-token leakage audit. ``arm`` / ``control``: ``{"logp" | "correct": {"members" | "nonmembers":
    [(L-1,) per document]}}`` of the cell and of its grid point's control (``control["correct"]`` may lack a split
    its file predates); ``dropped``: the members' (L-1,) drop masks of the audited mask.

    ``did``: ``{"dropped" | "kept": {"accuracy" | "loss": difference_in_differences(...)}}`` -- (arm - control) on
    those member positions minus (arm - control) on every held-out target, with a bootstrap CI resampling member
    and held-out documents: fine-tuning moves a model on text it never saw too, so only the excess over the
    held-out shift is leakage. ``dropped`` / ``kept``: ``{"accuracy" | "loss": paired_difference(...)}``, the
    members-only arm - control (confounded by that shift; kept beside it, labelled). An accuracy is left out where
    the control's file lacks the split's top-1 correctness.

    Its validity: ``placebo`` (given ``nonmember_dropped``, the audited mask on the nonmembers): the same DiD with
    the even-indexed nonmembers' dropped positions as the "members" and the odd-indexed ones as held-out text -- no
    trained document on either side, so ~0 unless the mask's positions move differently from text in general;
    ``mde``: 2.80 x the DiD's standard error (from its interval); ``supervised_fraction`` (given ``supervised``,
    the members' (L-1,) positions the cell's own loss trained on): the share of the audited positions trained on;
    ``reading`` per measure (:func:`_reading`)."""
    measures = {
        "loss": (
            {k: [-np.asarray(x) for x in v] for k, v in arm["logp"].items()},
            {k: [-np.asarray(x) for x in v] for k, v in control["logp"].items()},
        )
    }
    if control["correct"].get("members") is not None:
        measures["accuracy"] = (arm["correct"], control["correct"])
    out: dict[str, Any] = {"did": {}}
    for name, positions in (("dropped", list(dropped)), ("kept", [~np.asarray(d, bool) for d in dropped])):
        out[name], out["did"][name] = {}, {}
        for measure, (a, c) in measures.items():
            out[name][measure] = paired_difference(a["members"], c["members"], positions, n_bootstrap, seed)
            if c.get("nonmembers") is not None and len(a["nonmembers"]):
                out["did"][name][measure] = difference_in_differences(
                    a["members"], c["members"], positions, a["nonmembers"], c["nonmembers"], None, n_bootstrap, seed
                )
    out["placebo"], out["mde"], out["reading"] = {}, {}, {}
    for measure, (a, c) in measures.items():
        did = out["did"]["dropped"].get(measure)
        if did is None:
            continue
        if nonmember_dropped is not None and c.get("nonmembers") is not None and len(a["nonmembers"]) >= 2:
            half = slice(0, None, 2), slice(1, None, 2)  # even-indexed nonmembers stand in for members
            out["placebo"][measure] = difference_in_differences(
                a["nonmembers"][half[0]],
                c["nonmembers"][half[0]],
                list(nonmember_dropped)[half[0]],
                a["nonmembers"][half[1]],
                c["nonmembers"][half[1]],
                None,
                n_bootstrap,
                seed,
            )
        out["mde"][measure] = minimum_detectable_effect(se_from_interval(did.get("ci_low"), did.get("ci_high")))
        out["reading"][measure] = _reading(measure, did, out["placebo"].get(measure))
    if supervised is not None:
        audited = sum(int(np.asarray(d, bool).sum()) for d in dropped)
        trained = sum(int((np.asarray(d, bool) & np.asarray(s, bool)).sum()) for d, s in zip(dropped, supervised))
        out["supervised_fraction"] = trained / audited if audited else None
    return out


def documents(prepared: Any) -> dict[str, list[list[int]]]:
    """The members' and nonmembers' token ids, in the prepared folder's order (the order eval scores them)."""
    return {
        "members": [list(x) for x in prepared.members["input_ids"]],
        "nonmembers": [list(x) for x in prepared.nonmembers["input_ids"]],
    }


def analyse(
    tokens: dict[str, list[dict]],
    prepared: Any,
    out: Path,
    gcfg: GoldfishConfig | None,
    reference: dict | None,
    n_bootstrap: int = 1000,
    seed: int = 0,
    control: bool = False,
    own: GoldfishConfig | None = None,
    audits: dict[str, GoldfishConfig] | None = None,
) -> dict:
    """Compute and write the attacks file ``out`` for one cell from its per-token scores ``tokens`` (``{"members" |
    "nonmembers": [{"logp", "correct"} per document]}`` in :func:`documents`' order: the rows of
    :func:`goldfish.eval.membership.target_pass` with ``keep_tokens``); ``reference`` is the control cell's
    attacks.json. ``gcfg``: the mask whose kept / dropped positions are measured (the cell's own ``base`` mask or,
    for a standard cell, the experiment's); ``own``: the mask the cell trained with, its audit controls included
    (None: the standard loss, every target trained); ``audits``: the other Goldfish arms' masks, audited too
    (``leakage_by_mask``: positive controls).

    The control cell is its own reference (``control=True``): every calibrated score is 0, AUC exactly 0.5 -- the
    starting model carries no membership signal relative to itself.
    """
    docs = documents(prepared)
    reps = np.asarray(prepared.members["repetitions"])
    logp = {name: [np.asarray(r["logp"], dtype=np.float64) for r in rows] for name, rows in tokens.items()}
    correct = {name: [np.asarray(r["correct"], dtype=bool) for r in rows] for name, rows in tokens.items()}
    result: dict[str, Any] = {
        "logprobs": {k: [v.tolist() for v in vs] for k, vs in logp.items()},
        "correct": {k: [c.astype(np.int8).tolist() for c in cs] for k, cs in correct.items()},
        "doc_ids": {"members": list(prepared.members["id"]), "nonmembers": list(prepared.nonmembers["id"])},
    }
    loss = {name: np.array([lp.mean() for lp in lps]) for name, lps in logp.items()}  # minus mean NLL per doc
    result["heldout_loss"] = float(-loss["nonmembers"].mean()) if len(loss["nonmembers"]) else None
    result["member_loss"] = float(-loss["members"].mean()) if len(loss["members"]) else None
    dropped = {
        k: dropped_targets(d, gcfg) if gcfg else [np.zeros(len(c), bool) for c in correct[k]] for k, d in docs.items()
    }
    result["accuracy"] = attacks.teacher_forced_accuracy(correct["members"], dropped["members"])
    if gcfg is not None:
        result["member_nll_by_split"] = member_nll_by_split(logp["members"], dropped["members"])
    result["heldout_accuracy"] = attacks.teacher_forced_accuracy(correct["nonmembers"], dropped["nonmembers"])[
        "accuracy"
    ]
    scores: dict[str, dict[str, np.ndarray]] = {"loss": loss}
    ref = logp if control else None
    if reference is not None:
        ref = {k: [np.asarray(v) for v in reference["logprobs"][k]] for k in docs}
    if ref is not None:
        scores["reference"] = {k: attacks.calibrated(logp[k], ref[k]) for k in docs}
    if gcfg is not None:
        kept = {k: [~m for m in dropped[k]] for k in docs}
        scores["kept_loss"] = {k: attacks.kept_scores(logp[k], kept[k]) for k in docs}
        if ref is not None:
            scores["kept_reference"] = {k: attacks.calibrated(logp[k], ref[k], kept[k]) for k in docs}
    if reference is not None and gcfg is not None and ref is not None:
        ref_correct = reference.get("correct") or {}
        mine = {"logp": logp, "correct": correct}
        theirs = {"logp": ref, "correct": {k: ref_correct.get(k) for k in docs}}
        trained = (
            [~m for m in dropped_targets(docs["members"], own)]
            if own is not None
            else [np.ones(len(c), bool) for c in correct["members"]]
        )  # what the cell's own loss supervised
        result["leakage"] = leakage_audit(
            mine, theirs, dropped["members"], n_bootstrap, seed, dropped["nonmembers"], trained
        )
        result["leakage_by_mask"] = {
            arm: leakage_audit(
                mine,
                theirs,
                dropped_targets(docs["members"], mask),
                n_bootstrap,
                seed,
                dropped_targets(docs["nonmembers"], mask),
                trained,
            )
            for arm, mask in (audits or {}).items()
        }
    if docs["members"] and docs["nonmembers"]:
        result["attacks"] = {name: _auc(s["members"], s["nonmembers"], n_bootstrap, seed) for name, s in scores.items()}
        result["scores"] = {name: {k: [float(x) for x in v] for k, v in s.items()} for name, s in scores.items()}
        result["by_exposure"], result["by_exposure_ci"] = exposure_aucs(scores, reps, n_bootstrap, seed)
    atomic_write_json(out, result)
    return result


def blind_auc(data_dir: Path, n_bootstrap: int = 1000, seed: int = 0) -> dict:
    """The model-free baseline on a prepared folder's member vs nonmember texts (zlib ratio): AUC and 95 % CI."""
    prepared = load_prepared(data_dir)
    members, nonmembers = list(prepared.members["text"]), list(prepared.nonmembers["text"])
    return _auc(attacks.blind_scores(members), attacks.blind_scores(nonmembers), n_bootstrap, seed)


def _is_goldfish(p: CellPlan) -> bool:
    return getattr(getattr(p.train_cfg, "loss", None), "type", None) == "goldfish"


def goldfish_plan(plan: CellPlan, plans: Sequence[CellPlan]) -> CellPlan | None:
    """The cell whose Goldfish mask defines kept/dropped positions: the cell itself if Goldfish, else the first
    Goldfish cell on the same data (so standard and control are measured on the same positions)."""
    if _is_goldfish(plan):
        return plan
    return next((p for p in plans if _is_goldfish(p) and p.data_dir == plan.data_dir), None)


def _other_masks(
    measured: GoldfishConfig | None, plan: CellPlan, plans: Sequence[CellPlan], prepared: Any
) -> dict[str, GoldfishConfig]:
    """The distinct Goldfish masks of the other arms on the cell's data (by arm, first cell of each mask; their
    positions: each arm's ``base`` mask, so an audit control is no other mask), without the one the cell is measured
    on: what the leakage audit also reads as positive controls."""
    found: dict[str, GoldfishConfig] = {}
    seen = [measured] if measured is not None else []
    for p in plans:
        if _is_goldfish(p) and p.data_dir == plan.data_dir and p.cell.arm not in found:
            mask = p.mask(prepared).base
            if all(mask != m for m in seen):
                found[p.cell.arm] = mask
                seen.append(mask)
    return found


def _reference(control: CellPlan | None) -> dict | None:
    """The control cell's attacks.json (its per-token log-probs calibrate the attacks)."""
    return read_json(control.attacks_file) if control is not None and control.attacks_file.is_file() else None


def token_scores(plan: CellPlan, prepared: Any, model: Any) -> dict[str, list[dict]]:
    """The per-token scores of the cell's members and nonmembers: the rows of eval's membership pass
    (``goldfish.eval.membership.target_pass``, the same settings as eval's membership section), read from the
    evaluation's ``membership.partial.jsonl`` where it kept them (``membership.keep_tokens``, which the experiment
    sets), else scored now from the cell's shared ``model`` handle (``goldfish.eval.loading.SharedModel``): one
    membership pipeline, each document scored once."""
    m = plan.eval_cfg.membership
    scored = plan.membership_scores
    cache = {r["key"]: r["value"] for r in read_jsonl(scored) if "key" in r} if scored.is_file() else {}
    loaded = model.get()
    head = m.lowercase_tokens if "membership" in plan.eval_cfg.tasks else None  # as eval's pass keys its rows
    return {
        name: target_pass(
            loaded,
            docs,
            min_k_ratios=m.min_k_ratios,
            head=head,
            window=m.window,
            stride=m.stride,
            token_budget=m.token_budget,
            chunk=m.chunk,
            cache=cache,
            keep_tokens=True,
            progress=False,
        )
        if docs
        else []
        for name, docs in documents(prepared).items()
    }


def analyse_cell(plan: CellPlan, plans: Sequence[CellPlan], model: Any, control: CellPlan | None) -> dict:
    """Write the cell's ``attacks.json`` (:func:`analyse`) from its per-token scores (:func:`token_scores`) and its
    Goldfish mask (or the first Goldfish cell's on the same data): the positions of its ``base`` mask, so a no-leak
    twin and a positive control are audited on their Goldfish arm's positions, with what the cell's own loss trained
    on (``own``: the effective mask) giving the ``supervised_fraction``; ``control``'s scores (None: none) calibrate
    the reference attacks."""
    prepared = load_prepared(plan.data_dir)
    source = goldfish_plan(plan, plans)
    trained = source.mask(prepared) if source is not None else None  # the mask training applied
    gcfg = trained.base if trained is not None else None  # its positions, without an audit control
    own = trained if source is plan else None
    return analyse(
        token_scores(plan, prepared, model),
        prepared,
        plan.attacks_file,
        gcfg,
        _reference(control),
        n_bootstrap=plan.eval_cfg.membership.n_bootstrap,
        seed=plan.eval_cfg.seed,
        control=plan.cell.control,
        own=own,
        audits=_other_masks(gcfg, plan, plans, prepared),
    )


CALIBRATED = ("reference", "kept_loss", "kept_reference")  # attacks.json's attacks beside LOSS


@dataclasses.dataclass
class AttacksSummary:
    """The attacks analysis's part of the cell summary (SCHEMA.md, ``cells``), from ``attacks.json`` (None: a cell
    without one): the kept / dropped teacher-forced accuracy, the calibrated and hash-aware AUCs with their CIs, the
    AUC per exposure count and the leakage audit."""

    # summary_key(place): its position among summary.json's keys of a cell, between the core's
    tf_accuracy: float | None = summary_key(33)
    tf_kept_accuracy: float | None = summary_key(34)
    tf_dropped_accuracy: float | None = summary_key(35)
    heldout_accuracy: float | None = summary_key(36)
    mia_by_exposure: dict | None = summary_key(31)
    mia_by_exposure_ci: dict | None = summary_key(32)
    leakage: dict | None = summary_key(61)
    leakage_by_mask: dict | None = None
    mia_auc_reference: float | None = summary_key(25)
    mia_auc_reference_ci: list | None = summary_key(26)
    mia_auc_kept_loss: float | None = summary_key(27)
    mia_auc_kept_loss_ci: list | None = summary_key(28)
    mia_auc_kept_reference: float | None = summary_key(29)
    mia_auc_kept_reference_ci: list | None = summary_key(30)


def attack_numbers(attacks: dict | None) -> dict[str, Any]:
    """What a cell's attacks.json adds: kept/dropped teacher-forced accuracy, the calibrated and hash-aware AUCs with
    their CIs, the AUC per exposure count and the leakage audit."""
    if not attacks:
        return {}
    acc = attacks.get("accuracy") or {}
    out: dict[str, Any] = {
        "tf_accuracy": acc.get("accuracy"),
        "tf_kept_accuracy": acc.get("kept_accuracy"),
        "tf_dropped_accuracy": acc.get("dropped_accuracy"),
        "heldout_accuracy": attacks.get("heldout_accuracy"),
        "mia_by_exposure": attacks.get("by_exposure") or {},
        "mia_by_exposure_ci": attacks.get("by_exposure_ci") or {},
        "leakage": attacks.get("leakage"),
        "leakage_by_mask": attacks.get("leakage_by_mask") or None,
    }
    for name in CALIBRATED:
        a = (attacks.get("attacks") or {}).get(name) or {}
        out[f"mia_auc_{name}"] = a.get("auc")
        out[f"mia_auc_{name}_ci"] = [a.get("auc_ci_low"), a.get("auc_ci_high")] if a else None
    return out


def attacks_file(folder: CellFolder) -> Path:
    """The cell's ``attacks.json`` (``CellFolder.attacks_file``)."""
    return folder.attacks_file


def collect(plan: CellPlan) -> AttacksSummary:
    """The cell's :class:`AttacksSummary`, read from its ``attacks.json``."""
    found = read_json(plan.attacks_file) if plan.attacks_file.is_file() else None
    return AttacksSummary(**attack_numbers(found))


def run(plan: CellPlan, model: Any, others: Others) -> dict:
    """The phase: :func:`analyse_cell`, calibrated by the control of the cell's grid point."""
    return analyse_cell(plan, others.plans, model, others.control)


ATTACKS = Analysis(
    name="attacks",
    output=attacks_file,
    applies=lambda plan: True,
    run=run,
    part=AttacksSummary,
    collect=collect,
    summary_keys=listed(AttacksSummary),
    reads_control=True,
)
