"""``goldfish doctor``: what this machine is, what ``precision: auto`` and the thread default choose here and why,
and -- as a report, never as an input to any run -- how fast bf16 measures against fp32 right now."""

from __future__ import annotations

import argparse
import json
import os

DESCRIPTION = """\
Report this machine's device, CPU class and features, the precision `auto` resolves to (by rule, from the class:
the same answer whatever the load), the threads a toolkit process uses by default, and the OpenMP wait policy.
With --measure (the default) it also times bf16 against fp32 on training-shaped linear layers: a reading for a CPU
class goldfish.hardware.CPU_CLASSES lacks, which no run ever reads (choose precision=bf16 yourself if it pays).

examples:
  goldfish doctor
  goldfish doctor --no-measure --json
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--measure",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time bf16 vs fp32 linear layers (about a second; default on)",
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def report(measure: bool) -> dict:
    """Everything ``goldfish doctor`` prints, as a mapping."""
    import torch

    from ..hardware import (
        cpu_features,
        cpu_model,
        default_device,
        default_threads,
        measure_bf16_speedup,
        native_bf16,
        physical_cores,
    )
    from ..precision import resolve_precision

    device = default_device()
    features = cpu_features()
    native, why = native_bf16(device)
    known = features.cpu_class()
    out = {
        "device": str(device),
        "cpu": cpu_model(),
        "vendor": features.vendor,
        "family": features.family,
        "avx512_bf16": features.avx512_bf16,
        "amx": features.amx,
        "aten_capability": features.aten_capability,
        "onednn_isa_cap": features.onednn_isa_cap,
        "cpu_class": known.name if known else None,
        "precision_auto": resolve_precision("auto", device, warn=False),
        "bf16_native_and_faster": native,
        "reason": why,
        "physical_cores": physical_cores(),
        "logical_cpus": os.cpu_count(),
        "default_threads": default_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "torch": torch.__version__,
    }
    if measure and device.type == "cpu":
        torch.set_num_threads(out["default_threads"])
        out["bf16_measured"] = measure_bf16_speedup()
    return out


def run(args: argparse.Namespace) -> int:
    out = report(args.measure)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"device:     {out['device']} ({out['cpu']}; {out['vendor'] or '?'} family {out['family']})")
    print(
        f"features:   AVX512-BF16 {'yes' if out['avx512_bf16'] else 'no'}, AMX {'yes' if out['amx'] else 'no'}, "
        f"ATen {out['aten_capability']}, oneDNN cap {out['onednn_isa_cap'] or 'none'}"
    )
    print(f"precision:  auto -> {out['precision_auto']} ({out['reason']})")
    print(
        f"threads:    {out['default_threads']} by default ({out['physical_cores']} physical cores, "
        f"{out['logical_cpus']} logical CPUs; OMP_NUM_THREADS or threads= overrides); OpenMP wait policy "
        f"{out['omp_wait_policy'] or 'unset'}"
    )
    measured = out.get("bf16_measured")
    if measured:
        print(
            f"measured:   bf16 {measured['speedup']:.2f}x the fp32 rate of training-shaped linear layers on "
            f"{measured['threads']} threads, now (a reading under the current load; runs never use it)"
        )
    return 0
