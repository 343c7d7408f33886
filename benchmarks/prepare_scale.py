"""The data path at scale, measured in one run: ``goldfish prepare`` with a streamed local background of 2 M, 20 M
(and, with ``--big``, ~200 M) GPT-2 tokens, by both paths side by side -- the corpus as ``background_source`` beside
Wikipedia targets (``prepare``), and the corpus as the main source, its members and nonmembers a seeded random split
and the rest its background (``prepare_main_source``, min_tokens 128) -- peak memory, bytes per training token on
disk, wall time -- and the
tokenization throughput of one shard worker against the tokenizer's own batch-encode rate, and of two workers
against one.

    python benchmarks/prepare_scale.py --json prepare_scale.json            # ~10 min on 2 cores
    python benchmarks/prepare_scale.py --big --json prepare_scale.json      # + the ~200 M-token corpus (~40 min)
    python benchmarks/prepare_scale.py --big --big-corpus data/corpus/bg200m   # ... an existing one

The corpora are written by benchmarks/make_corpus.py (English-like text, offline) into ``--work`` and kept there
for reuse. Each prepare runs as its own process (``python -m goldfish prepare``); its peak resident memory is the
largest of its own and its workers' (``getrusage``), each reported; ``first_batch_s`` is a fresh process's
``load_prepared`` (integrity checks included) and its first 16-row batch. The recipe is the paper's standard setting in
miniature: 48 Wikipedia articles (first 512 tokens) as targets x 4 and 32 as nonmembers, background chunks of 2,047
tokens + EOS in rows of 2,048, de-duplicated against the targets (13-grams, 20 %).

Throughput ratios (``tokenize`` block) are measured side by side on the same documents in this process: the
tokenizer's ``encode_batch`` on one thread vs :func:`goldfish.data.stream.make_shard` (read + tokenize + de-duplicate
+ chunk + write) on one thread, and the same without de-duplication (``share_of_worker_time``: encode, the 13-gram
check, the rest); and the background phase with 2 worker processes vs 1 on the same shards.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WRAPPER = (
    "import json, resource, sys; from goldfish.cli import main; rc = main(sys.argv[1:]); "
    "print('RUSAGE ' + json.dumps({'self_kb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
    "'workers_kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}), file=sys.stderr); sys.exit(rc)"
)


# a fresh process opening the folder (verified, from the record prepare left) and building a 16-row global batch
FIRST_BATCH = (
    "import sys, time; import numpy as np; from goldfish.data import load_prepared; "
    "t = time.perf_counter(); p = load_prepared(sys.argv[1]); b = p.train.batch(np.arange(16)); "
    "print(time.perf_counter() - t)"
)


def recipe(background: Path, main: bool = False) -> dict:
    """``main``: the corpus is the main source itself -- members and nonmembers a seeded random split of its
    documents, the rest its background -- instead of a separate ``background_source`` beside Wikipedia targets."""
    out = {
        "name": "scale",
        "source": {"name": "wikipedia"},
        "tokenizer": {"name": "gpt2"},
        "seq_len": 2048,
        "packing": "pack",
        "min_tokens": 512,
        "doc_tokens": 512,
        "num_members": 48,
        "repetitions": [4],
        "nonmember_mode": "random_split",
        "num_nonmembers": 32,
        "num_background": None,
        "background_chunk_tokens": 2047,
        "background_source": {"name": "local", "path": str(background)},
        "background_dedup": {"ngram": 13, "overlap": 0.2},
        "shard_documents": 2000,
    }
    if main:
        out.update(
            source={"name": "local", "path": str(background), "id_field": "id"}, background_source=None, min_tokens=128
        )
    return out


def corpus(work: Path, tokens: float) -> Path:
    out = work / f"corpus_{tokens / 1e6:g}M"
    if not (out / "done").is_file():
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run(
            [
                sys.executable,
                str(HERE / "make_corpus.py"),
                str(out),
                "--tokens",
                str(tokens),
                "--shard-documents",
                "5000",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (out / "done").write_text("")
    return out


def run_prepare(work: Path, background: Path, num_proc: int, main: bool = False) -> dict:
    """One ``goldfish prepare`` process: wall, peak RSS (own, workers'), folder and training-row bytes."""
    kind = "main" if main else "bg"
    rec = work / f"recipe_{background.name}_{kind}.json"
    rec.write_text(json.dumps(recipe(background, main)))
    out = work / f"prepared_{background.name}_{kind}_{num_proc}"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, "prepare", str(rec), "--out", str(out), "--num-proc", str(num_proc), "--quiet"],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"prepare failed: {proc.stderr[-2000:]}")
    usage = json.loads(next(line for line in proc.stderr.splitlines() if line.startswith("RUSAGE "))[7:])
    first = subprocess.run([sys.executable, "-c", FIRST_BATCH, str(out)], capture_output=True, text=True, check=True)
    manifest = json.loads((out / "manifest.json").read_text())
    tokens = manifest["tokens"]["train"]
    rows = sum((out / rel).stat().st_size for rel in manifest["files"] if not rel.startswith("tokenizer/"))
    folder = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    shutil.rmtree(out)
    return {
        "train_tokens": tokens,
        "wall_s": round(wall, 1),
        "peak_rss_mb": round(max(usage.values()) / 1024, 1),
        "main_rss_mb": round(usage["self_kb"] / 1024, 1),
        "worker_rss_mb": round(usage["workers_kb"] / 1024, 1),
        "rows_bytes_per_token": round(rows / tokens, 3),
        "folder_bytes_per_token": round(folder / tokens, 3),
        "tokens_per_s": round(tokens / wall),
        "first_batch_s": round(float(first.stdout.split()[-1]), 3),
    }


def tokenize_ratios(work: Path, background: Path, shards: int) -> dict:
    """Per-process throughput of a shard worker vs the tokenizer's own batch encode (one thread each), and the
    background phase on 2 workers vs 1, on the same shards."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import itertools

    from goldfish.config import from_dict
    from goldfish.data import PrepareConfig, prepare
    from goldfish.data.prepared import load_saved_tokenizer
    from goldfish.data.sources import iter_source
    from goldfish.data.stream import ShardSpec, make_shard, run_shards

    cfg = from_dict(PrepareConfig, recipe(background))
    base = work / "ratio_base"
    shutil.rmtree(base, ignore_errors=True)
    prepare(cfg, base, progress=False, shards=(0, 0 + 1), num_proc=1)  # the targets phase + one shard (warm-up)
    tok = load_saved_tokenizer(base / "tokenizer")
    n = cfg.shard_documents
    docs = [d.text for _, d in itertools.islice(iter_source(cfg.background_source, n), shards * n)]
    backend = tok.backend_tokenizer
    backend.encode_special_tokens = True
    t0 = time.perf_counter()
    count = sum(
        len(e.ids)
        for s in range(0, len(docs), 256)
        for e in backend.encode_batch(docs[s : s + 256], add_special_tokens=False)
    )
    own = time.perf_counter() - t0

    def spec(folder: Path) -> ShardSpec:
        return ShardSpec(
            str(folder),
            json.loads((base / "prepare-state.json").read_text())["fingerprint"],
            cfg.background_source,
            n,
            cfg.min_tokens,
            cfg.background_chunk_tokens,
            "uint16",
            cfg.background_dedup,
        )

    def fresh(name: str) -> Path:
        folder = work / name
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(base, folder, ignore=shutil.ignore_patterns("background"))
        return folder

    one = fresh("ratio_one")
    t0 = time.perf_counter()
    for i in range(1, shards + 1):
        make_shard(spec(one), i)
    ours = time.perf_counter() - t0
    plain = fresh("ratio_plain")  # the same shards without de-duplication: what the 13-gram check costs
    t0 = time.perf_counter()
    for i in range(1, shards + 1):
        make_shard(dataclasses.replace(spec(plain), dedup=None), i)
    undeduped = time.perf_counter() - t0
    timings = {}
    for workers in (1, 2):
        folder = fresh(f"ratio_{workers}")
        t0 = time.perf_counter()
        run_shards(spec(folder), iter(range(1, 2 * shards + 1)), workers, lambda entry: False)
        timings[workers] = time.perf_counter() - t0
    for name in ("ratio_base", "ratio_one", "ratio_plain", "ratio_1", "ratio_2"):
        shutil.rmtree(work / name, ignore_errors=True)
    return {
        "documents": len(docs),
        "tokens": count,
        "tokenizer_tokens_per_s": round(count / own),
        "worker_tokens_per_s": round(count / ours),
        "worker_vs_tokenizer": round(own / ours, 3),
        "worker_without_dedup_vs_tokenizer": round(own / undeduped, 3),
        "share_of_worker_time": {
            "encode": round(own / ours, 3),
            "dedup": round((ours - undeduped) / ours, 3),
            "read_chunk_write": round((undeduped - own) / ours, 3),
        },
        "two_vs_one_worker": round(timings[1] / timings[2], 3),
        "shards_timed": 2 * shards,
        "cpus": len(os.sched_getaffinity(0)),
        "load_1min_at_end": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "goldfish_prepare_scale")
    ap.add_argument("--big", action="store_true", help="also the ~200 M-token corpus")
    ap.add_argument(
        "--big-corpus",
        type=Path,
        default=None,
        help="an existing ~200 M-token corpus folder for --big (e.g. data/corpus/bg200m)",
    )
    ap.add_argument("--num-proc", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    sizes = [2e6, 20e6] + ([200e6] if args.big else [])
    result = {"prepare": {}, "machine": {"cpu": _cpu(), "python": sys.version.split()[0]}}
    result["prepare_main_source"] = {}
    for size in sizes:
        bg = args.big_corpus if size == 200e6 and args.big_corpus else corpus(args.work, size)
        for key, main in (("prepare", False), ("prepare_main_source", True)):  # the two paths side by side
            result[key][f"{size / 1e6:g}M"] = run_prepare(args.work, bg, args.num_proc, main)
            print(f"{key} {size / 1e6:g} M: {result[key][f'{size / 1e6:g}M']}", flush=True)
    result["tokenize"] = tokenize_ratios(args.work, corpus(args.work, 20e6), shards=2)
    small, large = result["prepare"]["2M"], result["prepare"]["20M"]
    main_small, main_large = result["prepare_main_source"]["2M"], result["prepare_main_source"]["20M"]
    result["checks"] = {
        "rss_20M_over_2M": round(large["peak_rss_mb"] / small["peak_rss_mb"], 3),
        "rss_le_1.15x": large["peak_rss_mb"] <= 1.15 * small["peak_rss_mb"],
        "main_source_rss_20M_over_2M": round(main_large["peak_rss_mb"] / main_small["peak_rss_mb"], 3),
        "main_source_rss_le_1.15x": main_large["peak_rss_mb"] <= 1.15 * main_small["peak_rss_mb"],
        "main_source_vs_background_source_wall_20M": round(main_large["wall_s"] / large["wall_s"], 3),
        "rss_le_1.5GB": max(r["peak_rss_mb"] for k in ("prepare", "prepare_main_source") for r in result[k].values())
        <= 1536,
        "rows_le_4.5_bytes_per_token": all(
            r["rows_bytes_per_token"] <= 4.5 for k in ("prepare", "prepare_main_source") for r in result[k].values()
        ),
        "worker_ge_0.8_of_tokenizer": result["tokenize"]["worker_vs_tokenizer"] >= 0.8,
        "two_workers_ge_1.7x": result["tokenize"]["two_vs_one_worker"] >= 1.7,
    }
    if args.big:
        result["checks"]["rss_200M_over_2M"] = round(result["prepare"]["200M"]["peak_rss_mb"] / small["peak_rss_mb"], 3)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def _cpu() -> str:
    from goldfish.hardware import cpu_model

    return cpu_model()


if __name__ == "__main__":
    sys.exit(main())
