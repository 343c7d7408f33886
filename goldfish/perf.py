"""Throughput accounting: model FLOPs utilisation (MFU) that means one thing and can never exceed 100 %.

MFU = achieved model FLOP/s ÷ the peak FLOP/s of the *resolved* precision on this device, with the model FLOPs of
:func:`model_flops_per_token` (6N + 12·L·H·T per token, PaLM appendix B: the one formula, for a built model through
:func:`goldfish.models.flops_per_token` and for a shape through :meth:`goldfish.estimate.ModelShape.flops_per_token`).
The peak:

* on a GPU, the vendor's dense peak for the device's name (:data:`goldfish.hardware.GPUS`); an unlisted GPU
  gets no MFU ("unknown device"), never a guessed peak;
* on a CPU, *measured*: the best rate of the kernels training itself runs (``matmul`` and ``F.linear``, which take
  different oneDNN/BLAS paths -- on a CPU without native bf16, a bf16 ``linear`` ran 7x faster than a bf16
  ``matmul``, which is how a matmul-only peak once gave "MFU 507 %"), in the same dtype and thread count.

A measured peak is a lower bound of the true one: when a step's achieved rate exceeds it, the peak is measured again
(longer, larger); if the step is still faster, MFU is reported as unavailable with the reason, not above 100 %.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from .hardware import device_name, gpu_peak_flops

_PEAK_CACHE: dict[tuple, float] = {}


def measure_matmul_peak(
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    size: int | None = None,
    seconds: float = 0.5,
) -> float:
    """Best observed FLOP/s of ``size x size`` products (``2·size³`` FLOPs each) in ``dtype`` on ``device``, over
    ``torch.matmul`` and ``F.linear`` (the two paths a transformer's matrix products take).

    Runs each for about ``seconds / 2`` after a warm-up; cached per (dtype, device, size, threads). ``size`` defaults
    to 1024 on CPU and 8192 on CUDA, large enough to reach the kernels' plateau.
    """
    device = torch.device(device)
    size = size or (8192 if device.type == "cuda" else 1024)
    key = (dtype, str(device), size, torch.get_num_threads())
    if key not in _PEAK_CACHE:
        gen = torch.Generator(device="cpu").manual_seed(0)
        a = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
        b = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
        _PEAK_CACHE[key] = max(
            _best_rate(lambda: torch.matmul(a, b), size, device, seconds / 2),
            _best_rate(lambda: F.linear(a, b), size, device, seconds / 2),
        )
    return _PEAK_CACHE[key]


def _best_rate(product, size: int, device: torch.device, seconds: float) -> float:
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    product()  # warm-up: kernel selection, page faults
    sync()
    best, reps = 0.0, 1
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(reps):
            product()
        sync()
        elapsed = time.perf_counter() - start
        best = max(best, 2.0 * size**3 * reps / elapsed)
        if elapsed < 0.05:  # too short to time reliably: batch more products per measurement
            reps *= 2
    return best


def model_flops_per_token(matmul_params: int, layers: int, hidden: int, seq_len: int) -> float:
    """Training FLOPs per token: 6·N + 12·L·H·T (PaLM appendix B; nanoGPT's ``estimate_mfu``). N: the weights used in
    matmuls (every parameter except an untied input embedding, a lookup; the output head counts), L layers, H hidden
    size, T sequence length (the attention-score term)."""
    return 6.0 * matmul_params + 12.0 * layers * hidden * seq_len


def mfu(tokens_per_s: float, flops_per_token: float, peak_flops: float, num_devices: int = 1) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the peak of ``num_devices`` devices (0 if unknown)."""
    if peak_flops <= 0:
        return 0.0
    return tokens_per_s * flops_per_token / (peak_flops * num_devices)


class MfuMeter:
    """MFU of training steps against the peak of ``precision`` on ``device`` (see the module docstring).

    ``peak`` (FLOP/s per device) and ``peak_source`` say what MFU is divided by; ``mfu()`` returns ``None`` when no
    trustworthy peak exists, with the reason in ``unavailable``. ``measure`` and ``vendor_peak`` are injectable
    (tests feed a fake device name and a fake peak)."""

    def __init__(
        self,
        flops_per_token: float,
        precision: str,
        device: torch.device | str,
        world: int = 1,
        enabled: bool = True,
        measure=measure_matmul_peak,
        vendor_peak=gpu_peak_flops,
    ):
        self.flops, self.world, self.measure = flops_per_token, world, measure
        self.device = torch.device(device)
        self.dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        self.peak: float | None = None
        self.peak_source = ""
        self.unavailable: str | None = None
        self._remeasured = False
        if not enabled:
            self.unavailable = "measured on the main process only"
        elif self.device.type == "cuda":
            name = device_name(self.device)
            tf32 = precision != "bf16" and torch.backends.cuda.matmul.allow_tf32
            self.peak = vendor_peak(name, precision, tf32)
            if self.peak is None:
                self.unavailable = f"unknown device {name!r}: no vendor peak in goldfish.hardware.GPUS"
            else:
                self.peak_source = f"vendor dense {precision} peak of {name}"
        else:
            self.peak = measure(self.dtype, self.device, seconds=0.3)
            self.peak_source = f"measured {precision} matmul/linear peak on {device_name(self.device)}"

    def mfu(self, tokens_per_s: float) -> float | None:
        """This step's MFU in [0, 1], or ``None`` (see ``unavailable``)."""
        if self.peak is None or self.peak <= 0:
            return None
        value = mfu(tokens_per_s, self.flops, self.peak, self.world)
        if value > 1.0 and self.device.type != "cuda" and not self._remeasured:
            # a measured peak is only a lower bound (measured under load, or on a kernel slower than training's)
            self._remeasured = True
            self.peak = max(self.peak, self.measure(self.dtype, self.device, size=2048, seconds=1.0))
            value = mfu(tokens_per_s, self.flops, self.peak, self.world)
        if value > 1.0:
            self.unavailable = (
                f"a step ran at {value:.0%} of the {self.peak_source} "
                f"({self.peak / 1e9:.1f} GFLOP/s): that peak is too low to divide by"
            )
            self.peak = None
            return None
        return value
