"""What Goldfish costs a model as a language model, the whole analysis (issue 38, item 6): each cell's held-out loss
(mean per-token NLL, nats) on a fixed set of documents of offline corpora (``utility.corpora``: the Wikipedia
articles bundled in gensim, Debian's bible-kjv), none of which the cell's prepared folders hold, written to the
cell's ``eval/utility.json``; the cell summary's ``utility``; its per-run number per corpus for the across-run
section (``runs``), where each arm's loss is paired with the other arms' and the control's of the same replicate
(seed) and decided against ``utility.margin`` by two one-sided t tests over the replicates; and a report section
with each cell's losses.

The documents: per corpus, the first ``utility.documents`` in source order with at least ``utility.tokens`` tokens
(the cell's tokenizer) whose source id, text (sha256) and first :data:`KEY_TOKENS` token ids differ from those of
every member, nonmember, validation and canary document and every stored background chunk of each prepared folder
the cell reads (``CellPlan.prepared``: its data and its training data); each scored on its first ``utility.tokens``
tokens by eval's membership pass (:func:`goldfish.eval.membership.target_pass`, with the cell's ``membership``
window, stride, token budget and chunk). The choice depends on the corpus, the tokenizer and the prepared folders
only, so the cells of one grid point that read the same prepared folders score the same documents; a control with
data of its own (``control_data``, e.g. more background in place of the targets) may exclude other documents and
score another set. The file records each document's sha256, and the pairing keeps a pair only where both cells
scored the same set (the report lists a dropped pair as "not the same documents"). A corpus that is not installed
is skipped with a one-line note.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from goldfish.eval.membership import target_pass
from goldfish.eval.stats import mean_interval
from goldfish.eval.tables import fmt, markdown_section, markdown_table

from ...data import SourceConfig, load_prepared
from ...data.sources import Document, iter_source
from ...data.stream import text_sha256
from ...errors import UserError
from ...io import atomic_write_json, read_json
from ..config import ExperimentConfig
from ..plan import CellFolder, CellPlan
from .base import Analysis, Cell, Section

KEY_TOKENS = 16  # a document is the prepared one when its first 16 token ids are (a chunk's, a target's start)


def utility_file(folder: CellFolder) -> Path:
    """The cell's held-out loss on the utility corpora: ``eval/utility.json``."""
    return folder.eval_dir / "utility.json"


def prepared_keys(folders: Sequence[Path]) -> dict[str, set]:
    """What the prepared ``folders`` hold: ``ids`` (source ids of their documents), ``texts`` (sha256 of their
    texts) and ``starts`` (the first :data:`KEY_TOKENS` token ids of every document split and background chunk)."""
    keys: dict[str, set] = {"ids": set(), "texts": set(), "starts": set()}
    for folder in folders:
        prepared = load_prepared(folder, verify=False)
        for split in (prepared.members, prepared.nonmembers, prepared.validation, prepared.canaries):
            if split is None:
                continue
            keys["ids"].update(str(i) for i in split["id"])
            keys["texts"].update(text_sha256(t) for t in split["text"])
            keys["starts"].update(tuple(int(x) for x in ids[:KEY_TOKENS]) for ids in split["input_ids"])
        for i in range(len(prepared.background) if prepared.background is not None else 0):
            keys["starts"].add(tuple(int(x) for x in prepared.background[i][:KEY_TOKENS]))
    return keys


def select_documents(
    documents: Iterator[Document], tokenizer: Any, keys: dict[str, set], count: int, tokens: int
) -> list[tuple[Document, list[int]]]:
    """The first ``count`` of ``documents`` (source order) with at least ``tokens`` tokens that ``keys``
    (:func:`prepared_keys`) does not hold, each with its first ``tokens`` token ids (no BOS/EOS, as prepare
    tokenizes)."""
    chosen = []
    for doc in documents:
        if doc.id in keys["ids"] or text_sha256(doc.text) in keys["texts"]:
            continue
        ids = tokenizer(doc.text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        if len(ids) < tokens or tuple(ids[:KEY_TOKENS]) in keys["starts"]:
            continue
        chosen.append((doc, list(ids[:tokens])))
        if len(chosen) == count:
            break
    return chosen


def corpus_documents(name: str) -> Iterator[Document]:
    """Every document of an offline corpus in source order (raises UserError when it is not installed)."""
    return (doc for _, doc in iter_source(SourceConfig(name=name)))


def score_corpus(model: Any, docs: list[list[int]], membership: Any) -> dict[str, Any]:
    """Held-out loss of ``docs`` under ``model`` (a loaded model) by eval's membership pass: ``loss`` (mean over
    documents of their mean NLL per target, nats/token), its 95 % normal interval over documents (within-run)
    and each document's ``nll``."""
    rows = target_pass(
        model,
        docs,
        min_k_ratios=(),
        window=membership.window,
        stride=membership.stride,
        token_budget=membership.token_budget,
        chunk=membership.chunk,
        progress=False,
    )
    nll = [float(r["nll"]) for r in rows]
    low, high = mean_interval(nll)
    return {"loss": float(np.mean(nll)), "loss_ci": None if low is None else [low, high], "nll": nll}


def write_utility(plan: CellPlan, model: Any) -> dict[str, Any]:
    """Select, score and write the cell's ``eval/utility.json``: ``{documents, tokens, corpora: {name: {loss,
    loss_ci, n_documents, documents: [{id, sha256, nll}], documents_sha256} | {note}}}``; ``model``: the cell's
    shared model handle (loaded only when a corpus is scored)."""
    cfg = plan.utility
    keys = prepared_keys([folder for _, folder in plan.prepared])
    tokenizer = load_prepared(plan.data_dir, verify=False).tokenizer
    corpora: dict[str, Any] = {}
    for name in cfg.corpora:
        try:
            chosen = select_documents(corpus_documents(name), tokenizer, keys, cfg.documents, cfg.tokens)
        except UserError as e:  # not installed: the reader says how to install it
            corpora[name] = {"note": f"skipped: {str(e).splitlines()[0]}"}
            continue
        if not chosen:
            corpora[name] = {"note": f"skipped: no document of {cfg.tokens}+ tokens outside the prepared data"}
            continue
        found = score_corpus(model.get(), [ids for _, ids in chosen], plan.eval_cfg.membership)
        shas = [text_sha256(doc.text) for doc, _ in chosen]
        corpora[name] = {
            "loss": found["loss"],
            "loss_ci": found["loss_ci"],
            "n_documents": len(chosen),
            "documents_sha256": hashlib.sha256("".join(shas).encode()).hexdigest(),
            "documents": [
                {"id": doc.id, "sha256": sha, "nll": nll} for (doc, _), sha, nll in zip(chosen, shas, found["nll"])
            ],
        }
    result = {"documents": cfg.documents, "tokens": cfg.tokens, "corpora": corpora}
    atomic_write_json(utility_file(plan), result)
    return result


@dataclasses.dataclass
class UtilitySummary:
    """The cell summary's part (SCHEMA.md, ``cells``): ``utility``, the cell's ``eval/utility.json`` without the
    per-document rows (``{documents, tokens, corpora: {name: {loss, loss_ci, n_documents, documents_sha256} |
    {note}}}``), None without the file."""

    utility: dict | None = None


def collect(plan: CellPlan) -> UtilitySummary:
    if not utility_file(plan).is_file():
        return UtilitySummary()
    found = read_json(utility_file(plan))
    for corpus in found["corpora"].values():
        corpus.pop("documents", None)
    return UtilitySummary(found)


def headline_key(corpus: str) -> str:
    """The across-run section's name of a corpus's held-out loss."""
    return f"utility_loss_{corpus}"


def headlines(cell: Cell) -> dict[str, tuple[float | None, str | None]]:
    """Per corpus scored: ``{utility_loss_<corpus>: (loss, the documents' sha256)}``: a pair of cells is compared
    only on the same documents."""
    corpora = (cell.utility or {}).get("corpora") or {}
    return {headline_key(name): (c["loss"], c["documents_sha256"]) for name, c in corpora.items() if "loss" in c}


def margins(cfg: ExperimentConfig) -> dict[str, float]:
    """The equivalence margin stated in the config, per corpus's headline."""
    return {headline_key(name): cfg.utility.margin for name in cfg.utility.corpora}


def render(results: dict, cells: Sequence[Cell]) -> str:
    """Each cell's held-out loss per utility corpus, with its within-run interval over documents, and the notes of
    the corpora skipped."""
    found = [c for c in cells if c.utility]
    if not found:
        return ""
    corpora = list(dict.fromkeys(name for c in found for name in c.utility["corpora"]))
    notes = {
        f"{name}: {c.utility['corpora'][name]['note']}"
        for c in found
        for name in corpora
        if "note" in c.utility["corpora"].get(name, {})
    }
    one = len({c.arm for c in cells}) == len(cells)
    rows = []
    for c in found:
        row = [c.label(results["axes"], one)]
        for name in corpora:
            v = c.utility["corpora"].get(name) or {}
            ci = v.get("loss_ci") or [None, None]
            row.append(f"{fmt(v['loss'])} [{fmt(ci[0])}, {fmt(ci[1])}] ({v['n_documents']})" if "loss" in v else "-")
        rows.append(row)
    first = found[0].utility
    return markdown_section(
        "Utility: held-out loss on other corpora",
        markdown_table(["cell"] + [f"{n} loss [95 %] (docs)" for n in corpora], rows),
        f"Mean per-token NLL (nats) of the first {first['tokens']} tokens of up to {first['documents']} documents per "
        "corpus that no prepared folder of the cell holds (by source id, text and first tokens), scored by eval's "
        "membership pass; the interval resamples documents inside one trained model (within-run). The reading, "
        "paired by seed against a margin stated before the run, is in 'Across training runs'."
        + "".join(f"\n\n{n}" for n in sorted(notes)),
    )


UTILITY = Analysis(
    name="utility",
    output=utility_file,
    applies=lambda plan: bool(plan.utility.corpora),
    run=write_utility,
    part=UtilitySummary,
    collect=collect,
    summary_keys=("utility",),
    sections=(Section(after="membership", render=render),),
    headlines=headlines,
    margins=margins,
)
