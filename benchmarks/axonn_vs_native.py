"""Per-step time of ``engine: axonn`` layouts vs the native engine at the same world size (CPU, gloo, fp32).

    python benchmarks/axonn_vs_native.py [--world 2] [--model llama-10M] [--steps 6] [--json out.json]

For each AxoNN layout of the chosen world size (world 2: R2, C2, D2; world 4: R2×data2, D2×data2, R2×C2, C2×D2) one
set of gloo processes builds *both* engines on the same model (``goldfish.models`` size table, random init) and
alternates their optimizer steps on the same global batches (Goldfish loss, AdamW, clipping): native (DDP over the
whole world), then AxoNN, then native again ... so both see the same machine load, and the ratio of their median
step times is measured side by side. The first two steps of each engine are warm-up and are not timed.

On CPU this measures the cost of AxoNN's communication pattern (all-to-alls around every Linear, weight all-gathers
and reduce-scatters over depth), not its benefit: one gloo process per core has no memory pressure to relieve and no
fast interconnect. Reference numbers (axonn / native step time) on the 2-core dev machine shared with other jobs
(load ~10), llama-10M, 8 rows × 256 tokens per step: world 2 -- R2 1.34x, C2 1.52x, D2 1.65x (native ≈ 2.2-2.8 s);
world 4 (4 processes on 2 cores) -- R2×data2 1.46x, D2×data2 1.16x, R2×C2 1.42x, C2×D2 1.27x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from synthetic import goldfish_batches  # benchmarks/synthetic.py (the script folder is on sys.path)

LAYOUTS = {
    2: {"R2": (2, 1, 1), "C2": (1, 2, 1), "D2": (1, 1, 2)},
    4: {"R2×data2": (2, 1, 1), "D2×data2": (1, 1, 2), "R2×C2": (2, 2, 1), "C2×D2": (1, 2, 2)},
}


def _step(engine, batch: dict[str, torch.Tensor], micro_rows: int) -> float:
    """One timed optimizer step on this rank's rows; returns seconds (ranks synchronised before and after)."""
    rows = batch["input_ids"].shape[0] // engine.dp_size
    mine = {k: v[engine.dp_rank * rows : (engine.dp_rank + 1) * rows] for k, v in batch.items()}
    micro = [{k: v[s : s + micro_rows] for k, v in mine.items()} for s in range(0, rows, micro_rows)]
    normalizer = int(((batch["labels"][:, 1:] != -100) & ~batch["drop_mask"][:, 1:]).sum())
    dist.barrier()
    start = time.perf_counter()
    engine.forward_backward(micro, normalizer)
    engine.optimizer_step(1e-3, 1.0)
    dist.barrier()
    return time.perf_counter() - start


def _worker(rank: int, world: int, folder: str, args: argparse.Namespace, grid: tuple[int, int, int]) -> None:
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world)
    from goldfish.engines.axonn import AxonnEngine
    from goldfish.engines.native import NativeEngine
    from goldfish.loss import EngineLoss
    from goldfish.models import build_model
    from goldfish.train_config import AxonnConfig, ModelConfig, ParallelConfig

    model_cfg = ModelConfig(name=args.model)
    engines = {}
    for name, engine_cls, section in (
        ("native", NativeEngine, ParallelConfig()),
        ("axonn", AxonnEngine, AxonnConfig(row=grid[0], col=grid[1], depth=grid[2])),
    ):
        engine = engine_cls(section, "fp32", EngineLoss())
        engine.setup(lambda: build_model(model_cfg, args.vocab, seed=0), lambda p: torch.optim.AdamW(p, lr=1e-3))
        engines[name] = engine
    times: dict[str, list[float]] = {name: [] for name in engines}
    for batch in goldfish_batches(args.steps + 2, args.rows, args.seq, args.vocab):
        for name, engine in engines.items():
            times[name].append(_step(engine, batch, args.micro_rows))
    if rank == 0:
        torch.save({name: t[2:] for name, t in times.items()}, Path(folder) / "times.pt")
    dist.destroy_process_group()


def measure(args: argparse.Namespace, grid: tuple[int, int, int]) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="goldfish-bench-") as folder:
        mp.start_processes(_worker, args=(args.world, folder, args, grid), nprocs=args.world, start_method="spawn")
        return torch.load(Path(folder) / "times.pt", weights_only=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=2, choices=sorted(LAYOUTS), help="processes (one gloo rank each)")
    p.add_argument("--model", default="llama-10M", help="size from goldfish.sizes.SIZES")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--seq", type=int, default=256, help="tokens per row")
    p.add_argument("--rows", type=int, default=8, help="rows per global batch (divisible by world * micro-rows)")
    p.add_argument("--micro-rows", type=int, default=2, help="rows per micro-batch on one rank")
    p.add_argument("--steps", type=int, default=6, help="timed steps per engine (after 2 warm-up steps)")
    p.add_argument("--layouts", nargs="*", help="subset of the layouts (default: all of the world size)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args()
    if args.rows % (args.world * args.micro_rows):
        p.error(f"--rows {args.rows} must be divisible by world {args.world} × micro-rows {args.micro_rows}")
    layouts = {k: v for k, v in LAYOUTS[args.world].items() if not args.layouts or k in args.layouts}
    results = []
    print(f"{args.model}, {args.rows} rows × {args.seq} tokens per step, world {args.world} (gloo, 1 thread each)")
    print(f"{'layout':<10} {'native ms/step':>15} {'axonn ms/step':>14} {'axonn / native':>15}")
    for name, grid in layouts.items():
        times = measure(args, grid)
        native, axonn = statistics.median(times["native"]), statistics.median(times["axonn"])
        results.append(
            {
                "layout": name,
                "row": grid[0],
                "col": grid[1],
                "depth": grid[2],
                "data": args.world // (grid[0] * grid[1] * grid[2]),
                "native_s": native,
                "axonn_s": axonn,
                "ratio": axonn / native,
                "native_all_s": times["native"],
                "axonn_all_s": times["axonn"],
            }
        )
        print(f"{name:<10} {native * 1e3:>15.1f} {axonn * 1e3:>14.1f} {axonn / native:>14.2f}x", flush=True)
    if args.json:
        from goldfish.io import atomic_write_json

        atomic_write_json(args.json, {"args": {k: str(v) for k, v in vars(args).items()}, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
