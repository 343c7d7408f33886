"""``prepare(cfg, out)``: corpus -> tokenizer -> members / nonmembers / background -> training rows -> folder.

The folder is built in a temporary sibling under the folder's lock and swapped into place at the end
(``goldfish.ownership.writing``), so an interrupted run leaves nothing half-written; an existing folder is refused
unless ``overwrite``, and ``overwrite`` replaces only a folder ``goldfish prepare`` made (its ownership marker).
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import time
from pathlib import Path

import numpy as np

from ..config import save_config, to_dict
from ..errors import UserError
from ..io import atomic_write_json
from ..ownership import fingerprint_sha256, writing
from ..provenance import code_version, versions
from .canaries import canary_alphabet, make_canaries
from .config import PrepareConfig, SourceConfig
from .packing import build_rows, occurrences, training_order, variant_layout
from .prepared import FORMAT, doc_columns, save_table, train_columns
from .sources import Document, load_documents
from .splits import Item, SplitPlan, background_items, plan_splits
from .tokenizer import load_tokenizer, tokenizer_info
from .variants import make_variants

TOKENIZE_BATCH = 64
_WORD_END = re.compile(r"\S\s")  # a non-space character followed by whitespace


def _bar(total: int, desc: str, enabled: bool, unit: str = "doc", position: int = 1):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, leave=False, dynamic_ncols=True,
                position=position)


class _Stages:
    """The outer progress bar: one step per stage, named as it starts."""

    NAMES = ("read documents", "tokenizer", "tokenize", "split", "lay out rows", "write")

    def __init__(self, enabled: bool):
        self.bar = _bar(len(self.NAMES), "prepare", enabled, unit="step", position=0)
        self.started = False

    def __call__(self, name: str) -> None:
        if self.started:
            self.bar.update(1)
        self.started = True
        self.bar.set_description(f"prepare: {name}")

    def close(self) -> None:
        self.bar.update(1)
        self.bar.close()


def tokenize(tok, docs: list[Document], progress: bool = False, desc: str = "tokenize",
             max_tokens: int | None = None) -> list[np.ndarray]:
    """Token ids of each document (no BOS/EOS); literal special-token text is split, never turned into EOS.

    ``max_tokens``: only the first ``max_tokens`` ids are needed, so a byte-level tokenizer reads just a prefix of
    each long text (see :func:`_prefix`); the ids returned are identical to the whole text's ids, cut.
    """
    cut = max_tokens is not None and _is_byte_level(tok)
    out: list[np.ndarray] = []
    with _bar(len(docs), desc, progress) as bar:
        for s in range(0, len(docs), TOKENIZE_BATCH):
            texts = [d.text for d in docs[s:s + TOKENIZE_BATCH]]
            heads = [_prefix(t, max_tokens) for t in texts] if cut else texts
            enc = _encode(tok, heads)
            for i, ids in enumerate(enc):
                if len(heads[i]) < len(texts[i]) and len(ids) < max_tokens:  # prefix too short: whole text
                    enc[i] = _encode(tok, [texts[i]])[0]
            out.extend(np.asarray(ids[:max_tokens] if max_tokens else ids, dtype=np.int64) for ids in enc)
            bar.update(len(texts))
    return out


def _encode(tok, texts: list[str]) -> list[list[int]]:
    return tok(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]


def _is_byte_level(tok) -> bool:
    from tokenizers import pre_tokenizers

    backend = getattr(tok, "backend_tokenizer", None)
    return isinstance(getattr(backend, "pre_tokenizer", None), pre_tokenizers.ByteLevel)


def _prefix(text: str, max_tokens: int) -> str:
    """A prefix of ``text`` ending just before a whitespace that follows a non-space character.

    GPT-2-style pre-tokenization never joins a non-space character with the whitespace after it, so every token of
    this prefix equals the whole text's token at the same index. ~6 characters per needed token is ample for prose;
    the caller falls back to the whole text when the prefix yields too few tokens.
    """
    budget = 6 * max_tokens + 64
    if len(text) <= budget:
        return text
    m = _WORD_END.search(text, budget - 1)
    return text[:m.start() + 1] if m else text

def _libraries(cfg: PrepareConfig) -> list[str]:
    """The libraries the prepared bytes depend on, for the manifest's versions (gensim when Wikipedia is read)."""
    wiki = "wikipedia" in (cfg.source.name, getattr(cfg.background_source, "name", None),
                           getattr(cfg.tokenizer.source, "name", None))
    return ["numpy", "datasets", "pyarrow", "tokenizers", "transformers"] + ["gensim"] * wiki


def _source_label(src: SourceConfig) -> str:
    return src.name + (f":{src.path}" if src.path else "")


def _background(cfg: PrepareConfig, plan: SplitPlan, docs, tokens, bg_docs, bg_tokens) -> list[Item]:
    """Background from the main source's unused documents, or from ``background_source`` in a seeded order."""
    if cfg.background_source is None:
        return background_items(cfg, plan, [docs[i] for i in plan.pool], [tokens[i] for i in plan.pool])
    order = np.random.default_rng([cfg.seed, 2]).permutation(len(bg_docs))
    return background_items(cfg, plan, [bg_docs[i] for i in order], [bg_tokens[i] for i in order])


def _needed_tokens(cfg: PrepareConfig) -> int | None:
    """How many leading tokens of each main-source document the splits can use (None = all of them)."""
    if cfg.doc_tokens is None or (cfg.num_background != 0 and cfg.background_source is None):
        return None  # whole documents, or the unused ones become background
    return cfg.doc_tokens * (2 if cfg.nonmember_mode == "later_chunk" else 1)


def _build(cfg: PrepareConfig, progress: bool, stage: _Stages) -> tuple:
    """Everything but the writing: (tokenizer, plan, rows, row stats)."""
    stage("read documents")
    load_stats: dict = {}
    docs = load_documents(cfg.source, load_stats)
    bg_docs: list[Document] = []
    if cfg.background_source is not None and cfg.num_background != 0:
        bg_docs = load_documents(cfg.background_source)
    stage("tokenizer")
    texts = None
    if cfg.tokenizer.name == "bpe":
        texts = [d.text for d in load_documents(cfg.tokenizer.source)] if cfg.tokenizer.source is not None else \
            [d.text for d in docs + bg_docs]
    tok = load_tokenizer(cfg.tokenizer.name, texts, cfg.tokenizer.vocab_size, cfg.seed)
    if tok.eos_token_id is None or tok.pad_token_id is None:
        raise UserError(f"tokenizer {cfg.tokenizer.name} has no EOS/pad id; set eos_token in its config")
    stage("tokenize")
    tokens = tokenize(tok, docs, progress, max_tokens=_needed_tokens(cfg))
    bg_tokens = tokenize(tok, bg_docs, progress, "tokenize background") if bg_docs else []
    stage("split")
    plan = plan_splits(cfg, docs, tokens)
    plan.background = _background(cfg, plan, docs, tokens, bg_docs, bg_tokens)
    plan.stats.update(load_stats)
    plan.canaries = _canaries(cfg, tok)
    stage("lay out rows")
    reps = [it.repetitions if cfg.train_members else 0 for it in plan.members]
    canary_reps = [it.repetitions if cfg.train_members else 0 for it in plan.canaries]
    member_ids = [it.ids for it in plan.members]
    background_ids = [it.ids for it in plan.background]
    if cfg.near_duplicates is None or not cfg.train_members:
        order, owner, variants = training_order(reps, len(plan.background), cfg.seed, canary_reps), None, []
    else:
        copies = make_variants(member_ids, reps, cfg.near_duplicates, cfg.seed, _decoder(tok),
                               lambda text: _encode(tok, [text])[0])
        variants = [v for vs in copies for v in vs]
        order, owner = variant_layout(reps, len(plan.background), cfg.seed)
    docs_in_rows = member_ids + variants + background_ids + [it.ids for it in plan.canaries]
    whole = np.zeros(len(docs_in_rows), dtype=bool)  # (D,) members, their variants and canaries are never cut
    whole[:len(member_ids) + len(variants)] = True
    whole[len(docs_in_rows) - len(plan.canaries):] = True
    rows, row_stats = build_rows(docs_in_rows, order, cfg.seq_len, cfg.packing, tok.eos_token_id,
                                 tok.pad_token_id, whole=whole, owner=owner)
    seen = occurrences(rows["document_ids"], rows["position_ids"], len(docs_in_rows))  # (D,) copies in the rows
    first_canary = len(docs_in_rows) - len(plan.canaries)
    for name, got, want in (("members", seen[:len(member_ids)], reps), ("canaries", seen[first_canary:], canary_reps)):
        if not np.array_equal(got, want):
            raise RuntimeError(f"bug: the training rows hold {name} {got.tolist()} times, labelled {want}")
    if variants:
        row_stats["variants"] = len(variants)
    return tok, plan, rows, row_stats


def _canaries(cfg: PrepareConfig, tok) -> list[Item]:
    """The recipe's canaries as split items (``canary:<c>``, text = their decoded ids); none without them. They are
    kept whole in a row, so one longer than a packed row is refused."""
    if cfg.canaries is None or cfg.canaries.count == 0:
        return []
    if cfg.packing == "pack" and cfg.canaries.tokens + 1 > cfg.seq_len:
        raise UserError(f"canaries.tokens={cfg.canaries.tokens} + EOS does not fit in seq_len={cfg.seq_len}; "
                        "shorten the canaries or lengthen the rows")
    ids, reps = make_canaries(cfg.canaries, canary_alphabet(tok), cfg.repetitions, cfg.seed)
    text = _decoder(tok)
    return [Item(Document(f"canary:{c}", f"canary {c}", text(ids[c].tolist()), "canary"), ids[c], reps[c])
            for c in range(len(ids))]


def _decoder(tok):
    """ids -> the text they spell (no clean-up, special tokens kept): what a row of these ids holds."""
    return lambda ids: tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _manifest(cfg: PrepareConfig, tok, plan: SplitPlan, row_stats: dict, sha: dict, started: float) -> dict:
    splits = {"members": plan.members, "nonmembers": plan.nonmembers}
    if cfg.num_background != 0:
        splits["background"] = plan.background
    splits.update({name: items for name, items in (("validation", plan.validation), ("canaries", plan.canaries))
                   if items})
    counts = {name: len(items) for name, items in splits.items()}
    tokens = {name: int(sum(len(it.ids) for it in items)) for name, items in splits.items()}
    counts["train"], tokens["train"] = row_stats["rows"], row_stats["tokens"]
    strata: dict[str, int] = {}
    for it in plan.members:
        strata[str(it.repetitions)] = strata.get(str(it.repetitions), 0) + 1
    return {
        "format": FORMAT, "name": cfg.name, "source": _source_label(cfg.source),
        "tokenizer": tokenizer_info(tok, cfg.tokenizer.name), "seed": cfg.seed, "seq_len": cfg.seq_len,
        "packing": cfg.packing, "counts": counts, "tokens": tokens, "sha256": sha,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "config": to_dict(cfg), "code": code_version(), "versions": versions(_libraries(cfg)),
        "stats": {**plan.stats, **row_stats, "repetition_strata": strata,
                  "background_source": _source_label(cfg.background_source or cfg.source),
                  "tokenizer_corpus": (_source_label(cfg.tokenizer.source) if cfg.tokenizer.source
                                       else "the recipe's documents"),
                  "members_trained": cfg.train_members,
                  **({"canary_alphabet": len(canary_alphabet(tok))} if plan.canaries else {}),
                  "seconds": round(time.perf_counter() - started, 2)},
    }


def prepare(cfg: PrepareConfig, out: str | Path | None = None, overwrite: bool = False, progress: bool = True) -> Path:
    """Build the prepared folder for ``cfg`` at ``out`` (default ``data/prepared/<name>``); returns its path.

    Same config and seed -> byte-identical Arrow files. Refuses an existing folder unless ``overwrite``.
    """
    started = time.perf_counter()
    out = Path(out).expanduser() if out is not None else cfg.default_out()
    with writing(out, "prepared", replace=overwrite, stage=True, exist_ok=overwrite) as folder:
        stage = _Stages(progress)
        try:
            tok, plan, rows, row_stats = _build(cfg, progress, stage)
            stage("write")
            sha = _write(cfg, folder.path, tok, plan, rows, row_stats, started)
            folder.mark(fingerprint_sha256(sha))
        finally:
            stage.close()
    return out


def _write(cfg: PrepareConfig, tmp: Path, tok, plan: SplitPlan, rows: dict, row_stats: dict,
           started: float) -> dict:
    """Tokenizer, splits, resolved config and manifest, into the staging folder ``tmp``; returns the splits'
    sha256."""

    text_of = _decoder(tok)

    def decode(ids: np.ndarray) -> str:  # the text a row actually holds (the cut chunk, not the whole article)
        return text_of(ids.tolist())

    tok.save_pretrained(str(tmp / "tokenizer"))
    sha = {"members": save_table(doc_columns(plan.members, "members", decode), tmp / "members"),
           "nonmembers": save_table(doc_columns(plan.nonmembers, "nonmembers", decode), tmp / "nonmembers")}
    if cfg.num_background != 0:
        sha["background"] = save_table(doc_columns(plan.background, "background", decode), tmp / "background")
    for name, items in (("validation", plan.validation), ("canaries", plan.canaries)):
        if items:
            sha[name] = save_table(doc_columns(items, name, decode), tmp / name)
    sha["train"] = save_table(train_columns(rows), tmp / "train")
    save_config(cfg, tmp / "config.yaml")
    atomic_write_json(tmp / "manifest.json", _manifest(cfg, tok, plan, row_stats, sha, started))
    _default_permissions(tmp)
    return sha


def _default_permissions(folder: Path) -> None:
    """Temp folders/files are created private (0700/0600); give the result the umask's usual modes instead."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    for name in ("config.yaml", "manifest.json"):
        os.chmod(folder / name, 0o666 & ~umask)


def summary(path: str | Path) -> str:
    """A one-screen description of a prepared folder, from its manifest."""
    import json

    m = json.loads((Path(path) / "manifest.json").read_text(encoding="utf-8"))
    s, t = m["stats"], m["tokenizer"]
    strata = ", ".join(f"{k}x: {v}" for k, v in sorted(s["repetition_strata"].items(), key=lambda kv: int(kv[0])))
    lines = [
        f"prepared '{m['name']}' in {s['seconds']:.1f}s -> {path}",
        f"  source      {m['source']}: {s['read']} read, {s['below_min_words']} below min_words, "
        f"{s['below_min_tokens']} below min_tokens, {s['too_short_for_later_chunk']} too short for the chunks, "
        f"{s['duplicates']} duplicates",
        f"  tokenizer   {t['name']} (vocab {t['vocab_size']}, eos {t['eos_id']}, pad {t['pad_id']})",
        f"  members     {m['counts']['members']} docs, {m['tokens']['members']} tokens; repetitions {strata}",
        f"  nonmembers  {m['counts']['nonmembers']} docs, {m['tokens']['nonmembers']} tokens "
        f"({m['config']['nonmember_mode']})",
    ]
    if "background" in m["counts"]:
        lines.append(f"  background  {m['counts']['background']} docs, {m['tokens']['background']} tokens "
                     f"from {s['background_source']}")
    if "validation" in m["counts"]:
        lines.append(f"  validation  {m['counts']['validation']} docs, {m['tokens']['validation']} tokens (never "
                     "trained on: for tuning)")
    if "canaries" in m["counts"]:
        c = m["config"]["canaries"]
        lines.append(f"  canaries    {m['counts']['canaries']} x {c['tokens']} random tokens (secret: the last "
                     f"{c['secret_tokens']}, from {s['canary_alphabet']} ids)")
    lines.append(f"  train       {m['counts']['train']} rows x {m['seq_len']} ({m['packing']}): {m['tokens']['train']} "
                 f"tokens, {s['padding']} padding, {s['split_occurrences']} documents split across rows")
    if "variants" in s:
        nd = m["config"]["near_duplicates"]
        lines.append(f"  variants    {s['variants']} near-duplicate copies ({nd['edit']}, every {nd['every']}) in place "
                     "of repeated members")
    lines.append(f"  sha256      train {m['sha256']['train'][:16]}, members {m['sha256']['members'][:16]}")
    return "\n".join(lines)
