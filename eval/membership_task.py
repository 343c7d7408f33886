"""The membership task of ``goldfish eval`` (:mod:`goldfish.eval.run`): every attack's scores of the members and the
nonmembers, whole documents (:func:`goldfish.eval.membership.score_documents`), kept in a partial file as they are
computed so a killed evaluation resumes, and the ``membership`` section of results.json made from them."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator, MutableMapping, Sequence

from goldfish.io import JsonlLogger

from . import membership
from .config import EvalConfig
from .heartbeat import for_shard, label
from .loading import model_vocab_size
from .shard import Shard, current
from .state import MEMBERSHIP_PARTIAL, JsonlDict


def run_membership(model, reference, splits: dict, cfg: EvalConfig, tokenizer, out: Path, memo=None) -> dict | None:
    """The ``membership`` section (members vs nonmembers, whole documents), or None when not run; scores already
    in ``membership.partial.jsonl`` are reused; ``memo``: the model's :class:`goldfish.eval.scoring.ScoreMemo` (the
    target pass reads the windows extraction scored)."""
    if "membership" not in cfg.tasks or not splits.get("nonmembers"):
        return None
    m = cfg.membership
    shard = current()
    with (
        _score_cache(out / MEMBERSHIP_PARTIAL, cfg.resume, shard) as cache,
        JsonlLogger(out / "eval_log.jsonl", enabled=shard.main) as logger,
        for_shard(shard, "membership", lambda: len(cache), unit="scores", label=label(cfg.out)),
    ):
        kw = dict(
            reference_model=reference,
            min_k_ratios=tuple(m.min_k_ratios),
            tokenizer=tokenizer,
            window=m.window,
            stride=m.stride,
            token_budget=m.token_budget,
            chunk=m.chunk,
            lowercase_tokens=m.lowercase_tokens,
            cache=cache,
            keep_tokens=m.keep_tokens,
            progress=cfg.progress,
            logger=logger,
            memo=memo,
        )
        kw.update(_reference_free(model, splits["nonmembers"], m))
        skip = kw.pop("recall_skip", ())
        scores = {
            name: membership.score_documents(
                model,
                [list(d.tokens) for d in splits[name]],
                **kw,
                recall_skip=skip if name == "nonmembers" else (),
                dc_pdd_leave_out=name == "nonmembers",
            )
            for name in ("members", "nonmembers")
        }
    section = membership.membership_section(
        scores["members"], scores["nonmembers"], n_bootstrap=m.n_bootstrap, seed=cfg.seed
    )
    section["doc_ids"] = {name: [d.id for d in splits[name]] for name in ("members", "nonmembers")}  # scores' order
    return section


def _reference_free(model, nonmembers: Sequence, m) -> dict:
    """The nonmember material of the reference-free attacks: ReCaLL's prefix (the first ``recall_shots``
    nonmembers, their last ``recall_prefix_tokens`` tokens; those documents are not scored) when more nonmembers
    remain, and DC-PDD's reference token counts (every nonmember)."""
    kw: dict = {"dc_pdd_clip": m.dc_pdd_clip}
    if m.recall_shots and len(nonmembers) > m.recall_shots:
        prefix = [t for d in nonmembers[: m.recall_shots] for t in d.tokens][-m.recall_prefix_tokens :]
        kw.update(recall_prefix=prefix, recall_skip=range(m.recall_shots))
    if m.dc_pdd:
        kw["dc_pdd_counts"] = membership.token_counts([d.tokens for d in nonmembers], model_vocab_size(model))
    return kw


@contextlib.contextmanager
def _score_cache(path: Path, resume: bool, shard: Shard) -> Iterator[MutableMapping[str, dict]]:
    """The membership score cache: rank 0's partial file, which it alone appends to; the other ranks of a split
    evaluation start from a copy of it (their scores are the same, gathered)."""
    if shard.main:
        with JsonlDict(path, resume) as cache:
            shard.broadcast(dict(cache))
            yield cache
    else:
        yield dict(shard.broadcast(None))
