"""``run_eval(cfg)``: load -> read documents -> windows -> membership -> generate + one pass -> metrics -> files.

Order of work, cheapest checks first: the out folder is locked and its ownership checked
(:func:`goldfish.ownership.writing`), then the reference model (a bad path fails at once), the tokenizer and the
model (one read of a GGUF file for both), the documents, the windows and the model's context length; then the out
folder is claimed (:func:`goldfish.eval.state.claim_folder`: a folder holding a different evaluation is refused
with one line), membership scores (first: the documents its target pass scores are in the model's memo when
extraction's one pass reads a whole-document window), extraction runs, and the final files are written together:
``results.json``
(schema in eval/SCHEMA.md), ``results.csv``, ``eval_config.yaml`` (the config of these results), report and plots,
each atomically. Extraction windows and membership scores are appended to partial files as they finish, so a
killed evaluation resumes where it stopped (see :mod:`goldfish.eval.state`); ``eval_log.jsonl`` gets one
throughput record per chunk or scoring batch.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import logging
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, MutableMapping, Sequence

import torch
from tqdm.auto import tqdm

from goldfish.config import save_config, shown, to_dict
from goldfish.errors import UserError
from goldfish.hardware import apply_threads, describe
from goldfish.io import JsonlLogger, atomic_write_text, read_json, strict_json
from goldfish.model_source import checkpoint_precision, weights_stamp
from goldfish.ownership import OutputFolder, writing
from goldfish.precision import announce, resolve_precision
from goldfish.provenance import code_version, git_commit, read_fingerprint, versions

from . import adversary, extraction, membership
from .aggregate import summarize
from .canaries import canaries_section
from .canaries import check_task as check_canary_task
from .config import EvalConfig
from .documents import document_verdicts, too_short_line
from .generate import beam_generate, generate
from .heartbeat import Heartbeat
from .shard import Shard, current, process_group, splitting
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
    pad_id_of,
    resolve_device,
    resolve_model_path,
)
from .metrics import compute_metrics
from .html_report import write_html
from .report import write_report
from .scoring import context_length
from .segments import attach_segments
from .state import MEMBERSHIP_PARTIAL, WINDOWS_PARTIAL, JsonlDict, claim_folder, fingerprint, read_windows
from .windows import Window, build_windows, windows_sha256

log = logging.getLogger(__name__)

SCHEMA = "goldfish-eval/1"
CHUNK = 256  # windows per resumable unit
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


def _decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False) if tokenizer is not None else ""


def _eos_id(model, tokenizer) -> int | None:
    """The eos id that ``model.generate`` stops at (generation config first, as generate reads it)."""
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, (list, tuple)):
            value = value[0] if value else None
        if isinstance(value, int):
            return value
    return None


def evaluate_chunk(
    model, tokenizer, windows: Sequence[Window], cfg: EvalConfig, pad_id: int, mask=None, on_batch=None, memo=None
) -> list[dict]:
    """Greedy generation + one pass (+ beam / samples / the mask-consistent adversary, given the model's Goldfish
    ``mask``) + metrics for a list of windows -> result records; ``on_batch(n)``: n more windows decoded greedily.
    Windows of several suffix lengths (a short document's window, :func:`goldfish.eval.windows.short_window`) are
    decoded per length, each to its own suffix's length; the records keep the windows' order. ``memo``: the
    model's :class:`goldfish.eval.scoring.ScoreMemo`, which the one pass reads and fills."""
    lengths = sorted({w.suffix_len for w in windows})
    if len(lengths) > 1:
        found: dict[int, dict] = {}
        for n in lengths:
            group = [i for i, w in enumerate(windows) if w.suffix_len == n]
            records = evaluate_chunk(model, tokenizer, [windows[i] for i in group], cfg, pad_id, mask, on_batch, memo)
            found.update(zip(group, records))
        return [found[i] for i in range(len(windows))]
    suffix_len = lengths[0] if lengths else cfg.data.suffix_len
    dec = cfg.decoding
    prefixes = [w.prefix for w in windows]
    suffixes = [w.suffix for w in windows]
    kw = dict(pad_id=pad_id, batch_size=dec.batch_size, progress=cfg.progress)
    eos = _eos_id(model, tokenizer) if dec.stop_at_eos else None
    gens = generate(model, prefixes, suffix_len, eos_id=eos, on_batch=on_batch, **kw)
    onepass = extraction.onepass(model, prefixes, suffixes, batch_size=dec.batch_size, progress=cfg.progress, memo=memo)
    beams = beam_generate(model, prefixes, suffix_len, dec.beam, **kw) if dec.beam > 1 else None
    hits = (
        extraction.sample_hits(model, prefixes, suffixes, dec.samples, temperature=dec.temperature, seed=cfg.seed, **kw)
        if dec.samples
        else None
    )
    threshold = dec.switch_threshold or adversary.DEFAULT_SWITCH_THRESHOLD
    adv = adversary.window_records(model, windows, gens, mask, threshold, **kw) if mask is not None else None
    records = []
    for i, (w, gen) in enumerate(zip(windows, gens)):
        gen_text, truth_text = _decode(tokenizer, gen), _decode(tokenizer, w.suffix)
        rec = {
            "doc_id": w.doc.id,
            "title": w.doc.title,
            "repetitions": w.doc.repetitions,
            "split": w.doc.split,
            "group": w.doc.group,
            "prefix_len": w.prefix_len,
            "prefix_tokens": len(w.prefix),
            "suffix_len": w.suffix_len,
            "window": w.placement,
            "start": w.start,
        }
        rec.update(compute_metrics(gen, w.suffix, gen_text, truth_text))
        rec.update(onepass[i])
        rec["np_extraction"] = extraction.np_extraction(rec["p_suffix"], dec.n_samples_adversary)
        if beams is not None:
            rec["beam_exact_match"] = beams[i] == list(w.suffix)
            rec["beam_token_match"] = compute_metrics(beams[i], w.suffix, names=["token_match"])["token_match"]
        if hits is not None:
            rec["sample_hits"], rec["sample_rate"] = hits[i], hits[i] / dec.samples
        rec.update(adv[i] if adv is not None else {})
        rec.update(
            {
                "generation": gen_text,
                "truth": truth_text,
                "generation_ids": list(gen),
                "truth_ids": list(w.suffix),
                "sha256": w.key,
            }
        )
        records.append(rec)
    return records


def evaluate_windows(
    model, tokenizer, windows: Sequence[Window], cfg: EvalConfig, out: Path, mask=None, memo=None
) -> list[dict]:
    """All window records in window order, computing only those not already in the partial file (rank 0's, under a
    split evaluation: every rank starts from what it holds)."""
    shard = current()
    done = shard.broadcast(read_windows(out, cfg.resume) if shard.main else None)
    todo = [w for w in dict((w.key, w) for w in windows).values() if w.key not in done]
    if done:
        log.info("resuming: %d of %d windows already done", len(windows) - len(todo), len(windows))
    pad_id = pad_id_of(tokenizer)
    bar = tqdm(
        total=len(windows),
        initial=len(windows) - len(todo),
        desc="extraction",
        unit="win",
        disable=None if cfg.progress and shard.main else True,
    )  # None: drawn only on a terminal
    decoded = [0]  # windows of the chunk in flight decoded so far: progress per batch, not per chunk
    began, told = time.perf_counter(), [not shard.main]

    def batch_done(n: int) -> None:
        decoded[0] += n
        bar.update(n)
        if not told[0] and n < len(todo):  # after the first batch: the audit's expected time, before the rest
            told[0] = True
            print(expected_time(len(todo), n, time.perf_counter() - began), file=sys.stderr)

    with (
        JsonlLogger(out / WINDOWS_PARTIAL, enabled=shard.main) as partial,
        JsonlLogger(out / "eval_log.jsonl", enabled=shard.main) as metrics_log,
        _heartbeat(
            shard, "extraction", lambda: len(done) + decoded[0], total=len(windows), unit="windows", label=_label(cfg)
        ),
    ):
        for lo in range(0, len(todo), CHUNK):
            chunk = todo[lo : lo + CHUNK]
            t0 = time.perf_counter()
            records = evaluate_chunk(model, tokenizer, chunk, cfg, pad_id, mask, on_batch=batch_done, memo=memo)
            seconds = time.perf_counter() - t0
            decoded[0] = 0  # before done grows: a beat in between undercounts, never counts a window twice
            for rec in records:
                partial.log(rec)
                done[rec["sha256"]] = rec
            metrics_log.log(
                {
                    "event": "chunk",
                    "windows": len(chunk),
                    "seconds": round(seconds, 4),
                    "windows_per_s": len(chunk) / max(seconds, 1e-9),
                    "done": len(windows) - len(todo) + lo + len(chunk),
                    "total": len(windows),
                }
            )
    bar.close()
    return [_own_record(done[w.key], w) for w in windows]


def _own_record(rec: dict, w: Window) -> dict:
    """A window's record as its own document's: a repeated text's windows share keys and are decoded once, and each
    copy keeps its own id, title and split (its own verdict, never the other copy's windows)."""
    doc = w.doc
    if rec.get("doc_id") == doc.id and rec.get("split") == doc.split:
        return rec
    return {
        **rec,
        "doc_id": doc.id,
        "title": doc.title,
        "repetitions": doc.repetitions,
        "split": doc.split,
        "group": doc.group,
    }


def expected_time(windows: int, first: int, seconds: float) -> str:
    """The console's line after the first batch: windows x the rate measured on it (greedy decoding of the first
    ``first`` windows in ``seconds``; the one-pass scoring of each chunk and membership come on top)."""
    rate = first / max(seconds, 1e-9)
    left = (windows - first) / rate
    return (
        f"extraction: {windows:,} windows to decode; the first {first} took {seconds:.1f} s "
        f"({rate:.2f} windows/s): about {_duration(left)} more for greedy decoding (one-pass scoring and "
        f"membership come on top)"
    )


def _duration(seconds: float) -> str:
    return (
        f"{seconds:.0f} s"
        if seconds < 90
        else f"{seconds / 60:.1f} min"
        if seconds < 5400
        else f"{seconds / 3600:.1f} h"
    )


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
        _heartbeat(shard, "membership", lambda: len(cache), unit="scores", label=_label(cfg)),
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


def _label(cfg: EvalConfig) -> str:
    """What the heartbeat lines name: the out folder's last parts (an experiment's cells/<cell>/eval names its
    cell)."""
    return "/".join(Path(str(cfg.out)).parts[-3:])


def _heartbeat(shard: Shard, *args, **kwargs):
    """A log line at least once a minute from rank 0 (:class:`Heartbeat`); nothing from the other ranks."""
    return Heartbeat(*args, **kwargs) if shard.main else contextlib.nullcontext()


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


def _check_context(model, windows: Sequence[Window], suffix_len: int) -> None:
    """Refuse before decoding a window longer than the model's position range (e.g. prefix_lens=all on long
    documents)."""
    limit = context_length(model)
    longest = max((len(w.prefix) + w.suffix_len for w in windows), default=0)  # a short window: its own S
    if limit is not None and longest > limit:
        raise UserError(
            f"a window of {longest} tokens (prefix + suffix_len={suffix_len}) exceeds the model's "
            f"context of {limit} tokens (max_position_embeddings); use a smaller data.prefix_lens than "
            f"'all' or shorter documents"
        )


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


def _extraction_windows(cfg: EvalConfig, splits: dict) -> tuple[list[Window], int]:
    if "extraction" not in cfg.tasks:
        return [], 0
    d = cfg.data
    to_extract = [doc for split in d.extract_splits for doc in splits.get(split, [])]
    if not to_extract:
        raise UserError(
            f"no documents in data.extract_splits={d.extract_splits}; available splits: {', '.join(splits)}"
        )
    return build_windows(to_extract, d.prefix_lens, d.suffix_len, d.window, d.stride, d.offsets, d.max_offset)


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
    windows, skipped = _extraction_windows(cfg, splits)
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
    _check_context(model, windows, cfg.data.suffix_len)
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
        attach_segments(results["documents"], extracted, records, lambda ids: _decode(tokenizer, ids))
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
