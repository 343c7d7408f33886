"""bf16 training throughput (tokens/s) and MFU of a ~1.1 B Llama (TinyLlama shape) on ONE CUDA GPU: native vs axonn.

    python benchmarks/gpu_throughput.py [--seq 2048] [--micro-rows 4] [--accum 2] [--steps 8] [--peak-tflops T]
                                        [--json out.json]

Both engines train the same model (``goldfish.models`` size ``tinyllama-1.1B``: hidden 2048, 22 layers, 32 heads,
4 KV heads, vocab 32000; random init, fp32 master weights, bf16 autocast, SDPA attention) on the same random batches
with the Goldfish loss, AdamW and clipping, through the ``Engine`` seam the trainer uses. On one GPU AxoNN's grid is
1×1×1, so its number is the overhead of its Linear layers and collectives over plain PyTorch, not a speed-up.

MFU = tokens/s × FLOPs per token (``goldfish.models.flops_per_token``: 6·N + 12·L·H·T) / peak; the peak is the
device's vendor dense peak in the run's precision, looked up by its name (``goldfish.hardware.GPUS``; an unknown GPU
gets no MFU) unless ``--peak-tflops`` gives one. Fails at once, with a one-line message, when CUDA is absent.
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
from synthetic import goldfish_batches  # benchmarks/synthetic.py (the script folder is on sys.path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_engine(name: str, args: argparse.Namespace, options: dict | None = None, label: str | None = None) -> dict:
    """Build engine ``name`` (with TrainConfig ``options``, e.g. ``{"compile": True}``), time ``args.steps``
    optimizer steps after ``args.warmup`` untimed ones; returns the numbers. Runs where the engine puts the model
    (the GPU when CUDA is present, else the CPU: the smoke path of benchmarks/gpu_check.py)."""
    from goldfish.engines import get_engine
    from goldfish.loss import EngineLoss
    from goldfish.models import build_model, flops_per_token
    from goldfish.perf import MfuMeter
    from goldfish.train import build_optimizer
    from goldfish.train_config import ModelConfig, OptimConfig, TrainConfig

    model_cfg = ModelConfig(name=args.model)
    cfg = TrainConfig(engine=name, precision=args.precision, model=model_cfg, **(options or {}))
    engine = get_engine(cfg, EngineLoss(cfg.loss.ce_chunk_tokens))  # the trainer's seam: section, precision, loss
    built = {}

    def build():
        built["model"] = build_model(model_cfg, args.vocab, seed=0)
        return built["model"]

    optim = OptimConfig(lr=1e-4)
    engine.setup(build, lambda p: build_optimizer(p, optim))  # the trainer's AdamW (fused where it can be)
    flops = flops_per_token(built.pop("model"), args.seq)
    micro = goldfish_batches(args.accum, args.micro_rows, args.seq, args.vocab)  # one step's micro-batches, reused
    tokens = args.accum * args.micro_rows * args.seq
    normalizer = sum(int((~b["drop_mask"][:, 1:]).sum()) for b in micro)  # every target is supervised
    device = engine.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(args.warmup + args.steps):
        _sync(device)
        start = time.perf_counter()
        stats = engine.forward_backward(micro, normalizer)
        engine.optimizer_step(1e-4, 1.0)
        _sync(device)
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    if args.peak_tflops:  # a peak given by hand
        mfu, peak_source = tokens / step_s * flops / (args.peak_tflops * 1e12), f"--peak-tflops {args.peak_tflops}"
    else:  # the vendor peak of the device by name (CPU: measured), never above 100 % (goldfish.perf)
        meter = MfuMeter(flops, args.precision, device)
        mfu, peak_source = meter.mfu(tokens / step_s), meter.unavailable or meter.peak_source
    result = {
        "engine": label or name,
        "step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "mfu": mfu,
        "mfu_peak": peak_source,
        "flops_per_token": flops,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None,
        "last_kept_loss": stats.kept_loss,
        "all_step_s": times,
        "options": {k: str(v) for k, v in (options or {}).items()},
    }
    engine.close()
    del engine
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tinyllama-1.1B", help="size from goldfish.sizes.SIZES")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq", type=int, default=2048, help="tokens per row")
    p.add_argument("--micro-rows", type=int, default=4, help="rows per forward pass")
    p.add_argument("--accum", type=int, default=2, help="micro-batches per optimizer step")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per engine")
    p.add_argument("--steps", type=int, default=8, help="timed steps per engine")
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="divide MFU by this peak instead of the device's vendor peak (goldfish.hardware.GPUS)",
    )
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"], help="bf16 autocast or plain fp32")
    p.add_argument("--engines", nargs="*", default=["native", "axonn"])
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print(
            "error: benchmarks/gpu_throughput.py needs a CUDA GPU (torch.cuda.is_available() is False); "
            "run it on a GPU machine with a CUDA build of torch",
            file=sys.stderr,
        )
        return 2
    # one process, no torchrun: the engines read these (AxoNN needs a process group even for one GPU)
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    torch.backends.cuda.matmul.allow_tf32 = True
    print(
        f"{torch.cuda.get_device_name()}, {args.model}, {args.accum}×{args.micro_rows} rows × {args.seq} tokens "
        f"per step, {args.precision}"
    )
    print(f"{'engine':<8} {'ms/step':>9} {'tokens/s':>10} {'MFU':>7} {'peak GiB':>9}")
    results = []
    for name in args.engines:
        r = run_engine(name, args)
        results.append(r)
        mfu = f"{r['mfu']:>6.1%}" if r["mfu"] is not None else f"{'n/a':>6}"
        print(
            f"{name:<8} {r['step_s'] * 1e3:>9.1f} {r['tokens_per_s']:>10.0f} {mfu} "
            f"{r['peak_memory_gib']:>9.1f}   ({r['mfu_peak']})",
            flush=True,
        )
    if len(results) == 2:
        print(f"axonn / native tokens/s: {results[1]['tokens_per_s'] / results[0]['tokens_per_s']:.3f}")
    if args.json:
        from goldfish.io import atomic_write_json

        atomic_write_json(
            args.json,
            {
                "device": torch.cuda.get_device_name(),
                "torch": torch.__version__,
                "args": {k: str(v) for k, v in vars(args).items()},
                "results": results,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
