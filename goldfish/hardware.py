"""What the device computes fast, and what it is called: the facts behind ``precision: auto`` and MFU.

``auto`` picks bf16 where bf16 is faster than fp32 on the device. Where the answer is certain it is decided from
what the hardware and the runtime report; where it is not, it is measured once and cached:

* **CUDA**: bf16 when the GPU has native bf16 units (``torch.cuda.is_bf16_supported(including_emulation=False)``:
  Ampere and newer).
* **CPU with AMX** (Sapphire Rapids and newer Xeons) that the runtime may use -- ATen's kernel level is AVX512
  (``ATEN_CPU_CAPABILITY`` can lower it) and oneDNN's ISA cap (``ONEDNN_MAX_CPU_ISA`` / ``DNNL_MAX_CPU_ISA``) admits
  AMX: bf16, certain (AMX tiles multiply bf16 only).
* **CPU without AVX512-BF16** (AVX2 only, or AVX-512 without its bf16 dot products, or oneDNN capped below
  ``avx512_core_bf16``): fp32, certain, and the slow path is never run. Measured on a 2-core AMD EPYC (Zen 5) with
  the cap as the emulation: a bf16 linear layer's forward and backward under autocast ran at 0.8-0.9x the fp32
  rate with AVX-512 (bf16 converted to fp32), 0.03-0.05x with AVX2 (bf16 emulated).
* **CPU with AVX512-BF16 but no usable AMX**: it depends on the chip, so :func:`bf16_speedup` measures it: bf16
  vs fp32 forward + backward of training-shaped linear layers under autocast (the casts of fp32 master weights
  included), in this process's thread count, cached per CPU model, torch version, thread count and ISA caps under
  ``<cache>/precision/`` (:func:`goldfish.gguf_cache.cache_root`). bf16 is chosen when it measured at least
  :data:`BF16_MIN_SPEEDUP` x the fp32 rate. Measured: the 2-core AMD EPYC (Zen 5, AVX512-BF16, no AMX) ran it at
  3.7-4.9x (its llama-10M training step 1.56x, SmolLM2-135M's ~1.35x); a 2-core Xeon whose AMX the hypervisor hid
  ran a bf16 GEMM at 0.9x and a SmolLM2 step at 1/1.8x -- one rule cannot be right for both.

Vendor peaks (dense, no sparsity) by device name are in :data:`GPUS`; an unlisted GPU has no peak
(:func:`gpu_peak_flops` returns ``None``), never a guess.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import json
import os
import platform
import time
from datetime import datetime, timezone
from typing import Callable

import torch
import torch.nn.functional as F

from .gguf_cache import cache_root
from .io import atomic_write_json

# oneDNN ISA names in order (docs: "CPU ISA hints", dnnl_cpu_isa_t); AMX starts at avx512_core_amx
_ONEDNN_ISAS = ("sse41", "avx", "avx2", "avx2_vnni", "avx2_vnni_2", "avx512_core", "avx512_core_vnni",
                "avx512_core_bf16", "avx10_1_512", "avx512_core_fp16", "avx10_1_512_amx", "avx512_core_amx",
                "avx10_1_512_amx_fp16", "avx512_core_amx_fp16", "avx10_2_512", "avx10_2_512_amx_2")
_AMX_FROM = _ONEDNN_ISAS.index("avx10_1_512_amx")
_BF16_FROM = _ONEDNN_ISAS.index("avx512_core_bf16")  # the first ISA with bf16 dot products (vdpbf16ps)
# auto picks bf16 where the probe's bf16 linear layers ran at least this many times the fp32 rate: matmuls are about
# half of a small model's fp32 step, and bf16 leaves the rest (norms, softmax, the optimizer) as slow, so a smaller
# gain in the matmuls is lost in the step (a 4.2x probe gave a 1.56x llama-10M step)
BF16_MIN_SPEEDUP = 1.5
# (rows, in, out) of the probe's linear layers: SmolLM2-135M's attention and MLP projections on 1,024 tokens
PROBE_SHAPES = ((1024, 576, 576), (1024, 576, 1536), (1024, 1536, 576))
_NO_BF16 = "bf16 runs converted to fp32 with AVX-512 (measured 0.8-0.9x fp32) and emulated with AVX2 (~25x slower)"


@dataclasses.dataclass(frozen=True)
class CpuFeatures:
    """What the CPU and the runtime report: hardware flags and the software caps that can hide them."""

    amx: bool  # AMX tiles with bf16 (CPUID, via torch.cpu)
    avx512_bf16: bool  # AVX512-BF16 dot products (CPUID)
    aten_capability: str  # torch.backends.cpu.get_cpu_capability(): DEFAULT | AVX2 | AVX512 | ...
    onednn_isa_cap: str | None  # ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA, lower-case, or None when unset

    def _onednn_allows(self, first: int) -> bool:
        cap = self.onednn_isa_cap
        if cap in (None, "all", "default"):
            return True
        return cap in _ONEDNN_ISAS and _ONEDNN_ISAS.index(cap) >= first

    def bf16_rule(self) -> tuple[bool | None, str]:
        """(bf16 is faster than fp32 here: True or False where the features decide it, None where it must be
        measured; the reason in words)."""
        if not (self.avx512_bf16 or self.amx):
            return False, f"CPU has no AVX512-BF16 and no AMX: {_NO_BF16}"
        if not self._onednn_allows(_BF16_FROM):
            return False, (f"oneDNN is capped at {self.onednn_isa_cap} (ONEDNN_MAX_CPU_ISA), below its bf16 "
                           f"instructions: {_NO_BF16}")
        if self.amx and self.aten_capability.upper().startswith("AVX512") and self._onednn_allows(_AMX_FROM):
            return True, "CPU has AMX"
        if self.amx:
            why = (f"ATen runs {self.aten_capability} kernels (ATEN_CPU_CAPABILITY)"
                   if not self.aten_capability.upper().startswith("AVX512")
                   else f"oneDNN is capped at {self.onednn_isa_cap} (ONEDNN_MAX_CPU_ISA)")
            return None, f"CPU has AMX but {why}"
        return None, "CPU has AVX512-BF16 but no AMX"


def cpu_features() -> CpuFeatures:
    """The running CPU's :class:`CpuFeatures`."""
    probe = getattr(torch, "cpu", None)
    flag = (lambda name: bool(getattr(probe, name, lambda: False)()))
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
    return CpuFeatures(amx=flag("_is_amx_tile_supported"), avx512_bf16=flag("_is_avx512_bf16_supported"),
                       aten_capability=torch.backends.cpu.get_cpu_capability(),
                       onednn_isa_cap=cap.strip().lower() if cap else None)


def default_device() -> torch.device:
    """Where the toolkit computes by default: this process's CUDA device when there is one, else the CPU."""
    if torch.cuda.is_available():
        return torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}")
    return torch.device("cpu")


def native_bf16(device: torch.device | str, features: Callable[[], CpuFeatures] | None = None) -> tuple[bool, str]:
    """(whether ``precision: auto`` computes in bf16 on ``device``: native bf16 that is faster than fp32, the reason);
    ``features`` (default :func:`cpu_features`) is injectable for tests. A CPU whose features leave it open is
    measured once (:func:`bf16_speedup`, cached)."""
    device = torch.device(device)
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported(including_emulation=False)
        return ok, f"{device_name(device)} {'has' if ok else 'has no'} native bf16"
    if device.type != "cpu":
        return False, f"{device.type} devices: bf16 is not used by precision=auto"
    decided, why = (features or cpu_features)().bf16_rule()
    if decided is not None:
        return decided, why
    speedup = bf16_speedup()["speedup"]
    fast = speedup >= BF16_MIN_SPEEDUP
    return fast, (f"{why}; bf16 measured {speedup:.2f}x the fp32 rate of training-shaped linear layers "
                  f"({'>=' if fast else '<'} {BF16_MIN_SPEEDUP}x)")


# ------------------------------------------------------------------------------------------------ the bf16 probe


def probe_key() -> str:
    """What a probe result holds for: CPU model, torch version, thread count and the ISA caps in force."""
    f = cpu_features()
    return (f"{cpu_model()} | torch {torch.__version__} | {torch.get_num_threads()} threads | ATen "
            f"{f.aten_capability} | oneDNN cap {f.onednn_isa_cap or 'none'}")


def bf16_speedup() -> dict:
    """``{"speedup": fp32 time / bf16 time, ...}`` of training-shaped linear layers on this CPU (see the module
    docstring), from the cache when this CPU model, torch version, thread count and ISA caps were measured before,
    else measured now (about a second) and cached. Processes that probe at once (the ranks of a ``torchrun``)
    take turns on a lock, so all of them read the one measurement."""
    folder = cache_root() / "precision"
    key = probe_key()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".bf16_probe.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            cached = _read_probes(folder / "bf16_probe.json")
            if key not in cached:
                cached[key] = measure_bf16_speedup() | {"key": key}
                atomic_write_json(folder / "bf16_probe.json", cached)
            return cached[key]
    except OSError:  # a cache that cannot be written: measure in this process only
        return measure_bf16_speedup() | {"key": key}


def _read_probes(path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict) and isinstance(v.get("speedup"), (int, float))} \
        if isinstance(data, dict) else {}


def measure_bf16_speedup(shapes: tuple[tuple[int, int, int], ...] = PROBE_SHAPES, rounds: int = 7) -> dict:
    """Time forward + backward of ``F.linear`` over fp32 inputs and weights, plain (fp32) and under bf16 autocast
    (which casts the fp32 weights on every call, as training does), interleaved for ``rounds`` rounds so a load spike
    hits both alike; the best round of each. Returns ``{"speedup", "fp32_s", "bf16_s", "shapes", "threads",
    "measured"}``."""
    gen = torch.Generator().manual_seed(0)
    layers = [(torch.randn(rows, n_in, generator=gen, requires_grad=True),
               torch.randn(n_out, n_in, generator=gen, requires_grad=True)) for rows, n_in, n_out in shapes]

    def run(bf16: bool) -> float:
        start = time.perf_counter()
        for x, w in layers:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                y = F.linear(x, w)
            y.float().sum().backward()
        return time.perf_counter() - start

    for _ in range(2):  # warm-up: kernel selection, page faults, the autograd buffers
        run(False), run(True)
    best = {False: float("inf"), True: float("inf")}
    for _ in range(rounds):
        for bf16 in (False, True):
            best[bf16] = min(best[bf16], run(bf16))
    return {"speedup": best[False] / best[True], "fp32_s": best[False], "bf16_s": best[True],
            "shapes": [list(s) for s in shapes], "threads": torch.get_num_threads(),
            "measured": datetime.now(timezone.utc).isoformat(timespec="seconds")}


@functools.lru_cache(maxsize=None)
def cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo`` model name; ``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device: torch.device | str) -> str:
    """``NVIDIA H100 80GB HBM3`` for a GPU, the CPU model for the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model() if device.type == "cpu" else device.type


def describe(device: torch.device | str) -> dict:
    """The provenance of a result computed on ``device``: kind, name, whether bf16 is native and why, threads."""
    device = torch.device(device)
    native, why = native_bf16(device)
    out = {"type": device.type, "name": device_name(device), "native_bf16": native, "bf16_reason": why}
    if device.type == "cpu":
        out.update(threads=torch.get_num_threads(), aten_capability=torch.backends.cpu.get_cpu_capability())
    return out


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """A GPU kind: its config name, the fragments of ``torch.cuda.get_device_name`` that identify it, its vendor
    dense peaks in TFLOP/s per device as torch sees it (one GCD of an MI250X) and its memory in GiB."""

    kind: str
    names: tuple[str, ...]
    bf16: float
    tf32: float  # fp32 matmuls on tensor cores (torch.backends.cuda.matmul.allow_tf32)
    fp32: float  # plain FP32: torch's default matmul precision
    memory_gib: float


# Vendor datasheets, dense (no sparsity): NVIDIA A100, H100 (SXM5, PCIe, NVL), H200 (SXM, NVL), GH200; AMD Instinct
# MI250X (per GCD: half the package), MI300X. A name matches the spec with the longest fragment it contains.
GPUS: tuple[GpuSpec, ...] = (
    GpuSpec("a100", ("A100",), 312.0, 156.0, 19.5, 80.0),
    GpuSpec("a100-40gb", ("A100-SXM4-40GB", "A100-PCIE-40GB"), 312.0, 156.0, 19.5, 40.0),
    GpuSpec("h100", ("H100",), 989.0, 494.0, 67.0, 80.0),  # SXM5: "NVIDIA H100 80GB HBM3"
    GpuSpec("h100-pcie", ("H100 PCIe",), 756.0, 378.0, 51.0, 80.0),
    GpuSpec("h100-nvl", ("H100 NVL",), 835.0, 418.0, 60.0, 94.0),
    GpuSpec("h200", ("H200",), 989.0, 494.0, 67.0, 141.0),
    GpuSpec("h200-nvl", ("H200 NVL",), 835.0, 418.0, 60.0, 141.0),
    GpuSpec("gh200", ("GH200",), 989.0, 494.0, 67.0, 96.0),
    GpuSpec("mi250x-gcd", ("MI250X",), 191.5, 47.9, 47.9, 64.0),
    GpuSpec("mi300x", ("MI300X",), 1307.4, 653.7, 163.4, 192.0),
)


def gpu_spec(name: str) -> GpuSpec | None:
    """The :class:`GpuSpec` of the GPU called ``name`` (the longest matching fragment wins: "H100 PCIe" before
    "H100", "GH200" before "H200"), or ``None`` for a device not in :data:`GPUS`."""
    matches = [(len(f), spec) for spec in GPUS for f in spec.names if f.lower() in name.lower()]
    return max(matches, key=lambda m: m[0])[1] if matches else None


def gpu_peak_flops(name: str, precision: str, tf32: bool = False) -> float | None:
    """Vendor dense peak FLOP/s of the GPU called ``name`` in ``precision`` (fp32 | bf16), or ``None`` when the
    device is unknown: no guess."""
    spec = gpu_spec(name)
    if spec is None:
        return None
    return 1e12 * (spec.bf16 if precision == "bf16" else spec.tf32 if tf32 else spec.fp32)
