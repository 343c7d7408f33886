"""The extraction task of ``goldfish eval`` (:mod:`goldfish.eval.run`): its windows (:func:`extraction_windows`)
and their records, each window's greedy continuation, one teacher-forced pass (:mod:`goldfish.eval.extraction`),
beam / samples / the mask-consistent adversary when asked, and its metrics (:func:`evaluate_chunk`); computed in chunks
of :data:`CHUNK` windows appended to the partial file as they finish, so a killed evaluation resumes where it stopped
(:func:`evaluate_windows`)."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Sequence

from tqdm.auto import tqdm

from goldfish.errors import UserError
from goldfish.io import JsonlLogger

from . import adversary, extraction
from .config import EvalConfig
from .generate import beam_generate, generate
from .heartbeat import for_shard, label
from .loading import pad_id_of
from .metrics import compute_metrics
from .scoring import context_length
from .shard import current
from .state import WINDOWS_PARTIAL, read_windows
from .windows import Window, build_windows

log = logging.getLogger(__name__)

CHUNK = 256  # windows per resumable unit


def extraction_windows(cfg: EvalConfig, splits: dict) -> tuple[list[Window], int]:
    if "extraction" not in cfg.tasks:
        return [], 0
    d = cfg.data
    to_extract = [doc for split in d.extract_splits for doc in splits.get(split, [])]
    if not to_extract:
        raise UserError(
            f"no documents in data.extract_splits={d.extract_splits}; available splits: {', '.join(splits)}"
        )
    return build_windows(to_extract, d.prefix_lens, d.suffix_len, d.window, d.stride, d.offsets, d.max_offset)


def check_context(model, windows: Sequence[Window], suffix_len: int) -> None:
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
        for_shard(
            shard,
            "extraction",
            lambda: len(done) + decoded[0],
            total=len(windows),
            unit="windows",
            label=label(cfg.out),
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
        gen_text, truth_text = decode(tokenizer, gen), decode(tokenizer, w.suffix)
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


def decode(tokenizer, ids: Sequence[int]) -> str:
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
