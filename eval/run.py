"""``run_eval(cfg)``: load -> read documents -> windows -> membership -> generate + one pass -> metrics -> files.

Order of work, cheapest checks first: the out folder is locked and its ownership checked
(:func:`goldfish.ownership.writing`), then the reference model (a bad path fails at once), the tokenizer and the
model (one read of a GGUF file for both), the documents, the windows and the model's context length; then the out
folder is claimed (:func:`goldfish.eval.state.claim_folder`: a folder holding a different evaluation is refused
with one line), membership scores (first: the documents its target pass scores are in the model's memo when
extraction's one pass reads a whole-document window; :mod:`goldfish.eval.membership_task`), extraction runs
(:mod:`goldfish.eval.extraction_task`), and the final files are written together: ``results.json`` (schema in
eval/SCHEMA.md), ``results.csv``, ``eval_config.yaml`` (the config of these results), report and plots,
each atomically. Extraction windows and membership scores are appended to partial files as they finish, so a
killed evaluation resumes where it stopped (see :mod:`goldfish.eval.state`); ``eval_log.jsonl`` gets one
throughput record per chunk or scoring batch.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import logging
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import torch

from goldfish.config import save_config, shown, to_dict
from goldfish.errors import UserError
from goldfish.hardware import apply_threads, describe
from goldfish.io import atomic_write_text, read_json, strict_json
from goldfish.model_source import checkpoint_precision, weights_stamp
from goldfish.ownership import OutputFolder, writing
from goldfish.precision import announce, resolve_precision
from goldfish.provenance import code_version, git_commit, read_fingerprint, versions

from . import adversary
from .aggregate import summarize
from .canaries import canaries_section
from .canaries import check_task as check_canary_task
from .config import EvalConfig
from .documents import document_verdicts, too_short_line
from .extraction_task import check_context, decode, evaluate_windows, extraction_windows
from .membership_task import run_membership
from .shard import Shard, process_group, splitting
from .inputs import load_eval_documents
from .lmeval import FILE as LM_EVAL_FILE
from .lmeval import lm_eval_results
from .loading import (
    SharedModel,
    check_reference,
    check_same_tokenizer,
    check_vocab,
    load_model,
    load_model_tokenizer,
    model_vocab_size,
    num_parameters,
    resolve_device,
    resolve_model_path,
)
from .html_report import write_html
from .report import write_report
from .segments import attach_segments
from .state import MEMBERSHIP_PARTIAL, WINDOWS_PARTIAL, claim_folder, fingerprint
from .windows import windows_sha256

log = logging.getLogger(__name__)

SCHEMA = "goldfish-eval/1"
CSV_SKIP = ("generation_ids", "truth_ids", "onepass_hits")  # per-token lists stay in results.json only
VERSIONED = ("torch", "transformers", "numpy")  # the libraries results.json names the versions of


def _require(cfg: EvalConfig) -> None:
    missing = [
        flag
        for flag, value in (("--model", cfg.model.path), ("--data", cfg.data.path), ("--out", cfg.out))
        if not value
    ]
    if missing:
        raise UserError(
            f"missing {', '.join(missing)}: e.g. goldfish eval --model runs/demo/cells/standard/train "
            f"--data runs/demo/prepared/<hash> --out runs/demo/eval"
        )
    resolve_model_path(cfg.model.path)  # a wrong --model fails here, before documents are read


def write_csv(path: Path, windows: Sequence[dict]) -> None:
    """One row per window (columns = union of record keys, id lists left out), written atomically."""
    columns = [k for k in dict.fromkeys(k for w in windows for k in w) if k not in CSV_SKIP]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(windows)
    atomic_write_text(path, buf.getvalue())


SAMPLES_FILE = "samples.jsonl"


def write_samples(path: Path, windows: Sequence[dict], model: dict) -> None:
    """``--log-samples``: one JSON line per extraction window (lm-eval's per-sample log): the model it is of, where the
    window sits, the prompt's and the truth's token ids, the greedy continuation and its verdicts."""
    keep = (
        "doc_id",
        "split",
        "window",
        "start",
        "prefix_tokens",
        "suffix_len",
        "exact_match",
        "longest_match_prefix",
        "token_match",
        "generation",
        "truth",
        "generation_ids",
        "truth_ids",
        "sha256",
    )
    lines = [
        strict_json(
            {"model": model.get("path"), "revision": model.get("revision"), **{k: w.get(k) for k in keep}}, indent=None
        )
        for w in windows
    ]
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def _samples(out: Path, cfg: EvalConfig, results: dict) -> None:
    """samples.jsonl of these results with ``log_samples`` (also when a finished evaluation is reused), else none: a
    file from an earlier run never sits beside results it does not describe."""
    if cfg.log_samples:
        write_samples(out / SAMPLES_FILE, results.get("windows") or [], results.get("model") or {})
    else:
        (out / SAMPLES_FILE).unlink(missing_ok=True)


def _check_finite(model, splits: dict, cfg: EvalConfig) -> None:
    """Refuse, before anything is written, a model whose logits are NaN or infinite on the first document (at most
    64 tokens): every score it gave would be NaN."""
    doc = next((d for docs in splits.values() for d in docs if len(d.tokens) >= 2), None)
    if doc is None:
        return
    ids = torch.tensor([list(doc.tokens[:64])], device=next(model.parameters()).device)  # (1, T)
    with torch.no_grad():
        logits = model(input_ids=ids).logits  # (1, T, V)
    if not torch.isfinite(logits).all():
        raise UserError(
            f"model {cfg.model.path} computes NaN or infinite logits (on document {shown(doc.id)}): its "
            f"weights are broken (a diverged training run, a damaged conversion) or "
            f"dtype={cfg.model.dtype} overflows (try model.dtype=fp32); nothing was evaluated"
        )


def resolved(cfg: EvalConfig) -> EvalConfig:
    """``cfg`` with ``model.dtype`` resolved to a dtype: ``checkpoint`` to the checkpoint's own
    (:func:`goldfish.model_source.checkpoint_precision`), ``auto`` for its device
    (:func:`goldfish.precision.resolve_precision`, announced on the console) -- what the fingerprint, results.json and
    eval_config.yaml record."""
    if cfg.model.dtype == "checkpoint":
        dtype = checkpoint_precision(cfg.model.path)
    else:
        dtype = resolve_precision(cfg.model.dtype, resolve_device(cfg.model.device))
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dtype=dtype))


def run_eval(cfg: EvalConfig, model: SharedModel | None = None) -> dict:
    """Evaluate ``cfg.model.path`` on ``cfg.data.path``; write results.json/.csv, report and plots into ``cfg.out``.
    ``model``: the model of ``cfg.model`` already shared with other phases (an experiment cell), else loaded here.

    ``cfg.out`` is locked while this runs; a folder owned by anything but an evaluation is refused, and
    ``overwrite=true`` builds the new evaluation beside the old one, which it replaces only when it has finished."""
    _require(cfg)
    if cfg.model.threads is not None:  # the command applies the default (goldfish.commands.evaluate)
        apply_threads(cfg.model.threads)
    setting, cfg = cfg.model.dtype, resolved(cfg)
    with process_group(cfg.model.device) as shard, splitting(shard):  # torchrun / accelerate: one rank of several
        # one decision per launch: every rank computes in rank 0's resolved dtype (a rule gives all ranks of one
        # machine class the same answer; this makes it so across classes too)
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dtype=shard.broadcast(cfg.model.dtype)))
        with writing(cfg.out, "eval", replace=cfg.overwrite, option="overwrite=true", main=shard.main) as folder:
            return _evaluate(cfg, folder, model, shard, setting)


def _evaluate(cfg: EvalConfig, folder: OutputFolder, model: SharedModel | None, shard: Shard, setting: str) -> dict:
    """The evaluation; under a split (:mod:`goldfish.eval.shard`) every rank runs it on the same inputs, computes
    its share of each batched pass, and rank 0 alone reads the resume state and writes."""
    out = folder.path  # a staging folder while replacing an earlier evaluation (rank 0's; others never write)
    torch.manual_seed(cfg.seed)
    m = cfg.model
    reference = load_model(m.reference, m.dtype, m.device, m.allow_pickle) if m.reference else None
    tokenizer = load_model_tokenizer(m.path)  # None: the model folder has none (the data's is used)
    splits, prep = load_eval_documents(
        cfg.data.path, cfg.data.nonmembers, tokenizer, cfg.data.max_docs, cfg.data.group_field, cfg.data.text_field
    )
    if prep is not None and tokenizer is not None:  # ids of prepared data decode only with their own tokenizer
        check_same_tokenizer(tokenizer, prep.tokenizer, m.path, f"the prepared data {cfg.data.path}")
    elif prep is not None:
        tokenizer = prep.tokenizer
    windows, skipped = extraction_windows(cfg, splits)
    extracted = [doc for split in cfg.data.extract_splits for doc in splits.get(split, [])] if windows else []
    # which documents have a window: the too-short ones (and those given a short window) are said before any work
    placed = [
        {
            "split": w.doc.split,
            "doc_id": w.doc.id,
            "start": w.start,
            "prefix_tokens": len(w.prefix),
            "window": w.placement,
        }
        for w in windows
    ]
    audit = document_verdicts(extracted, placed, cfg.data.prefix_lens, cfg.data.suffix_len)
    short = too_short_line(audit, cfg.data.suffix_len)
    if short and shard.main:
        print(short, file=sys.stderr)
    print_ = fingerprint(cfg, splits)
    finished = shard.broadcast(_finished(out, print_, cfg) if cfg.resume and shard.main else None)
    if finished is not None:  # this evaluation, done: its results stand (resume=false computes them again)
        if shard.main:
            print(f"{folder.final} already holds this evaluation: its results.json is reused", file=sys.stderr)
            _samples(out, cfg, finished)
        return finished
    if shard.split and cfg.decoding.samples:
        raise UserError(
            f"decoding.samples={cfg.decoding.samples} draws from one random stream over the batches in "
            f"order, which {shard.world} processes would split differently; run sampled extraction in one "
            f"process (greedy, beam and membership split over processes)"
        )
    weights = weights_stamp(m.path)  # before reading them: what --update-card checks the model folder against
    shared = model or SharedModel(m)
    model, memo = shared.get(), shared.memo
    check_canary_task(cfg.tasks, splits)
    for name, docs in splits.items():
        check_vocab(model, tokenizer, [d.tokens for d in docs], what=f"the {name} documents")
    if reference is not None:  # scored on the same ids: it must read them as the same text
        check_reference(reference, m.reference, tokenizer, [d.tokens for docs in splits.values() for d in docs])
    check_context(model, windows, cfg.data.suffix_len)
    _check_finite(model, splits, cfg)
    mask = adversary.resolve_mask(cfg.goldfish, m.path, tokenizer) if cfg.decoding.adversary and windows else None
    if shard.main:
        claim_folder(folder, print_)  # refuses a different evaluation before anything is written, then marks it
    announce(setting, next(model.parameters()).device)  # auto's choice, once the evaluation is about to compute
    # membership first: its target pass scores whole documents, which extraction's one pass (whole-document windows)
    # and the mask baseline then read from the model's memo instead of scoring them again
    membership_section = run_membership(model, reference, splits, cfg, tokenizer, out, memo)
    records = evaluate_windows(model, tokenizer, windows, cfg, out, mask, memo) if windows else []
    source = resolve_model_path(m.path)
    results = {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "code": code_version(),
        "versions": versions(VERSIONED),
        "git": git_commit(),
        "config": to_dict(cfg),
        "model": {
            "path": source.name(),
            "revision": source.revision,
            "nature": source.nature(),
            "num_parameters": num_parameters(model),
            "vocab_size": model_vocab_size(model),
            "dtype": str(next(model.parameters()).dtype),
            "precision": m.dtype,
            "checkpoint_precision": checkpoint_precision(m.path),
            "device": describe(next(model.parameters()).device),
            "weights": weights,
            "partial": getattr(model, "goldfish_partial", None),
        },
        "data": {
            "path": str(cfg.data.path),
            "members": len(splits.get("members", [])),
            "nonmembers": len(splits.get("nonmembers", [])),
            "skipped_short": skipped,
            "sha256": windows_sha256(windows),
            "documents_sha256": print_["data_sha256"],
        },
        "summary": summarize(records) if "extraction" in cfg.tasks else None,
        "documents": (
            document_verdicts(extracted, records, cfg.data.prefix_lens, cfg.data.suffix_len)
            if "extraction" in cfg.tasks
            else None
        ),
        "membership": membership_section,
        "canaries": canaries_section(model, splits, cfg, prep),
        "windows": records,
    }
    if mask is not None:
        results["adversary"] = adversary.section(records, mask, cfg)
    if results["documents"] is not None and tokenizer is not None:  # each document's text, cut where verdicts change
        attach_segments(results["documents"], extracted, records, lambda ids: decode(tokenizer, ids))
    results = json.loads(strict_json(results))  # what is written: non-finite values as null, noted in json_nulls
    if shard.split:
        results["processes"] = shard.world  # how many split the work (every number is one process's)
    if not shard.main:
        return results
    atomic_write_text(out / "results.json", json.dumps(results, indent=2) + "\n")
    atomic_write_text(out / LM_EVAL_FILE, strict_json(lm_eval_results(results)) + "\n")  # lm-eval's layout
    write_csv(out / "results.csv", records)
    _samples(out, cfg, results)
    save_config(cfg, out / "eval_config.yaml")  # with its results: never describes a run that did not finish
    if cfg.report:
        write_report(results, out)
        write_html(results, out)  # report.html beside report.md, with its figures' SVG copies
    _remove_partials(out, cfg)
    return results


def _finished(out: Path, print_: dict, cfg: EvalConfig) -> dict | None:
    """The results of this evaluation when ``out`` already holds them (results.json beside a fingerprint equal to
    ``print_``), else None; partial files a kill left behind after the results are removed."""
    try:
        if not (out / "results.json").is_file() or read_fingerprint(out) != print_:
            return None
    except UserError:  # a damaged fingerprint: not this evaluation (claim_folder refuses the folder)
        return None
    _remove_partials(out, cfg)
    return read_json(out / "results.json")


def _remove_partials(out: Path, cfg: EvalConfig) -> None:
    """A finished folder keeps no partial files: its results.json holds every window and score -- except the
    per-token membership scores ``membership.keep_tokens`` asks to keep (an experiment's attacks analysis reads
    them, so each document is scored once)."""
    (out / WINDOWS_PARTIAL).unlink(missing_ok=True)
    if not cfg.membership.keep_tokens:
        (out / MEMBERSHIP_PARTIAL).unlink(missing_ok=True)
