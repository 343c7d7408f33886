"""Extraction speed: this toolkit's eval vs the batch-1 ``generate`` loop of the published Goldfish eval.

    python benchmarks/eval_speed.py [--windows 32] [--batch-size 32] [--dtype float32|bfloat16] [--device cpu|cuda]

One run, same model (a randomly initialised ~10 M-parameter Llama: hidden 384, 6 layers, vocab 4096), same windows
(P=32 prefix tokens, S=50 suffix tokens), measured side by side:

1. ``batch-1 generate``: ``model.generate(prefix, do_sample=False, max_new_tokens=S, min_new_tokens=S)`` per window
   (eos disabled), the baseline;
2. ``batched generate``: :func:`goldfish.eval.generate.generate`, left-padded KV-cached greedy decoding in batches;
3. ``one pass``: :func:`goldfish.eval.extraction.onepass`, one teacher-forced forward pass per batch (the exact-match
   verdict, extraction strength and suffix log-prob without decoding).

Half of the windows have the model's own greedy continuation as their "true" suffix (so greedy extraction succeeds
on them) and half a random suffix, so verdict agreement is tested on both outcomes. Checks: batched tokens ==
batch-1 tokens for every window, one-pass verdicts == generated verdicts. Targets: (2 or 3) >= 20x the baseline,
(3) >= 2x (2). Reference numbers on the 2-core dev machine: batch-1 ≈ 6 windows/s, batched ≈ 60, one pass ≈ 160.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from goldfish.eval.extraction import onepass
from goldfish.eval.generate import eos_disabled, generate


def build_model(device: str, dtype: torch.dtype = torch.float32, seed: int = 0):
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=4096,
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=6,
        num_key_value_heads=6,
        intermediate_size=1024,
        tie_word_embeddings=True,
        max_position_embeddings=2048,
        bos_token_id=None,
        eos_token_id=0,
        pad_token_id=0,
    )
    return LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()


def batch1_loop(model, prefixes, s: int) -> list[list[int]]:
    """What the published eval does: one ``generate`` call per window."""
    cfg = GenerationConfig(do_sample=False, max_new_tokens=s, min_new_tokens=s, pad_token_id=0)
    device = next(model.parameters()).device
    outs = []
    with eos_disabled(model), torch.inference_mode():
        for p in prefixes:
            ids = torch.tensor([p], device=device)
            outs.append(
                model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=cfg)[0, len(p) :].tolist()
            )
    return outs


def timed(fn):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - t


def measure(model, n: int, prefix_len: int, s: int, batch_size: int) -> dict:
    """The three methods on ``n`` windows of ``model`` (vocab 4096), side by side; the numbers of one run."""
    g = torch.Generator().manual_seed(1)
    prefixes = torch.randint(1, 4096, (n, prefix_len), generator=g).tolist()
    generate(model, prefixes[:2], 4, batch_size=2, progress=False)  # warm-up (allocator, kernels)

    base_out, t_base = timed(lambda: batch1_loop(model, prefixes, s))
    suffixes = [o if i % 2 == 0 else torch.randint(1, 4096, (s,), generator=g).tolist() for i, o in enumerate(base_out)]
    ours, t_gen = timed(lambda: generate(model, prefixes, s, batch_size=batch_size, progress=False))
    one, t_one = timed(lambda: onepass(model, prefixes, suffixes, batch_size=batch_size, progress=False))
    gen_verdict = [o == x for o, x in zip(ours, suffixes)]
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "windows": n,
        "prefix_len": prefix_len,
        "suffix_len": s,
        "batch_size": batch_size,
        "windows_per_s": {"batch1_generate": n / t_base, "batched_generate": n / t_gen, "onepass": n / t_one},
        "speedup_vs_batch1": {"batched_generate": t_base / t_gen, "onepass": t_base / t_one},
        "onepass_vs_batched": t_gen / t_one,
        "identical_tokens": sum(a == b for a, b in zip(ours, base_out)),
        "identical_verdicts": sum(r["onepass_exact"] == v for r, v in zip(one, gen_verdict)),
        "extractable": sum(gen_verdict),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--prefix-len", type=int, default=32)
    ap.add_argument("--suffix-len", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="weights and compute of all three methods (bf16 matmuls are ~4x faster on AMX CPUs)",
    )
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = build_model(args.device, getattr(torch, args.dtype))
    r = measure(model, args.windows, args.prefix_len, args.suffix_len, args.batch_size)
    n, rate, speedup = r["windows"], r["windows_per_s"], r["speedup_vs_batch1"]
    print(
        f"model: Llama {r['params'] / 1e6:.1f} M params on {args.device}; {n} windows, P={args.prefix_len}, "
        f"S={args.suffix_len}; {args.dtype}; torch threads {torch.get_num_threads()}"
    )
    print(f"{'method':<32} {'windows/s':>10} {'vs batch-1':>11}")
    print(f"{'batch-1 generate (baseline)':<32} {rate['batch1_generate']:>10.1f} {1.0:>10.1f}x")
    print(
        f"{f'batched generate (bs {args.batch_size})':<32} {rate['batched_generate']:>10.1f} "
        f"{speedup['batched_generate']:>10.1f}x"
    )
    print(f"{f'one pass (bs {args.batch_size})':<32} {rate['onepass']:>10.1f} {speedup['onepass']:>10.1f}x")
    print(f"one pass vs batched generate: {r['onepass_vs_batched']:.1f}x faster (target >= 2x)")
    print(
        f"batched == batch-1 tokens: {r['identical_tokens']}/{n} windows; one-pass == generated verdicts: "
        f"{r['identical_verdicts']}/{n} ({r['extractable']} extractable windows)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"device": args.device, "dtype": args.dtype, "threads": torch.get_num_threads(), **r}, f, indent=2
            )


if __name__ == "__main__":
    main()
