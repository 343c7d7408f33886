"""Memory and time of the Goldfish loss from whole logits vs chunked cross-entropy (``loss.ce_chunk_tokens``).

    python benchmarks/ce_memory.py [--tokens 8192] [--hidden 576] [--vocabs 49152 32000] [--chunk 2048]

For each vocabulary, two fresh child processes run forward + backward of the Goldfish loss over ``--tokens`` tokens
from final hidden states (B=1, fp32, CPU): ``full`` applies ``lm_head`` and :func:`goldfish.loss.goldfish_loss` to the
(tokens, vocab) logits, ``chunked`` passes ``head=`` (the logits exist one chunk at a time). Reported: the bytes
autograd keeps from forward to backward, the process's peak resident memory (``ru_maxrss``) and the wall time;
the difference of the peaks is the memory the chunking saves. Defaults: one 4 × 2048-token micro-batch of
SmolLM2-135M's shape (hidden 576, vocab 49152). Measured on the 2-core dev machine: peak 4979 -> 1746 MiB (vocab
49152) and 3334 -> 1269 MiB (32000), same loss; ~1.1-1.3x the time. Each chunk's weight gradient is a transient
(vocab, hidden) tensor, so the saving needs tokens per micro-batch well above the hidden size (at 2048 tokens and
hidden 2048 the peaks are equal).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch
from torch import nn


def run_arm(arm: str, tokens: int, hidden: int, vocab: int, chunk: int) -> dict:
    """Forward + backward of one arm in this process; its saved-tensor bytes, peak RSS and wall time."""
    from goldfish.loss import goldfish_loss
    from goldfish.masks import GoldfishConfig

    torch.manual_seed(0)
    h = torch.randn(1, tokens, hidden, requires_grad=True)
    head = nn.Linear(hidden, vocab, bias=False)
    labels = torch.randint(0, vocab, (1, tokens))
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    start = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if arm == "full":
            out = goldfish_loss(head(h), labels, GoldfishConfig())
        else:
            out = goldfish_loss(h, labels, GoldfishConfig(), head=head, chunk_tokens=chunk)
    out.loss.backward()
    return {
        "arm": arm,
        "vocab": vocab,
        "saved_mib": saved / 2**20,
        "seconds": time.perf_counter() - start,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "loss": float(out.loss),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--vocabs", type=int, nargs="+", default=[49152, 32000])
    ap.add_argument("--chunk", type=int, default=2048)
    ap.add_argument("--arm", choices=["full", "chunked"], help=argparse.SUPPRESS)  # child process
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(run_arm(args.arm, args.tokens, args.hidden, args.vocabs[0], args.chunk)))
        return 0
    rows = []
    print(f"{args.tokens} tokens, hidden {args.hidden}, fp32, chunk {args.chunk}")
    print(f"{'vocab':>6} {'arm':<8} {'kept for backward':>18} {'peak RSS':>10} {'seconds':>8}  loss")
    for vocab in args.vocabs:
        for arm in ("full", "chunked"):
            child = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--arm",
                    arm,
                    "--tokens",
                    str(args.tokens),
                    "--hidden",
                    str(args.hidden),
                    "--vocabs",
                    str(vocab),
                    "--chunk",
                    str(args.chunk),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(child.stdout.strip().splitlines()[-1])
            rows.append(r)
            print(
                f"{vocab:>6} {arm:<8} {r['saved_mib']:>14.0f} MiB {r['peak_rss_mib']:>6.0f} MiB "
                f"{r['seconds']:>8.2f}  {r['loss']:.6f}",
                flush=True,
            )
        full, chunked = rows[-2], rows[-1]
        print(
            f"{vocab:>6} saved: {full['peak_rss_mib'] - chunked['peak_rss_mib']:.0f} MiB peak, "
            f"{full['saved_mib'] - chunked['saved_mib']:.0f} MiB kept for backward "
            f"(fp32 logits alone: {args.tokens * vocab * 4 / 2**20:.0f} MiB)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
