"""How much a shorter scoring context changes per-token losses and membership scores, and what each setting costs.

    python benchmarks/long_scoring.py [--docs 6] [--tokens 8192] [--settings full 2048:1536 1024:768 512:384]
                                      [--threads 2] [--json long_scoring.json]

Membership inference scores a whole document teacher-forced (:mod:`goldfish.eval.scoring`); a document longer than
the scoring window is cut into windows of W tokens advancing by S, so every token is scored once with at least W - S
tokens of context. At ``full`` (one window of the model's whole context, 8,192 tokens for SmolLM2) the attention cost
grows with the square of the length; with a fixed W the cost per token is constant. This benchmark measures, on the
``--docs`` first Wikipedia articles of the gensim wheel that have at least ``--tokens`` tokens of SmolLM2's tokenizer
(cut to ``--tokens``), with the bundled SmolLM2-135M (GGUF, dequantised to fp32, CPU):

* per setting W:S, the scored tokens per second of one pass (Min-K%++ statistics included, as membership's target
  pass computes them), by the wall clock and per CPU-second of this process (the figure that survives a machine
  shared with other jobs; with ``--threads 1`` it is the single-core rate);
* against ``full``: the mean |Δ log p| over all tokens and over the tokens whose context the window cuts (position
  >= W); the largest change of a document's LOSS, Min-K% 20 % and Min-K%++ 20 % score; and the fraction of document
  pairs whose score order flips -- a bound on how far any member/nonmember AUC over these documents can move
  (|ΔAUC| <= the discordant fraction of member-nonmember pairs);
* the lowercase attack (the one attack that scores a second text) over the whole document against the same ratio
  over the first ``--lowercase`` tokens only (``membership.lowercase_tokens``), both at ``--lowercase-setting``: the
  largest score change and the discordant pairs.

Run it as a CPU without native bf16 sees it: ``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``. The numbers behind
the default ``membership.window`` are in docs/evaluation.md ("what a long-document eval costs on a CPU").
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import subprocess
import sys
import time

import numpy as np
import torch


def cpu_model() -> str:
    """The CPU's model name as lscpu reports it (the processor string elsewhere)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.SubprocessError, StopIteration):
        return platform.processor() or "unknown"


def articles(n: int, tokens: int, tokenizer) -> list[tuple[str, list[int]]]:
    """(title, first ``tokens`` ids) of the first ``n`` gensim Wikipedia articles with at least that many tokens."""
    from goldfish.data import load_documents
    from goldfish.data.config import SourceConfig

    out = []
    for doc in load_documents(SourceConfig(name="wikipedia")):
        ids = tokenizer.encode(doc.text, add_special_tokens=False)
        if len(ids) >= tokens:
            out.append((doc.title, ids[:tokens]))
            if len(out) == n:
                break
    return out


def score(model, docs: list[list[int]], window: int | None, stride: int | None) -> tuple[list, float, float]:
    """Per-document TokenStats of one setting (with Min-K%++ z), and the wall and CPU seconds (this process, all its
    threads) the pass took: on a machine shared with other jobs the CPU time is the load-independent cost."""
    from goldfish.eval.scoring import token_statistics

    start, cpu = time.perf_counter(), time.process_time()
    stats = token_statistics(model, docs, window=window, stride=stride, want_pp=True, progress=False)
    return stats, time.perf_counter() - start, time.process_time() - cpu


def doc_scores(stats) -> dict[str, np.ndarray]:
    """The membership scores of each document (members score higher): LOSS, Min-K% and Min-K%++ at 20 %."""
    from goldfish.eval.membership import lowest_k_mean

    return {
        "loss": np.array([st.logp.mean() for st in stats]),
        "min_k_20": np.array([lowest_k_mean(st.logp, 0.2) for st in stats]),
        "min_k_pp_20": np.array([lowest_k_mean(st.z, 0.2) for st in stats]),
    }


def discordant(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of document pairs ordered differently by two scorings."""
    pairs = list(itertools.combinations(range(len(a)), 2))
    flips = sum((a[i] - a[j]) * (b[i] - b[j]) < 0 for i, j in pairs)
    return flips / len(pairs) if pairs else 0.0


def compare(full, stats, window: int) -> dict:
    """Changes of the per-token log-probs and the document scores of one setting against ``full``."""
    delta = [np.abs(s.logp - f.logp) for s, f in zip(stats, full)]
    cut = [d[window - 1 :] for d in delta]  # targets t >= window (index t - 1) have less context than in full
    ref, got = doc_scores(full), doc_scores(stats)
    return {
        "mean_abs_dlogp": float(np.concatenate(delta).mean()),
        "mean_abs_dlogp_cut": float(np.concatenate(cut).mean()) if any(len(c) for c in cut) else 0.0,
        "max_abs_dscore": {k: float(np.abs(got[k] - ref[k]).max()) for k in ref},
        "score_spread": {k: float(ref[k].max() - ref[k].min()) for k in ref},
        "discordant_pairs": {k: discordant(ref[k], got[k]) for k in ref},
    }


def lowercase_scores(
    model, docs: list[list[int]], logp: list[np.ndarray], tokenizer, head: int | None, window: int, stride: int
) -> np.ndarray:
    """The lowercase attack, -NLL(text) / NLL(lowercased text), over the first ``head`` tokens (None: all)."""
    from goldfish.eval.membership import lowercase_docs
    from goldfish.eval.scoring import token_statistics

    heads = [d[:head] if head else d for d in docs]
    lowered = lowercase_docs(heads, [tokenizer.decode(d, skip_special_tokens=True) for d in heads], tokenizer)
    lower = token_statistics(model, lowered, window=window, stride=stride, progress=False)
    return np.array([lp[: len(h) - 1].mean() / -st.logp.mean() for lp, h, st in zip(logp, heads, lower)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=8192, help="tokens per article (SmolLM2's context: 8192)")
    ap.add_argument(
        "--settings",
        nargs="+",
        default=["full", "2048:1536", "1024:768", "512:384"],
        help="full, or W:S (window, stride)",
    )
    ap.add_argument(
        "--lowercase",
        type=int,
        nargs="*",
        default=[1024],
        help="lowercase-attack bounds to compare with the whole document",
    )
    ap.add_argument("--lowercase-setting", default="2048:1536", help="W:S the lowercase comparison is scored at")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write every number here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from goldfish.eval.loading import load_model, load_model_tokenizer
    from goldfish.experiment.config import resolve_base_model

    gguf = resolve_base_model("smollm2")
    tokenizer = load_model_tokenizer(gguf)
    model = load_model(gguf, "fp32", "cpu")
    chosen = articles(args.docs, args.tokens, tokenizer)
    docs = [ids for _, ids in chosen]
    result = {
        "cpu": cpu_model(),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": args.threads,
        "torch": torch.__version__,
        "articles": [t for t, _ in chosen],
        "tokens_per_doc": args.tokens,
        "settings": {},
    }
    full, seen = None, {}
    for setting in ["full"] + [s for s in args.settings if s != "full"]:
        window, stride = (None, None) if setting == "full" else map(int, setting.split(":"))
        stats, seconds, cpu = score(model, docs, window, stride)
        seen[setting] = stats
        tokens = sum(len(d) - 1 for d in docs)
        row = {
            "seconds": seconds,
            "cpu_seconds": cpu,
            "tokens_per_s": tokens / seconds,
            "tokens_per_cpu_s": tokens / cpu,
        }
        if full is None:
            full = stats
        else:
            row.update(compare(full, stats, window))
        result["settings"][setting] = row
        print(
            f"{setting:>10}  {row['tokens_per_s']:7.1f} tok/s, {row['tokens_per_cpu_s']:7.1f} tok/CPU-s"
            + (
                f"  mean|dlogp| {row['mean_abs_dlogp']:.4f} (cut {row['mean_abs_dlogp_cut']:.4f})  "
                f"max|dLOSS| {row['max_abs_dscore']['loss']:.4f} of spread {row['score_spread']['loss']:.3f}  "
                f"discordant {row['discordant_pairs']}"
                if setting != "full"
                else ""
            ),
            flush=True,
        )
        if args.json:  # after every setting: a long run killed midway keeps what it measured
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=2)
    if args.lowercase:
        window, stride = map(int, args.lowercase_setting.split(":"))
        stats = seen.get(args.lowercase_setting) or score(model, docs, window, stride)[0]
        logp = [st.logp for st in stats]
        whole = lowercase_scores(model, docs, logp, tokenizer, None, window, stride)
        result["lowercase"] = {"setting": args.lowercase_setting, "bounds": {}}
        for head in args.lowercase:
            got = lowercase_scores(model, docs, logp, tokenizer, head, window, stride)
            row = {
                "max_abs_dscore": float(np.abs(got - whole).max()),
                "score_spread": float(whole.max() - whole.min()),
                "discordant_pairs": discordant(whole, got),
            }
            result["lowercase"]["bounds"][str(head)] = row
            print(
                f"lowercase first {head} tokens vs whole: max|dscore| {row['max_abs_dscore']:.4f} of spread "
                f"{row['score_spread']:.3f}, discordant {row['discordant_pairs']:.3f}",
                flush=True,
            )
    print(
        f"{result['cpu']} ({result['capability']}), {args.threads} threads, {len(docs)} articles x {args.tokens} tokens"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
