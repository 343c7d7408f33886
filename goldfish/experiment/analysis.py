"""A cell's analysis, ``attacks.json``: per-token scores of its model on the member and nonmember documents (one pass
of :mod:`goldfish.eval.scoring`), and what the experiment derives from them beyond ``goldfish eval``'s membership
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
* the dropped-token leakage audit: the cell against the control of its grid point on the member positions the
  Goldfish mask drops (and keeps).

The control cell of a grid point runs first and stores its per-token log-probs and top-1 correctness, which the other
cells of the same data use as the reference. Everything is a function of the saved model and the prepared data, so
rerunning the phase gives the same file.

Fields (the schema of ``attacks.json``; targets t = 1..L-1 of each document, documents in the prepared folder's order):

* ``logprobs``: ``{"members" | "nonmembers": [[log p(t) ...] per document]}``;
* ``correct``: ``{"members": [[1 if the argmax at t is the token, else 0 ...] per document]}``;
* ``heldout_loss``, ``member_loss``: mean per-document NLL of the nonmembers / members;
* ``accuracy``: teacher-forced top-1 accuracy of the members, ``accuracy``, ``kept_accuracy``, ``dropped_accuracy``,
  ``n_kept``, ``n_dropped``; ``heldout_accuracy``: the nonmembers' ``accuracy``;
* ``attacks``: ``{attack: {auc, auc_ci_low, auc_ci_high, tpr_at_1pct_fpr, roc_fpr, roc_tpr, n_members,
  n_nonmembers}}`` for ``loss``, ``reference``, ``kept_loss``, ``kept_reference`` (those that apply; the ROC
  down-sampled as in ``goldfish eval``);
* ``by_exposure``: ``{r: {"loss" | "reference": auc}}``; ``by_exposure_ci``: ``{r: {attack: [ci_low, ci_high]}}``;
* ``leakage`` (cells with a control on their grid point and a Goldfish mask on their data, not the control itself):
  ``{"dropped" | "kept": {"accuracy" | "loss": {arm, control, diff, diff_ci_low, diff_ci_high, n_documents,
  n_positions}}}`` -- top-1 accuracy and loss (-log p) of this cell and of the control on the member positions the
  mask drops / keeps (token-weighted), ``diff`` = arm - control with a 95 % bootstrap CI that resamples documents.
  ``accuracy`` is absent when the control's file predates ``correct``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..io import atomic_write_json
from ..masks import GoldfishConfig, config_mask
from .plan import ATTACKS_FILE

AUC_FIELDS = ("auc", "auc_ci_low", "auc_ci_high", "tpr_at_1pct_fpr", "roc_fpr", "roc_tpr", "n_members",
              "n_nonmembers")


def dropped_targets(docs: Sequence[Sequence[int]], gcfg: GoldfishConfig) -> list[np.ndarray]:
    """Per document, (L-1,) bool: True where Goldfish drops target t = 1..L-1 (the document alone in a row, as in
    ``one_per_row`` training, where the row starts at the document's first token)."""
    return [config_mask(torch.as_tensor([list(d)]), gcfg)[0, 1:].numpy() for d in docs]


def _auc(members: np.ndarray, nonmembers: np.ndarray, n_bootstrap: int, seed: int) -> dict:
    from goldfish.eval.membership import evaluate_attack

    result = evaluate_attack(members, nonmembers, n_bootstrap=n_bootstrap, seed=seed)
    return {k: result[k] for k in AUC_FIELDS}


def exposure_aucs(scores: dict[str, dict[str, np.ndarray]], reps: np.ndarray, n_bootstrap: int,
                  seed: int) -> tuple[dict, dict]:
    """The LOSS and reference AUC per exposure count r (members with r copies vs all nonmembers):
    ``({r: {attack: auc}}, {r: {attack: [ci_low, ci_high]}})``, the CI bootstrapped like every other AUC."""
    found = {str(int(r)): {name: _auc(s["members"][reps == r], s["nonmembers"], n_bootstrap, seed)
                           for name, s in scores.items() if name in ("loss", "reference")}
             for r in np.unique(reps)}
    return ({r: {name: a["auc"] for name, a in by.items()} for r, by in found.items()},
            {r: {name: [a["auc_ci_low"], a["auc_ci_high"]] for name, a in by.items()} for r, by in found.items()})


def leakage_audit(logp: Sequence[np.ndarray], correct: Sequence[np.ndarray], ref_logp: Sequence[np.ndarray],
                  ref_correct: Sequence[Sequence[int]] | None, dropped: Sequence[np.ndarray], n_bootstrap: int,
                  seed: int) -> dict[str, dict[str, dict]]:
    """The dropped-token leakage audit on the member documents: ``{"dropped" | "kept": {"accuracy" | "loss":
    paired_difference(...)}}`` -- top-1 accuracy and loss (-log p) of the arm and of the control on the positions
    the Goldfish mask drops / keeps, and arm - control with a bootstrap CI over documents. A Goldfish model that
    predicts dropped tokens better than a model that never saw the text leaks them. ``ref_correct`` None (a
    control attacks.json written before it stored top-1 correctness) leaves the accuracy out."""
    from goldfish.eval.attacks import paired_difference

    out: dict[str, dict[str, dict]] = {}
    for name, positions in (("dropped", list(dropped)), ("kept", [~np.asarray(d, bool) for d in dropped])):
        out[name] = {"loss": paired_difference([-np.asarray(x) for x in logp], [-np.asarray(x) for x in ref_logp],
                                               positions, n_bootstrap, seed)}
        if ref_correct is not None:
            out[name]["accuracy"] = paired_difference(correct, ref_correct, positions, n_bootstrap, seed)
    return out


def analyse(model: Any, data_dir: Path, out: Path, gcfg: GoldfishConfig | None, reference: dict | None,
            n_bootstrap: int = 1000, seed: int = 0, control: bool = False, **scoring: Any) -> dict:
    """Compute and write ``out/attacks.json`` for one cell from its loaded ``model``; ``reference`` is the control
    cell's attacks.json; ``scoring``: options of :func:`goldfish.eval.scoring.token_statistics` (window, stride,
    token_budget, chunk).

    The control cell is its own reference (``control=True``): every calibrated score is 0, AUC exactly 0.5 -- the
    starting model carries no membership signal relative to itself.
    """
    from goldfish.eval import attacks
    from goldfish.eval.scoring import token_statistics

    from ..data import load_prepared

    prepared = load_prepared(data_dir)
    docs = {"members": [list(x) for x in prepared.members["input_ids"]],
            "nonmembers": [list(x) for x in prepared.nonmembers["input_ids"]]}
    reps = np.asarray(prepared.members["repetitions"])
    stats = {name: token_statistics(model, d, desc=f"attacks: {name}", progress=False, **scoring) if d else []
             for name, d in docs.items()}
    logp = {name: [st.logp for st in s] for name, s in stats.items()}
    correct = {name: [st.correct for st in s] for name, s in stats.items()}
    result: dict[str, Any] = {"logprobs": {k: [v.tolist() for v in vs] for k, vs in logp.items()},
                              "correct": {"members": [c.astype(np.int8).tolist() for c in correct["members"]]}}
    loss = {name: np.array([lp.mean() for lp in lps]) for name, lps in logp.items()}  # minus mean NLL per doc
    result["heldout_loss"] = float(-loss["nonmembers"].mean()) if len(loss["nonmembers"]) else None
    result["member_loss"] = float(-loss["members"].mean()) if len(loss["members"]) else None
    dropped = {k: dropped_targets(d, gcfg) if gcfg else [np.zeros(len(c), bool) for c in correct[k]]
               for k, d in docs.items()}
    result["accuracy"] = attacks.teacher_forced_accuracy(correct["members"], dropped["members"])
    result["heldout_accuracy"] = attacks.teacher_forced_accuracy(correct["nonmembers"],
                                                                 dropped["nonmembers"])["accuracy"]
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
        result["leakage"] = leakage_audit(logp["members"], correct["members"], ref["members"],
                                          (reference.get("correct") or {}).get("members"), dropped["members"],
                                          n_bootstrap, seed)
    if docs["members"] and docs["nonmembers"]:
        result["attacks"] = {name: _auc(s["members"], s["nonmembers"], n_bootstrap, seed)
                             for name, s in scores.items()}
        result["by_exposure"], result["by_exposure_ci"] = exposure_aucs(scores, reps, n_bootstrap, seed)
    atomic_write_json(out / ATTACKS_FILE, result)
    return result


def blind_auc(data_dir: Path, n_bootstrap: int = 1000, seed: int = 0) -> dict:
    """The model-free baseline on a prepared folder's member vs nonmember texts (zlib ratio): AUC and 95 % CI."""
    from goldfish.eval import attacks

    from ..data import load_prepared

    prepared = load_prepared(data_dir)
    members, nonmembers = list(prepared.members["text"]), list(prepared.nonmembers["text"])
    return _auc(attacks.blind_scores(members), attacks.blind_scores(nonmembers), n_bootstrap, seed)
