"""Mask-consistent extraction: an attacker who knows a Goldfish model's mask settings (the hash is public).

Under the ``hash`` strategy the drop decision of position t hashes a window that *includes the token at t*. So at a
position the attacker believes dropped, only the tokens whose window (the generated context + the candidate) hashes
to "drop" can be the true one -- about 1/k of the vocabulary -- and at a position known to be kept, only the others.
Greedy decoding restricted this way (``decoding.adversary=mask_consistent``) is reported beside greedy, beam and
sampled extraction, in two variants:

* ``mc_oracle`` -- told which suffix positions the mask drops (the true document's mask): every position is
  restricted to the candidates consistent with its told decision (dropped -> the drop candidates, kept -> the
  others). An upper bound on what the hint is worth.
* ``mc_switch`` -- told nothing: a position is believed dropped when the model's top-1 probability is below
  ``decoding.switch_threshold`` (default 0.9; a Goldfish model is confident where it was trained), and only there
  the candidates are restricted to the drop candidates.

Both decode with the batched, KV-cached loop of :mod:`goldfish.eval.generate` (the picker sees each row's context:
the left-padded prefix and the tokens picked so far), so they cost about one greedy decode each, plus the
candidate decisions (:func:`goldfish.masks.next_token_drops`, O(batch x vocabulary) per step for ``hash``). The
toolkit's one teacher-forced scoring pass (:mod:`goldfish.eval.scoring`, through its ``extra`` hook) adds the same
restriction given the true context (``tf_*``: top-1 accuracy on the dropped
positions, the issue's measure). Against ``hash-preceding`` (the target outside its window) or ``static`` the
decision is the same for every candidate, so the restriction carries no information: the oracle then picks what
greedy picks wherever the model's argmax is not a special token.

The attacker's context is the window's prefix and what it generated, masked as a document that starts at the
prefix: exact for the true suffix whenever the prefix starts at the document's first token or holds at least h-1
tokens (all of the toolkit's default windows). The mask settings come from the training run folder
(``<run>/mask.json``, the mask training recorded), or from the eval config's ``goldfish`` section, which overrides it;
the tokenizer's eos/bos/pad ids are added to the special ids, as the trainer adds the data's.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from goldfish.config import read_yaml, to_dict
from goldfish.errors import ConfigError, UserError
from goldfish.fold import token_fold
from goldfish.io import read_json
from goldfish.masks import GoldfishConfig, config_mask, next_token_drops
from goldfish.run_folder import TrainRun

from .generate import decode_batch, left_pad, model_device, run_batched
from .scoring import token_statistics, window_budget
from .stats import cluster_bootstrap_mean, mcnemar_exact

log = logging.getLogger(__name__)

ADVERSARIES = ("mask_consistent",)
VARIANTS = ("mc_oracle", "mc_switch")
DEFAULT_SWITCH_THRESHOLD = 0.9
PAD = -1  # left padding in the picker's context: a negative id, a boundary for every mask strategy


# ------------------------------------------------------------------------------------------------ mask settings


def run_folder_mask(model_path: str | None) -> dict | None:
    """``loss`` settings of the training run folder of ``model_path`` (the run folder itself or its ``model/``, as
    an experiment cell names it): ``{"type": ..., "goldfish": {...}}`` from the mask training recorded
    (``<run>/mask.json``, special ids included), else from ``<run>/config.yaml`` (a run from before mask.json), or
    None when the model does not come from a run folder."""
    if not model_path:
        return None
    path = Path(model_path).expanduser()
    for run in (TrainRun(path), TrainRun(path.parent)):
        if run.config.is_file() and run.model.is_dir() and path in (run.path, run.model):
            if run.mask.is_file():
                record = read_json(run.mask, expect=dict, fix="train the run again")
                return {"type": record.get("loss", "standard"), "goldfish": dict(record.get("goldfish") or {})}
            loss = read_yaml(run.config).get("loss") or {}
            return {"type": loss.get("type", "standard"), "goldfish": dict(loss.get("goldfish") or {})}
    return None


def resolve_mask(mask_section: Any, model_path: str | None, tokenizer) -> GoldfishConfig:
    """The Goldfish mask the attacker assumes: the run folder's settings, overridden by the eval config's ``goldfish``
    keys that are set; the tokenizer's eos/bos/pad ids join the special ids. One UserError when neither says."""
    explicit = {k: v for k, v in to_dict(mask_section).items() if v is not None}
    found = run_folder_mask(model_path)
    trained = found["goldfish"] if found and found["type"] == "goldfish" else None
    if trained is None and not {"k", "h"} <= set(explicit):
        why = "was trained with the standard loss" if found else "is not a training run folder"
        raise UserError(
            f"decoding.adversary=mask_consistent needs the Goldfish mask of the model, which {why}; "
            f"set goldfish.k and goldfish.h (and goldfish.strategy, goldfish.seed, goldfish.special_ids "
            f"if not the defaults), e.g. goldfish.k=4 goldfish.h=13"
        )
    settings = {**(trained or {}), **explicit}
    specials = {int(i) for i in settings.get("special_ids") or []}
    specials |= {
        int(v)
        for v in (getattr(tokenizer, a, None) for a in ("eos_token_id", "bos_token_id", "pad_token_id"))
        if isinstance(v, int)
    }
    settings["special_ids"] = sorted(specials)
    try:
        gcfg = GoldfishConfig(**settings)
    except (ConfigError, TypeError) as e:
        raise UserError(f"mask settings {settings}: {e}") from None
    if gcfg.strategy == "canonical":
        if tokenizer is None:
            raise UserError("goldfish.strategy=canonical needs the model's tokenizer (its fold table); none was found")
        gcfg = dataclasses.replace(gcfg, fold=token_fold(tokenizer))
    return gcfg


def told_drops(windows: Sequence[Any], gcfg: GoldfishConfig) -> list[np.ndarray]:
    """Per window, (S,) bool: the mask's true decisions on the suffix positions, from the whole document masked
    alone in a row (as in ``one_per_row`` training)."""
    out = []
    for w in windows:
        mask = config_mask(torch.as_tensor([list(w.doc.tokens)]), gcfg)[0].numpy()
        begin = w.start + len(w.prefix)
        out.append(mask[begin : begin + len(w.suffix)])
    return out


# ------------------------------------------------------------------------------------------------ restriction


def restrict(logits: torch.Tensor, drops: torch.Tensor, believed: torch.Tensor, oracle: bool) -> torch.Tensor:
    """(B,) picks: the argmax of ``logits`` (B, V) over the candidates consistent with the beliefs.

    ``drops`` (B, V): the candidates that would make the position dropped; ``believed`` (B,) bool: the position is
    believed dropped. ``oracle``: a position not believed dropped is known kept (restricted to the others);
    otherwise it is unrestricted. A row left with no candidate (every one special) takes the plain argmax.
    """
    allowed = torch.where(believed[:, None], drops, ~drops if oracle else torch.ones_like(drops))
    picks = logits.masked_fill(~allowed, float("-inf")).argmax(-1)
    return torch.where(allowed.any(-1), picks, logits.argmax(-1))


def switch_beliefs(logits: torch.Tensor, threshold: float) -> torch.Tensor:
    """(B,) bool: believed dropped where the top-1 probability of ``logits`` (B, V) is below ``threshold``."""
    return torch.softmax(logits.float(), dim=-1).max(-1).values < threshold


class MaskConsistentPicker:
    """A :data:`goldfish.eval.generate.Picker` for one batch: it keeps every row's context (prefix, left-padded with
    :data:`PAD`, then its own picks) to compute the candidates' drop decisions at each step."""

    def __init__(
        self,
        prefixes: Sequence[Sequence[int]],
        max_new_tokens: int,
        gcfg: GoldfishConfig,
        told: Sequence[np.ndarray] | None,
        threshold: float,
        device: torch.device,
    ):
        ids, mask, _ = left_pad(prefixes, 0, device)
        self.width = ids.shape[1]
        self.context = torch.cat(
            [ids.masked_fill(mask == 0, PAD), torch.full((len(prefixes), max_new_tokens), PAD, device=device)], dim=1
        )
        self.told = None if told is None else torch.as_tensor(np.stack(told), device=device)  # (B, S)
        self.gcfg, self.threshold, self.step = gcfg, threshold, 0

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        cur = self.width + self.step
        drops = next_token_drops(self.context[:, :cur], self.gcfg, logits.shape[-1])  # (B, V)
        oracle = self.told is not None
        believed = self.told[:, self.step] if oracle else switch_beliefs(logits, self.threshold)
        picks = restrict(logits, drops, believed, oracle)
        self.context[:, cur] = picks
        self.step += 1
        return picks


def mask_consistent_generate(
    model,
    prefixes: Sequence[Sequence[int]],
    max_new_tokens: int,
    gcfg: GoldfishConfig,
    *,
    told: Sequence[np.ndarray] | None = None,
    threshold: float = DEFAULT_SWITCH_THRESHOLD,
    pad_id: int = 0,
    batch_size: int | str = 32,
    progress: bool = True,
) -> list[list[int]]:
    """Mask-consistent greedy continuations of ``max_new_tokens`` tokens: the oracle variant with ``told`` (per
    prefix, the (S,) true drop decisions), the confidence-switch variant without. Batched and KV-cached like
    :func:`goldfish.eval.generate.generate` (left padding, length buckets, input order kept)."""
    device = model_device(model)

    def run(idx: list[int]) -> list[list[int]]:
        batch = [prefixes[i] for i in idx]
        picker = MaskConsistentPicker(
            batch, max_new_tokens, gcfg, None if told is None else [told[i] for i in idx], threshold, device
        )
        return decode_batch(model, batch, max_new_tokens, pad_id, picker).tolist()

    desc = "mask-consistent (oracle)" if told is not None else "mask-consistent (switch)"
    return run_batched(run, [len(p) for p in prefixes], batch_size, model, False, desc, progress)


def true_contexts(doc: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(t, W) contexts of the targets at ``positions`` (t,) of ``doc``: row j is ``doc[:positions[j]]`` (everything
    before the target, the true context), left-padded with :data:`PAD` to the longest, W = max position."""
    width = int(positions.max())
    out = torch.full((len(positions), width), PAD, dtype=torch.int64, device=doc.device)
    for j, p in enumerate(positions.tolist()):
        out[j, width - p :] = doc[:p]
    return out


def teacher_forced(
    model,
    prefixes: Sequence[Sequence[int]],
    suffixes: Sequence[Sequence[int]],
    told: Sequence[np.ndarray],
    gcfg: GoldfishConfig,
    threshold: float = DEFAULT_SWITCH_THRESHOLD,
    *,
    batch_size: int | str = 32,
    progress: bool = True,
) -> list[dict[str, int]]:
    """Per window, the top-1 hits on the dropped suffix positions given the true context: plain argmax
    (``tf_dropped_hits``), oracle-restricted (``tf_oracle_dropped_hits``) and switch-restricted
    (``tf_switch_dropped_hits``), from the one teacher-forced scoring pass (:mod:`goldfish.eval.scoring`, its
    ``extra`` hook restricting the argmax of each suffix position), input order kept."""
    docs = [list(p) + list(x) for p, x in zip(prefixes, suffixes)]
    first = [len(p) for p in prefixes]
    told_t = [torch.as_tensor(np.asarray(d, dtype=bool)) for d in told]

    def restricted_hits(i: int, positions: torch.Tensor, logits: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
        drops = next_token_drops(
            true_contexts(torch.as_tensor(docs[i], device=logits.device), positions), gcfg, logits.shape[-1]
        )  # (t, V)
        believed = told_t[i].to(logits.device)[positions - first[i]]  # (t,) the told decisions
        oracle = restrict(logits, drops, believed, True) == truth
        switch = restrict(logits, drops, switch_beliefs(logits, threshold), False) == truth
        return torch.stack([oracle, switch], dim=1)  # (t, 2)

    stats = token_statistics(
        model,
        docs,
        first=first,
        token_budget=window_budget(model, [len(d) for d in docs], batch_size),
        desc="mask-consistent (teacher-forced)",
        progress=progress,
        fix="set a smaller decoding.batch_size",
        extra=restricted_hits,
    )
    out = []
    for st, d in zip(stats, told_t):
        dropped = d.numpy()
        out.append(
            {
                "tf_dropped_hits": int((st.correct & dropped).sum()),
                "tf_oracle_dropped_hits": int((st.extra[:, 0] & dropped).sum()),
                "tf_switch_dropped_hits": int((st.extra[:, 1] & dropped).sum()),
            }
        )
    return out


# ------------------------------------------------------------------------------------------------ records, summary


def _hits(gen: Sequence[int], truth: Sequence[int], dropped: np.ndarray) -> int:
    """Dropped suffix positions where ``gen`` has the true token (a shorter generation misses the rest)."""
    return int(sum(bool(d) and g == t for g, t, d in zip(gen, truth, dropped)))


def window_records(
    model,
    windows: Sequence[Any],
    greedy: Sequence[Sequence[int]],
    gcfg: GoldfishConfig,
    threshold: float = DEFAULT_SWITCH_THRESHOLD,
    *,
    pad_id: int = 0,
    batch_size: int | str = 32,
    progress: bool = True,
) -> list[dict]:
    """Per window (one suffix length), the mask-consistent fields of results.json (eval/SCHEMA.md, windows):
    ``mask_dropped``, ``greedy_dropped_hits``, ``mc_oracle_*`` / ``mc_switch_*`` (``exact_match``, ``token_match``,
    ``dropped_hits``) and the teacher-forced ``tf_*dropped_hits``."""
    prefixes, suffixes = [list(w.prefix) for w in windows], [list(w.suffix) for w in windows]
    told = told_drops(windows, gcfg)
    kw = dict(pad_id=pad_id, batch_size=batch_size, progress=progress)
    gens = {
        "mc_oracle": mask_consistent_generate(model, prefixes, len(suffixes[0]), gcfg, told=told, **kw),
        "mc_switch": mask_consistent_generate(model, prefixes, len(suffixes[0]), gcfg, threshold=threshold, **kw),
    }
    tf = teacher_forced(model, prefixes, suffixes, told, gcfg, threshold, batch_size=batch_size, progress=progress)
    records = []
    for i, truth in enumerate(suffixes):
        rec: dict[str, Any] = {
            "mask_dropped": int(told[i].sum()),
            "greedy_dropped_hits": _hits(greedy[i], truth, told[i]),
        }
        for name, outs in gens.items():
            gen = outs[i]
            rec[f"{name}_exact_match"] = list(gen) == truth
            rec[f"{name}_token_match"] = sum(g == t for g, t in zip(gen, truth)) / len(truth)
            rec[f"{name}_dropped_hits"] = _hits(gen, truth, told[i])
        rec.update(tf[i])
        records.append(rec)
    return records


def _dropped_accuracy(windows: Sequence[dict], hits_key: str, n_bootstrap: int, seed: int) -> dict:
    """Pooled accuracy on the dropped positions (hits / dropped) with a 95 % interval resampling documents."""
    values, docs = [], []
    for w in windows:
        n, h = int(w["mask_dropped"]), int(w[hits_key])
        values += [1.0] * h + [0.0] * (n - h)
        docs += [w["doc_id"]] * n
    return cluster_bootstrap_mean(values, docs, n_bootstrap, seed)


def summarize(windows: Sequence[dict], n_bootstrap: int = 1000, seed: int = 0) -> list[dict]:
    """The ``adversary`` section of results.json: one row per (placement, prefix length) -- never pooled -- with
    exact-match rates of greedy and both variants (intervals over documents; exact McNemar against greedy on the
    same windows) and the accuracy on the dropped suffix positions of greedy, both variants and the teacher-forced
    measures."""
    keys = sorted({(w["window"], w["prefix_len"]) for w in windows if "mask_dropped" in w})
    rows = []
    for placement, prefix_len in keys:
        ws = [w for w in windows if (w["window"], w["prefix_len"]) == (placement, prefix_len) and "mask_dropped" in w]
        docs = [w["doc_id"] for w in ws]
        greedy = [bool(w["exact_match"]) for w in ws]
        row: dict[str, Any] = {
            "window": placement,
            "prefix_len": prefix_len,
            "n_windows": len(ws),
            "n_dropped": int(sum(w["mask_dropped"] for w in ws)),
            "exact_match": {"greedy": cluster_bootstrap_mean(greedy, docs, n_bootstrap, seed)},
            "mcnemar_vs_greedy": {},
            "dropped_accuracy": {},
        }
        for name in VARIANTS:
            verdicts = [bool(w[f"{name}_exact_match"]) for w in ws]
            row["exact_match"][name] = cluster_bootstrap_mean(verdicts, docs, n_bootstrap, seed)
            row["mcnemar_vs_greedy"][name] = mcnemar_exact(verdicts, greedy)
        for name, key in (
            ("greedy", "greedy_dropped_hits"),
            ("mc_oracle", "mc_oracle_dropped_hits"),
            ("mc_switch", "mc_switch_dropped_hits"),
            ("tf", "tf_dropped_hits"),
            ("tf_oracle", "tf_oracle_dropped_hits"),
            ("tf_switch", "tf_switch_dropped_hits"),
        ):
            row["dropped_accuracy"][name] = _dropped_accuracy(ws, key, n_bootstrap, seed)
        rows.append(row)
    return rows


def section(windows: Sequence[dict], gcfg: GoldfishConfig, cfg: Any) -> dict:
    """results.json's ``adversary``: the mask settings assumed, the switch threshold and :func:`summarize`'s rows."""
    return {
        "name": cfg.decoding.adversary,
        "mask": {
            "k": gcfg.k,
            "h": gcfg.h,
            "strategy": gcfg.strategy,
            "seed": gcfg.seed,
            "special_ids": list(gcfg.special_ids),
        },
        "switch_threshold": cfg.decoding.switch_threshold or DEFAULT_SWITCH_THRESHOLD,
        "rows": summarize(windows, cfg.membership.n_bootstrap, cfg.seed),
    }
