"""Where a training step's time goes: native vs AxoNN (grid 1×1×1) in one process, under ``torch.profiler``.

    python benchmarks/profile_engines.py [--model llama-10M] [--seq 256] [--micro-rows 4] [--steps 3] [--top 12]

Both engines train the same model on the same Goldfish batches through the trainer's engine seam and AdamW (see
benchmarks/gpu_throughput.py). For each engine: the median step time, then the ``--top`` operators by self time
(CPU, and CUDA when present) with their call counts. Collectives (``c10d::``, ``nccl:``/``gloo:``), copies
(``aten::copy_``, ``aten::cat``) and device-to-host syncs (``aten::item``, ``aten::_local_scalar_dense``) that scale
with the number of Linear layers are AxoNN overhead that a 1×1×1 grid should not pay.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from synthetic import goldfish_batches  # benchmarks/synthetic.py (the script folder is on sys.path)


def profile_engine(name: str, args: argparse.Namespace) -> tuple[float, str]:
    """(median step seconds, profiler table) of ``args.steps`` steps after two warm-up steps."""
    from goldfish.engines import get_engine
    from goldfish.loss import EngineLoss
    from goldfish.models import build_model
    from goldfish.train import build_optimizer
    from goldfish.train_config import ModelConfig, OptimConfig, TrainConfig

    model_cfg = ModelConfig(name=args.model)
    engine = get_engine(TrainConfig(engine=name, model=model_cfg, precision=args.precision), EngineLoss())
    engine.setup(lambda: build_model(model_cfg, args.vocab, seed=0), lambda p: build_optimizer(p, OptimConfig()))
    micro = goldfish_batches(2, args.micro_rows, args.seq, args.vocab)
    normalizer = sum(int((~b["drop_mask"][:, 1:]).sum()) for b in micro)
    cuda = engine.device.type == "cuda"

    def step() -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        engine.forward_backward(micro, normalizer)
        engine.optimizer_step(1e-4, 1.0)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    step(), step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        times = [step() for _ in range(args.steps)]
    engine.close()
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    return statistics.median(times), prof.key_averages().table(sort_by=sort, row_limit=args.top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-10M", help="size from goldfish.models.SIZES")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--micro-rows", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3, help="profiled steps per engine")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--top", type=int, default=12, help="operators listed per engine")
    args = ap.parse_args()
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    medians = {}
    for name in ("native", "axonn"):
        medians[name], table = profile_engine(name, args)
        print(f"== {name}: {medians[name] * 1e3:.1f} ms/step (median of {args.steps})\n{table}", flush=True)
    print(f"axonn / native step time: {medians['axonn'] / medians['native']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
