"""Throughput accounting: a measured matmul peak and model FLOPs utilisation (MFU).

MFU = achieved model FLOP/s / peak FLOP/s, with the model FLOPs of :func:`goldfish.models.flops_per_token`
(6N + 12·L·H·T per token, PaLM appendix B). On CPUs the vendor peak is rarely known or reachable, so the peak is
*measured*: the best rate of large square matmuls in the same dtype, device and thread count as training. An MFU
against this peak says how close the trainer gets to what the hardware does on its best kernel.
"""

from __future__ import annotations

import time

import torch

_PEAK_CACHE: dict[tuple, float] = {}


def measure_matmul_peak(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu", size: int | None = None,
                        seconds: float = 0.5) -> float:
    """Best observed FLOP/s of ``size x size`` matmuls (``2·size³`` FLOPs each) in ``dtype`` on ``device``.

    Runs for about ``seconds`` after a warm-up; the result is cached per (dtype, device, size, threads).
    ``size`` defaults to 1024 on CPU and 8192 on CUDA, large enough to reach the kernel's plateau.
    """
    device = torch.device(device)
    size = size or (8192 if device.type == "cuda" else 1024)
    key = (dtype, str(device), size, torch.get_num_threads())
    if key in _PEAK_CACHE:
        return _PEAK_CACHE[key]
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
    out = torch.empty(size, size, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.matmul(a, b, out=out)  # warm-up: kernel selection, page faults
    sync()
    best = 0.0
    deadline = time.perf_counter() + seconds
    reps = 1
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(reps):
            torch.matmul(a, b, out=out)
        sync()
        elapsed = time.perf_counter() - start
        best = max(best, 2.0 * size**3 * reps / elapsed)
        if elapsed < 0.05:  # too short to time reliably: batch more matmuls per measurement
            reps *= 2
    _PEAK_CACHE[key] = best
    return best


def mfu(tokens_per_s: float, flops_per_token: float, peak_flops: float, num_devices: int = 1) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the peak of ``num_devices`` devices (0 if unknown)."""
    if peak_flops <= 0:
        return 0.0
    return tokens_per_s * flops_per_token / (peak_flops * num_devices)
