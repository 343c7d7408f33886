"""``run_eval(cfg)``: load -> read documents -> windows -> generate + one pass -> metrics -> membership -> files.

Results are written incrementally: each finished window is appended (one JSON line, flushed) to
``<out>/windows.partial.jsonl``, keyed by the window's sha256 (document tokens, P, S, placement, start). A rerun with
the same setup skips those windows, so a killed evaluation loses at most the chunk in flight. The first line of the
partial file records the setup (model, dtype, decoding options); a different setup in the same folder is refused
instead of silently mixing results. Final files (``results.json``, ``results.csv``, ``eval_config.yaml``,
report and plots) are written atomically; ``eval_log.jsonl`` gets one throughput record per chunk.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import torch
from tqdm.auto import tqdm

from goldfish.config import save_config, to_dict
from goldfish.errors import UserError
from goldfish.io import JsonlLogger, atomic_write_json, atomic_write_text, read_jsonl

from . import extraction
from .config import EvalConfig
from .generate import beam_generate, generate
from .inputs import load_documents
from .loading import (PICKLE_SUFFIXES, check_vocab, load_model, load_tokenizer, model_vocab_size, num_parameters,
                      pad_id_of, resolve_model_path)
from .metrics import compute_metrics
from .windows import Window, build_windows, windows_sha256

log = logging.getLogger(__name__)

SCHEMA = "goldfish-eval/1"
PARTIAL = "windows.partial.jsonl"
CHUNK = 256  # windows per resumable unit
CSV_SKIP = ("generation_ids", "truth_ids")  # lists stay in results.json only


def _versions() -> dict:
    import transformers

    import goldfish

    return {"goldfish": getattr(goldfish, "__version__", None), "torch": torch.__version__,
            "transformers": transformers.__version__}


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _require(cfg: EvalConfig) -> None:
    missing = [f"--{name}" for name in ("model", "data", "out") if not getattr(cfg, name)]
    if missing:
        raise UserError(f"missing {', '.join(missing)}: e.g. goldfish eval --model runs/demo/model "
                        f"--data data/prepared/wikipedia_demo --out runs/demo/eval")
    resolve_model_path(cfg.model)  # a wrong --model fails here, before documents are read


def _weights_stamp(cfg: EvalConfig) -> list:
    """(name, bytes, mtime) of the weight files: a retrained model at the same path is not mistaken for the old one."""
    src = resolve_model_path(cfg.model)
    files = [src.folder / src.gguf_file] if src.gguf_file else sorted(src.folder.glob("*.safetensors"))
    files += [] if src.gguf_file else sorted(f for f in src.folder.iterdir() if f.suffix in PICKLE_SUFFIXES)
    return [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]


def _fingerprint(cfg: EvalConfig) -> dict:
    """What must match for a finished window to be reused."""
    return {"model": resolve_model_path(cfg.model).describe(), "weights": _weights_stamp(cfg), "dtype": cfg.dtype,
            "beam": cfg.beam,
            "samples": cfg.samples, "temperature": cfg.temperature, "seed": cfg.seed,
            "n_samples_adversary": cfg.n_samples_adversary}


def _open_partial(out: Path, fingerprint: dict, resume: bool) -> dict[str, dict]:
    """Finished windows by sha256 (after rewriting the partial file cleanly, so appends never follow a torn line)."""
    path = out / PARTIAL
    done: dict[str, dict] = {}
    if resume and path.is_file():
        rows = read_jsonl(path)
        if rows and rows[0].get("fingerprint") not in (None, fingerprint):
            old = rows[0]["fingerprint"]
            diff = sorted(k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k))
            raise UserError(f"{path} holds windows of a different setup (differs in: {', '.join(diff)}); use another "
                            f"--out folder, or resume=false to recompute")
        done = {r["sha256"]: r for r in rows[1:] if "sha256" in r}
    lines = [json.dumps({"fingerprint": fingerprint})] + [json.dumps(r) for r in done.values()]
    atomic_write_text(path, "\n".join(lines) + "\n")
    return done


def _decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False) if tokenizer is not None else ""


def evaluate_chunk(model, tokenizer, windows: Sequence[Window], cfg: EvalConfig, pad_id: int) -> list[dict]:
    """Greedy generation + one pass (+ beam / samples) + metrics for a list of windows -> result records."""
    prefixes = [w.prefix for w in windows]
    suffixes = [w.suffix for w in windows]
    kw = dict(pad_id=pad_id, batch_size=cfg.batch_size, progress=cfg.progress)
    gens = generate(model, prefixes, cfg.suffix_len, **kw)
    onepass = extraction.onepass(model, prefixes, suffixes, **kw)
    beams = beam_generate(model, prefixes, cfg.suffix_len, cfg.beam, **kw) if cfg.beam > 1 else None
    hits = (extraction.sample_hits(model, prefixes, suffixes, cfg.samples, temperature=cfg.temperature,
                                   seed=cfg.seed, **kw) if cfg.samples else None)
    records = []
    for i, (w, gen) in enumerate(zip(windows, gens)):
        gen_text, truth_text = _decode(tokenizer, gen), _decode(tokenizer, w.suffix)
        rec = {"doc_id": w.doc.id, "title": w.doc.title, "repetitions": w.doc.repetitions, "split": w.doc.split,
               "prefix_len": w.prefix_len, "prefix_tokens": len(w.prefix), "suffix_len": w.suffix_len,
               "window": w.placement, "start": w.start}
        rec.update(compute_metrics(gen, w.suffix, gen_text, truth_text))
        rec.update(onepass[i])
        rec["np_extraction"] = extraction.np_extraction(rec["p_suffix"], cfg.n_samples_adversary)
        if beams is not None:
            rec["beam_exact_match"] = beams[i] == list(w.suffix)
            rec["beam_token_match"] = compute_metrics(beams[i], w.suffix, names=["token_match"])["token_match"]
        if hits is not None:
            rec["sample_hits"], rec["sample_rate"] = hits[i], hits[i] / cfg.samples
        rec.update({"generation": gen_text, "truth": truth_text, "generation_ids": list(gen),
                    "truth_ids": list(w.suffix), "sha256": w.key})
        records.append(rec)
    return records


def evaluate_windows(model, tokenizer, windows: Sequence[Window], cfg: EvalConfig, out: Path) -> list[dict]:
    """All window records in window order, computing only those not already in the partial file."""
    done = _open_partial(out, _fingerprint(cfg), cfg.resume)
    todo = [w for w in dict((w.key, w) for w in windows).values() if w.key not in done]
    if done:
        log.info("resuming: %d of %d windows already done", len(windows) - len(todo), len(windows))
    pad_id = pad_id_of(tokenizer)
    bar = tqdm(total=len(windows), initial=len(windows) - len(todo), desc="extraction", unit="win",
               disable=None if cfg.progress else True)
    with JsonlLogger(out / PARTIAL) as partial, JsonlLogger(out / "eval_log.jsonl") as metrics_log:
        for lo in range(0, len(todo), CHUNK):
            chunk = todo[lo : lo + CHUNK]
            t0 = time.perf_counter()
            records = evaluate_chunk(model, tokenizer, chunk, cfg, pad_id)
            seconds = time.perf_counter() - t0
            for rec in records:
                partial.log(rec)
                done[rec["sha256"]] = rec
            metrics_log.log({"event": "chunk", "windows": len(chunk), "seconds": round(seconds, 4),
                             "windows_per_s": len(chunk) / max(seconds, 1e-9),
                             "done": len(windows) - len(todo) + lo + len(chunk), "total": len(windows)})
            bar.update(len(chunk))
    bar.close()
    return [done[w.key] for w in windows]


def run_membership(model, splits: dict, cfg: EvalConfig, tokenizer) -> dict | None:
    """The ``membership`` section (members vs nonmembers, whole documents), or None without nonmembers."""
    if not cfg.membership or not splits.get("nonmembers"):
        return None
    from . import membership

    reference = load_model(cfg.reference, cfg.dtype, cfg.device, cfg.allow_pickle) if cfg.reference else None
    batch = cfg.batch_size if isinstance(cfg.batch_size, int) else 16
    kw = dict(batch_size=batch, reference_model=reference, min_k_ratios=tuple(cfg.min_k_ratios),
              tokenizer=tokenizer)
    scores = {name: membership.score_documents(model, [list(d.tokens) for d in splits[name]], **kw)
              for name in ("members", "nonmembers")}
    return membership.membership_section(scores["members"], scores["nonmembers"], n_bootstrap=cfg.n_bootstrap,
                                         seed=cfg.seed)


def write_csv(path: Path, windows: Sequence[dict]) -> None:
    """One row per window (columns = union of record keys, id lists left out), written atomically."""
    columns = [k for k in dict.fromkeys(k for w in windows for k in w) if k not in CSV_SKIP]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(windows)
    atomic_write_text(path, buf.getvalue())


def _load_tokenizer(cfg: EvalConfig):
    try:
        return load_tokenizer(cfg.model)
    except UserError as e:
        log.info("no tokenizer with the model (%s); using the data's", e)
        return None


def run_eval(cfg: EvalConfig) -> dict:
    """Evaluate ``cfg.model`` on ``cfg.data``; write results.json/.csv, report and plots into ``cfg.out``."""
    _require(cfg)
    out = Path(cfg.out)
    torch.manual_seed(cfg.seed)
    tokenizer = _load_tokenizer(cfg)
    splits, prep = load_documents(cfg.data, cfg.nonmembers, tokenizer, cfg.max_docs)
    if tokenizer is None and prep is not None:
        tokenizer = prep.tokenizer
    to_extract = [d for split in cfg.extract_splits for d in splits.get(split, [])]
    if not to_extract:
        raise UserError(f"no documents in extract_splits={cfg.extract_splits}; available splits: {', '.join(splits)}")
    windows, skipped = build_windows(to_extract, cfg.prefix_lens, cfg.suffix_len, cfg.window, cfg.stride)
    model = load_model(cfg.model, cfg.dtype, cfg.device, cfg.allow_pickle)  # after the cheap checks: fail fast
    for name, docs in splits.items():
        check_vocab(model, tokenizer, [d.tokens for d in docs], what=f"the {name} documents")
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "eval_config.yaml")
    records = evaluate_windows(model, tokenizer, windows, cfg, out)
    results = {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": _versions(),
        "git": _git_commit(),
        "config": to_dict(cfg),
        "model": {"path": resolve_model_path(cfg.model).describe(), "num_parameters": num_parameters(model),
                  "vocab_size": model_vocab_size(model), "dtype": str(next(model.parameters()).dtype)},
        "data": {"path": str(cfg.data), "members": len(splits.get("members", [])),
                 "nonmembers": len(splits.get("nonmembers", [])), "skipped_short": skipped,
                 "sha256": windows_sha256(windows)},
        "windows": records,
    }
    from .aggregate import summarize

    results["summary"] = summarize(records)
    results["membership"] = run_membership(model, splits, cfg, tokenizer)
    atomic_write_json(out / "results.json", results)
    write_csv(out / "results.csv", records)
    if cfg.report:
        from .report import write_report

        write_report(results, out)
    return results
