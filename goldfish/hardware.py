"""What the device computes fast, and what it is called: the facts behind ``precision: auto`` and MFU.

Decided from what the hardware and the runtime report, never from a timing:

* **CUDA**: bf16 when the GPU has native bf16 units (``torch.cuda.is_bf16_supported(including_emulation=False)``:
  Ampere and newer).
* **CPU**: bf16 only with AMX (Sapphire Rapids and newer Xeons), and only when the runtime may use it: ATen's
  kernel level is AVX512 (``ATEN_CPU_CAPABILITY`` can lower it) and oneDNN's ISA cap (``ONEDNN_MAX_CPU_ISA`` /
  ``DNNL_MAX_CPU_ISA``) admits AMX. AVX512-BF16 without AMX computes bf16 natively but not fast: measured on a
  2-core Xeon with AVX512-BF16 and no AMX (``benchmarks/train_speed.py``), a SmolLM2-135M training step under bf16
  autocast took 1.8x the fp32 step, and a bf16 GEMM of its shapes ran at 0.9x the fp32 rate, because autocast casts
  every weight on every step and the bf16 dot-product instructions only double the FMA width. Without AVX512 at
  all (AVX2) bf16 matmuls are emulated, ~30x slower than fp32.

Vendor peaks (dense, no sparsity) by device name are in :data:`GPUS`; an unlisted GPU has no peak
(:func:`gpu_peak_flops` returns ``None``), never a guess.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
from typing import Callable

import torch

# oneDNN ISA names in order (docs: "CPU ISA hints", dnnl_cpu_isa_t); AMX starts at avx512_core_amx
_ONEDNN_ISAS = ("sse41", "avx", "avx2", "avx2_vnni", "avx2_vnni_2", "avx512_core", "avx512_core_vnni",
                "avx512_core_bf16", "avx10_1_512", "avx512_core_fp16", "avx10_1_512_amx", "avx512_core_amx",
                "avx10_1_512_amx_fp16", "avx512_core_amx_fp16", "avx10_2_512", "avx10_2_512_amx_2")
_AMX_FROM = _ONEDNN_ISAS.index("avx10_1_512_amx")


@dataclasses.dataclass(frozen=True)
class CpuFeatures:
    """What the CPU and the runtime report: hardware flags and the software caps that can hide them."""

    amx: bool  # AMX tiles with bf16 (CPUID, via torch.cpu)
    avx512_bf16: bool  # AVX512-BF16 dot products (CPUID)
    aten_capability: str  # torch.backends.cpu.get_cpu_capability(): DEFAULT | AVX2 | AVX512 | ...
    onednn_isa_cap: str | None  # ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA, lower-case, or None when unset

    @property
    def onednn_allows_amx(self) -> bool:
        cap = self.onednn_isa_cap
        if cap in (None, "all", "default"):
            return True
        return cap in _ONEDNN_ISAS and _ONEDNN_ISAS.index(cap) >= _AMX_FROM

    def native_bf16(self) -> tuple[bool, str]:
        """(bf16 is native and fast here, the reason in words)."""
        if not self.amx:
            have = "AVX512-BF16 but no AMX" if self.avx512_bf16 else "no AMX and no AVX512-BF16"
            return False, f"CPU has {have}"
        if not self.aten_capability.upper().startswith("AVX512"):
            return False, f"CPU has AMX but ATen runs {self.aten_capability} kernels (ATEN_CPU_CAPABILITY)"
        if not self.onednn_allows_amx:
            return False, f"CPU has AMX but oneDNN is capped at {self.onednn_isa_cap} (ONEDNN_MAX_CPU_ISA)"
        return True, "CPU has AMX"


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
    """(whether ``device`` computes bf16 natively and fast, the reason); ``features`` (default
    :func:`cpu_features`) is injectable for tests."""
    device = torch.device(device)
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported(including_emulation=False)
        return ok, f"{device_name(device)} {'has' if ok else 'has no'} native bf16"
    if device.type == "cpu":
        return (features or cpu_features)().native_bf16()
    return False, f"{device.type} devices: bf16 is not used by precision=auto"


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
