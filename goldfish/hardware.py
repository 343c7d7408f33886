"""What the device computes fast, and what it is called: the facts behind ``precision: auto`` and MFU.

``auto`` picks bf16 where bf16 is faster than fp32 on the device, decided by a rule from what the hardware and the
runtime report -- never by a timing taken at run time, so the same command on the same class of machine computes in
the same precision whatever else the machine is doing:

* **CUDA**: bf16 when the GPU has native bf16 units (``torch.cuda.is_bf16_supported(including_emulation=False)``:
  Ampere and newer).
* **CPU with AMX** (Sapphire Rapids and newer Xeons) that the runtime may use -- ATen's kernel level is AVX512
  (``ATEN_CPU_CAPABILITY`` can lower it) and oneDNN's ISA cap (``ONEDNN_MAX_CPU_ISA`` / ``DNNL_MAX_CPU_ISA``) admits
  AMX: bf16 (AMX tiles multiply bf16 only).
* **CPU without AVX512-BF16** (AVX2 only, or AVX-512 without its bf16 dot products, or oneDNN capped below
  ``avx512_core_bf16``): fp32. Measured on a 2-core AMD EPYC with the cap as the emulation: a bf16 linear layer's
  forward and backward under autocast ran at 0.8-0.9x the fp32 rate with AVX-512 (bf16 converted to fp32),
  0.03-0.05x with AVX2 (bf16 emulated).
* **CPU with AVX512-BF16 but no usable AMX**: it depends on the chip, so the answer is the class's row of
  :data:`CPU_CLASSES`, measured once by the project and shipped (as torchtitan ships its peak-FLOPs table): an AMD
  Zen 4 EPYC ran bf16 training-shaped linear layers at 3.7-4.9x fp32 (a llama-10M step 1.56x, SmolLM2-135M's ~1.35x)
  -> bf16; a Xeon whose AMX the hypervisor hid ran a bf16 GEMM at 0.9x and a SmolLM2 step at 1/1.8x -> fp32. A class
  not in the table gets fp32 (the exact choice), with ``goldfish doctor`` to measure it and ``precision=bf16`` to
  choose it.

:func:`measure_bf16_speedup` is that measurement; only ``goldfish doctor`` runs it, to report, never to decide.
Vendor peaks (dense, no sparsity) by device name are in :data:`GPUS`; an unlisted GPU has no peak
(:func:`gpu_peak_flops` returns ``None``), never a guess.

Threads: :func:`default_threads` is what a toolkit process uses unless told otherwise -- the physical cores this
process may run on (affinity and a cgroup CPU quota included), divided among the processes of a launch on this node
(``LOCAL_WORLD_SIZE``), at least one; ``OMP_NUM_THREADS`` set by the user wins. torch's own default (every logical
CPU per process) oversubscribes a machine whose cores are shared or split between ranks.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

from .errors import UserError

# oneDNN ISA names in order (docs: "CPU ISA hints", dnnl_cpu_isa_t); AMX starts at avx512_core_amx
_ONEDNN_ISAS = (
    "sse41",
    "avx",
    "avx2",
    "avx2_vnni",
    "avx2_vnni_2",
    "avx512_core",
    "avx512_core_vnni",
    "avx512_core_bf16",
    "avx10_1_512",
    "avx512_core_fp16",
    "avx10_1_512_amx",
    "avx512_core_amx",
    "avx10_1_512_amx_fp16",
    "avx512_core_amx_fp16",
    "avx10_2_512",
    "avx10_2_512_amx_2",
)
_AMX_FROM = _ONEDNN_ISAS.index("avx10_1_512_amx")
_BF16_FROM = _ONEDNN_ISAS.index("avx512_core_bf16")  # the first ISA with bf16 dot products (vdpbf16ps)
# (rows, in, out) of the doctor's linear layers: SmolLM2-135M's attention and MLP projections on 1,024 tokens
PROBE_SHAPES = ((1024, 576, 576), (1024, 576, 1536), (1024, 1536, 576))
_NO_BF16 = "bf16 runs converted to fp32 with AVX-512 (measured 0.8-0.9x fp32) and emulated with AVX2 (~25x slower)"


@dataclasses.dataclass(frozen=True)
class CpuClass:
    """A row of :data:`CPU_CLASSES`: CPUs with AVX512-BF16 but no usable AMX, told apart by the vendor and CPU family
    that ``/proc/cpuinfo`` reports, and whether ``precision: auto`` picks bf16 on them, with the measurement behind
    it."""

    name: str
    vendor: str  # /proc/cpuinfo vendor_id
    families: tuple[int, ...]  # /proc/cpuinfo "cpu family"
    bf16: bool
    evidence: str


# measured once by the project (bf16 vs fp32 forward + backward of training-shaped linear layers under autocast,
# and whole training steps); a CPU matching no row gets fp32
CPU_CLASSES: tuple[CpuClass, ...] = (
    CpuClass(
        "AMD Zen 4",
        "AuthenticAMD",
        (0x19,),
        True,
        "measured on a 2-core AMD EPYC (family 25 model 17): bf16 linear layers 3.7-4.9x fp32, a llama-10M "
        "training step 1.56x, SmolLM2-135M's ~1.35x",
    ),
    CpuClass(
        "Intel Xeon with AVX512-BF16 and no usable AMX (Cooper Lake, or AMX hidden by a hypervisor)",
        "GenuineIntel",
        (6,),
        False,
        "measured on a 2-core Xeon whose AMX the hypervisor hid: a bf16 GEMM 0.9x fp32, a SmolLM2-135M step 1/1.8x",
    ),
)


@dataclasses.dataclass(frozen=True)
class CpuFeatures:
    """What the CPU and the runtime report: hardware flags, the CPU's vendor and family, and the software caps that
    can hide them."""

    amx: bool  # AMX tiles with bf16 (CPUID, via torch.cpu)
    avx512_bf16: bool  # AVX512-BF16 dot products (CPUID)
    aten_capability: str  # torch.backends.cpu.get_cpu_capability(): DEFAULT | AVX2 | AVX512 | ...
    onednn_isa_cap: str | None  # ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA, lower-case, or None when unset
    vendor: str = ""  # /proc/cpuinfo vendor_id: AuthenticAMD, GenuineIntel, ...
    family: int | None = None  # /proc/cpuinfo cpu family

    def _onednn_allows(self, first: int) -> bool:
        cap = self.onednn_isa_cap
        if cap in (None, "all", "default"):
            return True
        return cap in _ONEDNN_ISAS and _ONEDNN_ISAS.index(cap) >= first

    def cpu_class(self) -> CpuClass | None:
        """The row of :data:`CPU_CLASSES` this CPU belongs to, or ``None``."""
        return next((c for c in CPU_CLASSES if c.vendor == self.vendor and self.family in c.families), None)

    def bf16_rule(self) -> tuple[bool, str]:
        """(bf16 is faster than fp32 here, the reason in words): from the features and :data:`CPU_CLASSES` alone."""
        if not (self.avx512_bf16 or self.amx):
            return False, f"CPU has no AVX512-BF16 and no AMX: {_NO_BF16}"
        if not self._onednn_allows(_BF16_FROM):
            return False, (
                f"oneDNN is capped at {self.onednn_isa_cap} (ONEDNN_MAX_CPU_ISA), below its bf16 "
                f"instructions: {_NO_BF16}"
            )
        if self.amx and self.aten_capability.upper().startswith("AVX512") and self._onednn_allows(_AMX_FROM):
            return True, "CPU has AMX"
        if self.amx:
            hidden = (
                f"ATen runs {self.aten_capability} kernels (ATEN_CPU_CAPABILITY)"
                if not self.aten_capability.upper().startswith("AVX512")
                else f"oneDNN is capped at {self.onednn_isa_cap} (ONEDNN_MAX_CPU_ISA)"
            )
            lead = f"CPU has AMX but {hidden}"
        else:
            lead = "AVX512-BF16, no AMX"
        known = self.cpu_class()
        if known is None:
            return False, (
                f"{lead}; this CPU class ({self.vendor or 'unknown vendor'} family {self.family}) is not "
                f"in goldfish.hardware.CPU_CLASSES, so auto keeps fp32 (`goldfish doctor` measures bf16 "
                f"here; precision=bf16 chooses it)"
            )
        return known.bf16, f"{known.name}: {lead}; {known.evidence}"


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_features() -> CpuFeatures:
    """The running CPU's :class:`CpuFeatures`."""
    probe = getattr(torch, "cpu", None)

    def flag(name: str) -> bool:
        return bool(getattr(probe, name, lambda: False)())

    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
    info = _cpuinfo()
    family = info.get("cpu family", "")
    return CpuFeatures(
        amx=flag("_is_amx_tile_supported"),
        avx512_bf16=flag("_is_avx512_bf16_supported"),
        aten_capability=torch.backends.cpu.get_cpu_capability(),
        onednn_isa_cap=cap.strip().lower() if cap else None,
        vendor=info.get("vendor_id", ""),
        family=int(family) if family.isdigit() else None,
    )


def default_device() -> torch.device:
    """Where the toolkit computes by default: this process's CUDA device when there is one, else the CPU."""
    if torch.cuda.is_available():
        return torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}")
    return torch.device("cpu")


def native_bf16(device: torch.device | str, features=None) -> tuple[bool, str]:
    """(whether ``precision: auto`` computes in bf16 on ``device``: native bf16 that is faster than fp32, the reason);
    ``features`` (default :func:`cpu_features`) is injectable for tests. Decided by rule, never timed."""
    device = torch.device(device)
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported(including_emulation=False)
        return ok, f"{device_name(device)} {'has' if ok else 'has no'} native bf16"
    if device.type != "cpu":
        return False, f"{device.type} devices: bf16 is not used by precision=auto"
    return (features or cpu_features)().bf16_rule()


# ------------------------------------------------------------------------------------------------ threads


def _cgroup_cpus() -> float | None:
    """CPUs a cgroup v2 quota allows (``cpu.max``: quota / period), or ``None`` when unlimited or unreadable."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def physical_cores(cpuinfo: str | None = None, allowed: set[int] | None = None) -> int:
    """Physical cores this process may run on: distinct (package, core) pairs of ``/proc/cpuinfo`` among the CPUs
    of its affinity mask, capped by a cgroup CPU quota; the allowed logical CPUs where cpuinfo says nothing.
    ``cpuinfo`` and ``allowed`` are injectable for tests."""
    if allowed is None:
        allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError:
            cpuinfo = ""
    cores: set[tuple[str, str]] = set()
    for block in cpuinfo.split("\n\n"):
        fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in block.splitlines())}
        if fields.get("processor", "").isdigit() and int(fields["processor"]) in allowed and "core id" in fields:
            cores.add((fields.get("physical id", "0"), fields["core id"]))
    count = len(cores) or len(allowed)
    quota = _cgroup_cpus()
    return max(1, min(count, math.ceil(quota)) if quota else count)


def default_threads() -> int:
    """The CPU threads a toolkit process uses when its config leaves ``threads`` unset: ``OMP_NUM_THREADS`` when the
    user set it, else :func:`physical_cores` divided among the ``LOCAL_WORLD_SIZE`` processes of a launch on this
    node, at least one."""
    threads = env_count("OMP_NUM_THREADS")
    if threads is not None and threads >= 1:
        return threads
    return max(1, physical_cores() // max(1, env_count("LOCAL_WORLD_SIZE") or 1))


def env_count(name: str) -> int | None:
    """Environment variable ``name`` as a whole number written in ASCII digits (``None`` when unset or empty); any
    other value -- ``"²"`` and ``"٣"`` among them, which ``str.isdigit`` accepts and ``int`` does not, or ``"4 "``'s
    cousins ``"four"`` and ``"-1"`` -- is one line naming the variable and the fix."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if value.isascii() and value.isdigit() and len(value) <= 9:
        return int(value)
    raise UserError(
        f"the environment variable {name}={value!r} is not a whole number written in ASCII digits; set "
        f"it to one (e.g. {name}=4) or unset it"
    )


def apply_threads(threads: int | None) -> int:
    """Set torch's intra-op threads to ``threads`` (``None``: :func:`default_threads`) and return the number."""
    n = default_threads() if threads is None else int(threads)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


# ------------------------------------------------------------------------------------------------ goldfish doctor


def measure_bf16_speedup(shapes: tuple[tuple[int, int, int], ...] = PROBE_SHAPES, rounds: int = 7) -> dict:
    """Time forward + backward of ``F.linear`` over fp32 inputs and weights, plain (fp32) and under bf16 autocast
    (which casts the fp32 weights on every call, as training does), interleaved for ``rounds`` rounds so a load spike
    hits both alike; the best round of each. Returns ``{"speedup", "fp32_s", "bf16_s", "shapes", "threads",
    "measured"}``. Only ``goldfish doctor`` calls it: a report for a CPU class :data:`CPU_CLASSES` lacks, never an
    input to ``precision: auto``."""
    gen = torch.Generator().manual_seed(0)
    layers = [
        (
            torch.randn(rows, n_in, generator=gen, requires_grad=True),
            torch.randn(n_out, n_in, generator=gen, requires_grad=True),
        )
        for rows, n_in, n_out in shapes
    ]

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
    return {
        "speedup": best[False] / best[True],
        "fp32_s": best[False],
        "bf16_s": best[True],
        "shapes": [list(s) for s in shapes],
        "threads": torch.get_num_threads(),
        "measured": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


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
