"""Training speed, measured side by side in one run (a script, not a test).

1. ``goldfish train`` vs a plain Hugging Face ``Trainer``: same model, rows, batch, dtype, optimizer settings and
   model inputs (``input_ids``, ``labels``, ``position_ids``); tokens/s over the steady-state steps.   target >= 1.1x
2. Goldfish vs standard loss in ``goldfish train``: step time.                                           target <= 1.01x
3. MFU of a ~40 M-parameter Llama in the precision ``auto`` resolves to here, against the measured matmul peak
   of that precision (``goldfish.perf``).                                                             target >= 60 %
4. bf16 ÷ fp32 step time of a ~12 M-parameter Llama on this machine, beside the precision ``auto`` chose and why
   (``goldfish.hardware``: the CPU's reported features where they decide, else its own cached one-second probe of
   linear layers; never this timing).                                                                     report

Runs are interleaved (A, B, C, A, B, C ...) and summarised by medians, so a load spike from other processes on the
machine hits every arm alike. Usage::

    goldfish prepare data/wikipedia_demo.yaml
    python benchmarks/train_speed.py                     # ~3 minutes on 2 CPU cores
    python benchmarks/train_speed.py --steps 20 --rounds 3 --out runs/bench_train
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from goldfish.config import from_dict
from goldfish.io import read_jsonl
from goldfish.models import build_model, flops_per_token
from goldfish.hardware import cpu_model, native_bf16
from goldfish.perf import measure_matmul_peak, mfu
from goldfish.precision import resolve_precision
from goldfish.train import train
from goldfish.train_config import TrainConfig

WARMUP_STEPS = 2  # first steps pay for allocations and kernel selection; excluded from every arm


def ours(
    data: str,
    out: Path,
    steps: int,
    batch: int,
    precision: str,
    loss: str,
    model: str = "llama-demo",
    compile: bool = False,
) -> dict:
    """One ``goldfish train`` run; per-step times (s) of the steady-state steps."""
    cfg = from_dict(
        TrainConfig,
        {
            "data": {"path": data},
            "model": {"name": model},
            "loss": {"type": loss},
            "compile": compile,
            "optim": {"lr": 3e-3, "warmup_steps": 1},
            "precision": precision,
            "schedule": {"max_steps": steps, "global_batch_size": batch, "micro_batch_size": batch},
            "checkpoint": {"every_steps": 0, "resume": "never"},
            "out": str(out),
            "progress": False,
            "log_every": 10**6,
        },
    )
    shutil.rmtree(out, ignore_errors=True)
    run = train(cfg)
    records = read_jsonl(run / "metrics.jsonl")
    summary = json.loads((run / "summary.json").read_text())
    return {
        "times": [r["step_time"] for r in records[WARMUP_STEPS:]],
        "tokens_per_step": batch * summary["seq_len"],
        "flops_per_token": summary["flops_per_token"],
    }


def hf_trainer(data: str, out: Path, steps: int, batch: int, precision: str) -> dict:
    """The same training with ``transformers.Trainer``; per-step wall times between consecutive step ends."""
    from transformers import Trainer, TrainerCallback, TrainingArguments, default_data_collator

    from goldfish.data import load_prepared
    from goldfish.train_config import ModelConfig

    prepared = load_prepared(data)
    rows = _Columns(prepared.train, ("input_ids", "labels", "position_ids"))
    model = build_model(ModelConfig(name="llama-demo"), prepared.manifest["tokenizer"]["vocab_size"], seed=0)
    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())

    args = TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=batch,
        max_steps=steps,
        learning_rate=3e-3,
        warmup_steps=1,
        lr_scheduler_type="cosine",
        weight_decay=0.1,
        adam_beta2=0.95,
        max_grad_norm=1.0,
        bf16=precision == "bf16",
        use_cpu=True,
        logging_steps=10**6,
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
        data_seed=0,
    )
    Trainer(
        model=model, args=args, train_dataset=rows, data_collator=default_data_collator, callbacks=[Clock()]
    ).train()
    seq_len = len(rows[0]["input_ids"])
    return {
        "times": [b - a for a, b in zip(ends[WARMUP_STEPS - 1 :], ends[WARMUP_STEPS:])],
        "tokens_per_step": batch * seq_len,
        "flops_per_token": flops_per_token(model, seq_len),
    }


class _Columns(torch.utils.data.Dataset):
    """Some columns of the prepared rows (a map-style dataset of (T,) arrays): what the model's forward takes."""

    def __init__(self, rows, columns: tuple[str, ...]):
        self.rows, self.columns = rows, columns

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        row = self.rows[i]
        return {k: row[k] for k in self.columns}


def median_tokens_per_s(runs: list[dict]) -> float:
    times = [t for r in runs for t in r["times"]]
    return runs[0]["tokens_per_step"] / statistics.median(times)


def best_tokens_per_s(runs: list[dict]) -> float:
    """Tokens/s of the fastest step: other processes only ever add time, so the minimum estimates an idle machine."""
    return runs[0]["tokens_per_step"] / min(t for r in runs for t in r["times"])


def ratio_summary(numerator: list[dict], denominator: list[dict]) -> dict:
    """Per-round ratios of median tokens/s (adjacent runs share the machine's load), summarised by their median,
    and the ratio of the fastest steps over all rounds (robust on a shared machine)."""
    ratios = [median_tokens_per_s([a]) / median_tokens_per_s([b]) for a, b in zip(numerator, denominator)]
    return {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "rounds": ratios,
        "best_step": best_tokens_per_s(numerator) / best_tokens_per_s(denominator),
    }


def compare_trainers(args, work: Path) -> dict:
    arms: dict[str, list[dict]] = {"ours_standard": [], "hf_trainer": [], "ours_goldfish": [], "ours_compiled": []}
    for round_ in range(args.rounds):
        for arm in arms:
            out = work / f"{arm}_{round_}"
            if arm == "hf_trainer":
                arms[arm].append(hf_trainer(args.data, out, args.steps, args.batch, args.precision))
            else:
                loss = "goldfish" if arm == "ours_goldfish" else "standard"
                arms[arm].append(
                    ours(args.data, out, args.steps, args.batch, args.precision, loss, compile=arm == "ours_compiled")
                )
            print(f"  round {round_ + 1}: {arm:<14} {median_tokens_per_s(arms[arm][-1:]):8.0f} tokens/s", flush=True)
    speed = {arm: median_tokens_per_s(runs) for arm, runs in arms.items()}
    step_seconds = arms["ours_standard"][0]["tokens_per_step"] / speed["ours_standard"]
    return {
        "tokens_per_s": speed,
        "ours_vs_hf_trainer": ratio_summary(arms["ours_standard"], arms["hf_trainer"]),
        "ours_compiled_vs_hf_trainer": ratio_summary(arms["ours_compiled"], arms["hf_trainer"]),
        # step-time ratio = inverse tokens/s ratio
        "goldfish_vs_standard_step_time": ratio_summary(arms["ours_standard"], arms["ours_goldfish"]),
        "goldfish_mask": mask_overhead(args, step_seconds),
    }


def mask_overhead(args, step_seconds: float) -> dict:
    """The Goldfish-only work of a step (the drop mask of one global batch), timed in isolation: a load-robust
    complement to the step-time ratio."""
    from goldfish.data import load_prepared
    from goldfish.masks import GoldfishConfig
    from goldfish.train import drop_mask

    prepared = load_prepared(args.data)
    rows = {k: torch.from_numpy(v) for k, v in prepared.train.batch(np.arange(args.batch)).items()}
    gcfg = GoldfishConfig(k=4, h=13, special_ids=[0, 1, 2])
    drop_mask(rows, gcfg)
    times = []
    for _ in range(50):
        start = time.perf_counter()
        drop_mask(rows, gcfg)
        times.append(time.perf_counter() - start)
    mask_s = statistics.median(times)
    return {"mask_seconds": mask_s, "step_seconds": step_seconds, "fraction_of_step": mask_s / step_seconds}


def compare_precisions(args, work: Path) -> dict:
    """Interleaved fp32 and bf16 runs of the same model and batch: the median bf16 ÷ fp32 step time."""
    times: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for round_ in range(args.rounds):
        for precision in times:
            run = ours(
                args.data,
                work / f"precision_{precision}_{round_}",
                args.precision_steps,
                args.batch,
                precision,
                "standard",
                model=args.precision_model,
            )
            times[precision] += run["times"]
            print(f"  round {round_ + 1}: {precision} {statistics.median(run['times']):.3f} s/step", flush=True)
    native, why = native_bf16("cpu")
    return {
        "model": args.precision_model,
        "fp32_step_s": statistics.median(times["fp32"]),
        "bf16_step_s": statistics.median(times["bf16"]),
        "bf16_over_fp32": statistics.median(times["bf16"]) / statistics.median(times["fp32"]),
        "auto": resolve_precision("auto", "cpu"),
        "native_bf16": native,
        "reason": why,
        "cpu": cpu_model(),
        "aten_capability": torch.backends.cpu.get_cpu_capability(),
    }


def measure_mfu(args, work: Path) -> dict:
    precision = resolve_precision("auto", "cpu")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    peak = measure_matmul_peak(dtype, seconds=2.0)
    run = ours(
        args.data,
        work / "mfu",
        args.mfu_steps,
        args.mfu_batch,
        precision,
        "standard",
        model=args.mfu_model,
        compile=args.mfu_compile,
    )
    tokens_per_s = run["tokens_per_step"] / statistics.median(run["times"])
    best = best_tokens_per_s([run])
    peak_after = measure_matmul_peak(dtype, size=1024 + 1, seconds=2.0)  # a fresh measurement (not cached)
    return {
        "model": args.mfu_model,
        "precision": precision,
        "tokens_per_s": tokens_per_s,
        "flops_per_token": run["flops_per_token"],
        "peak_flops_before": peak,
        "peak_flops_after": peak_after,
        "mfu": mfu(tokens_per_s, run["flops_per_token"], max(peak, peak_after)),
        "mfu_fastest_step": mfu(best, run["flops_per_token"], max(peak, peak_after)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="data/prepared/wikipedia_demo", help="prepared folder (goldfish prepare)")
    parser.add_argument("--steps", type=int, default=8, help="steps per run of the trainer comparison")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved repetitions of every arm")
    parser.add_argument("--batch", type=int, default=10, help="rows per step (the demo's global batch)")
    parser.add_argument(
        "--precision",
        default="auto",
        choices=["auto", "fp32", "bf16"],
        help="precision of the trainer comparison (auto: what this machine resolves it to)",
    )
    parser.add_argument("--precision-model", default="llama-10M", help="model of the bf16 ÷ fp32 comparison")
    parser.add_argument("--precision-steps", type=int, default=4)
    parser.add_argument("--mfu-model", default="llama-40M")
    parser.add_argument("--mfu-steps", type=int, default=6)
    parser.add_argument("--mfu-batch", type=int, default=32)
    parser.add_argument("--mfu-compile", action="store_true", help="compile=true for the MFU run")
    parser.add_argument("--out", default=None, help="write the results JSON here")
    args = parser.parse_args()
    args.precision = resolve_precision(args.precision, "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        print(f"{cpu_model()}, {torch.get_num_threads()} threads, ATen {torch.backends.cpu.get_cpu_capability()}")
        print(
            f"trainer comparison: llama-demo, {args.precision}, batch {args.batch}, {args.steps} steps x "
            f"{args.rounds} rounds"
        )
        results = {"trainers": compare_trainers(args, work)}
        print(
            f"MFU: {args.mfu_model}, {resolve_precision('auto', 'cpu')}, batch {args.mfu_batch}, {args.mfu_steps} steps"
        )
        results["mfu"] = measure_mfu(args, work)
        print(
            f"bf16 vs fp32: {args.precision_model}, batch {args.batch}, {args.precision_steps} steps x "
            f"{args.rounds} rounds"
        )
        results["precision"] = compare_precisions(args, work)
    t, m, p = results["trainers"], results["mfu"], results["precision"]

    def show(r: dict) -> str:
        return f"{r['median']:.2f}x (rounds {r['min']:.2f}-{r['max']:.2f}; fastest steps {r['best_step']:.2f}x)"

    print(
        f"goldfish train vs HF Trainer (tokens/s)   eager {show(t['ours_vs_hf_trainer'])}, compile=true "
        f"{show(t['ours_compiled_vs_hf_trainer'])}   target >= 1.1x"
    )
    print(
        f"goldfish vs standard (step time)          {show(t['goldfish_vs_standard_step_time'])}   target <= 1.01x; "
        f"the mask alone is {100 * t['goldfish_mask']['fraction_of_step']:.2f} % of a step"
    )
    print(
        f"MFU {m['model']} {m['precision']}                      {100 * m['mfu']:.1f} % of a "
        f"{max(m['peak_flops_before'], m['peak_flops_after']) / 1e9:.0f} GFLOP/s matmul peak (fastest step "
        f"{100 * m['mfu_fastest_step']:.1f} %)   target >= 60 %"
    )
    print(
        f"bf16 / fp32 step time ({p['model']})      {p['bf16_over_fp32']:.2f}x ({p['bf16_step_s']:.3f} s vs "
        f"{p['fp32_step_s']:.3f} s); precision=auto chose {p['auto']}: {p['reason']}"
    )
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "train_speed.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
