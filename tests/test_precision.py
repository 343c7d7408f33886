"""precision=auto from what the hardware reports (injected, never timed), and MFU that cannot exceed 100 %."""

from __future__ import annotations

import json

import pytest
import torch
from train_helpers import tiny_config

from goldfish import hardware, precision
from goldfish.config import from_dict
from goldfish.errors import UserError
from goldfish.provenance import read_fingerprint
from goldfish.io import read_jsonl
from goldfish.hardware import CpuFeatures, gpu_peak_flops, gpu_spec
from goldfish.perf import MfuMeter
from goldfish.train import train
from goldfish.train_config import TrainConfig

AMX = CpuFeatures(amx=True, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap=None)


@pytest.mark.parametrize("features, native", [
    (AMX, True),
    # AVX512-BF16 alone: native but measured slower than fp32 for training (see goldfish.hardware)
    (CpuFeatures(amx=False, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap=None), False),
    (CpuFeatures(amx=False, avx512_bf16=False, aten_capability="AVX2", onednn_isa_cap=None), False),  # AVX2 laptop
    # AMX hidden by the runtime: ATen at AVX2, or oneDNN capped below AMX (how the slow path is emulated)
    (CpuFeatures(amx=True, avx512_bf16=True, aten_capability="AVX2", onednn_isa_cap=None), False),
    (CpuFeatures(amx=True, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap="avx2"), False),
    (CpuFeatures(amx=True, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap="avx512_core_bf16"), False),
    (CpuFeatures(amx=True, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap="avx512_core_amx"), True),
    (CpuFeatures(amx=True, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap="all"), True),
])
def test_cpu_native_bf16_from_reported_features(features, native):
    assert hardware.native_bf16("cpu", features=lambda: features)[0] is native


def test_auto_resolves_from_injected_capability(monkeypatch):
    no_bf16 = CpuFeatures(amx=False, avx512_bf16=False, aten_capability="AVX2", onednn_isa_cap=None)
    monkeypatch.setattr(hardware, "cpu_features", lambda: no_bf16)
    assert precision.resolve_precision("auto", "cpu") == "fp32"
    monkeypatch.setattr(hardware, "cpu_features", lambda: AMX)
    assert precision.resolve_precision("auto", "cpu") == "bf16"
    assert precision.resolve_precision("auto", "cpu", bf16_ok=False) == "fp32"  # AxoNN on a CPU
    assert precision.resolve_precision("fp32", "cpu") == "fp32"
    assert precision.resolve_precision("float32", "cpu") == "fp32"  # aliases resolve to the short form


def test_environment_cap_reaches_auto(monkeypatch):
    """The emulation the README documents (ONEDNN_MAX_CPU_ISA=AVX2) makes auto fp32 even on an AMX CPU."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert hardware.cpu_features().onednn_isa_cap == "avx2"
    assert precision.resolve_precision("auto", "cpu") == "fp32"


def test_explicit_bf16_without_native_runs_with_one_warning(monkeypatch, capsys):
    slow = CpuFeatures(amx=False, avx512_bf16=False, aten_capability="AVX2", onednn_isa_cap=None)
    monkeypatch.setattr(hardware, "cpu_features", lambda: slow)
    monkeypatch.setattr(precision, "_WARNED", set())
    assert precision.resolve_precision("bf16", "cpu") == "bf16"
    assert precision.resolve_precision("bf16", "cpu") == "bf16"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: precision=bf16") and "no AMX" in err[0]


def test_resolved_precision_is_what_a_training_run_records(tmp_path, data, monkeypatch):
    """config.yaml, fingerprint and summary.json hold the resolved name; a machine resolving auto differently is a
    different run (refused by the fingerprint), with the difference named."""
    cfg = from_dict(TrainConfig, tiny_config(data, tmp_path / "run", precision="auto", schedule__max_steps=2))
    out = train(cfg)
    resolved = precision.resolve_precision("auto", "cpu")
    assert "precision: auto" not in (out / "config.yaml").read_text()
    assert read_fingerprint(out)["precision"] == resolved
    summary = json.loads((out / "summary.json").read_text())
    assert summary["precision"] == resolved and summary["device"]["type"] == "cpu"
    other = "bf16" if resolved == "fp32" else "fp32"
    monkeypatch.setattr("goldfish.train.resolve_precision", lambda *a, **k: other)
    with pytest.raises(UserError, match=f"precision: {resolved} -> {other}"):
        train(cfg)


# ------------------------------------------------------------------------------------------------ MFU


@pytest.mark.parametrize("name, kind", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200"),
    ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("NVIDIA A100 80GB PCIe", "a100"),
    ("AMD Instinct MI250X", "mi250x-gcd"), ("AMD Instinct MI300X", "mi300x"), ("NVIDIA GeForce RTX 4090", None),
])
def test_gpu_peaks_by_device_name(name, kind):
    spec = gpu_spec(name)
    assert (spec.kind if spec else None) == kind


def test_gpu_peak_per_precision():
    assert gpu_peak_flops("NVIDIA H200", "bf16") == 989e12
    assert gpu_peak_flops("NVIDIA H200", "fp32") == 67e12
    assert gpu_peak_flops("NVIDIA H200", "fp32", tf32=True) == 494e12
    assert gpu_peak_flops("Some New Accelerator", "bf16") is None


def test_mfu_against_a_fake_gpu(monkeypatch):
    monkeypatch.setattr("goldfish.perf.device_name", lambda device: "NVIDIA H100 80GB HBM3")
    meter = MfuMeter(flops_per_token=1e9, precision="bf16", device="cuda:0")
    assert meter.peak == 989e12 and "H100" in meter.peak_source
    # 494.5e3 tok/s x 1e9 FLOP = half of 989e12: integers below 2^53, an exact product and an exact quotient
    assert meter.mfu(494.5e3) == 0.5
    monkeypatch.setattr("goldfish.perf.device_name", lambda device: "Mystery GPU 9000")
    unknown = MfuMeter(flops_per_token=1e9, precision="bf16", device="cuda:0")
    assert unknown.mfu(1e3) is None and "unknown device 'Mystery GPU 9000'" in unknown.unavailable


def test_mfu_never_exceeds_one_on_a_cpu():
    """A fake measured peak far below the achieved rate: the peak is measured again; if the step is still faster,
    MFU is unavailable with the reason, never above 100 %."""
    calls = []

    def fake_peak(low, high):
        def measure(dtype, device, size=None, seconds=0.5):
            calls.append(size)
            return low if len(calls) == 1 else high
        return measure

    meter = MfuMeter(1e6, "fp32", "cpu", measure=fake_peak(1e9, 1e12))
    # 2e3 tok/s x 1e6 = 2e9 > 1e9: re-measured; an exact product (integers below 2^53) and the same one division
    assert meter.mfu(2e3) == 2e9 / 1e12
    assert calls == [None, 2048]
    stuck = MfuMeter(1e6, "fp32", "cpu", measure=fake_peak(1e9, 1e9))
    assert stuck.mfu(2e3) is None and "too low to divide by" in stuck.unavailable
    assert stuck.mfu(1.0) is None  # stays unavailable for the rest of the run
    assert MfuMeter(1e6, "fp32", "cpu", enabled=False).mfu(1.0) is None  # ranks other than the main one


def test_training_log_mfu_stays_in_range(tmp_path, data):
    out = train(from_dict(TrainConfig, tiny_config(data, tmp_path / "run", schedule__max_steps=3)))
    values = [r["mfu"] for r in read_jsonl(out / "metrics.jsonl")]
    assert all(v is None or 0 <= v <= 1 for v in values)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mfu_peak_source"].startswith("measured fp32") or summary["mfu_unavailable"]


def test_measured_peak_takes_the_faster_of_matmul_and_linear(monkeypatch):
    """Both paths are timed (a matmul-only peak was once 7x below what bf16 F.linear reached)."""
    from goldfish import perf

    seen = []
    monkeypatch.setattr(perf, "_best_rate", lambda product, size, device, seconds: seen.append(product) or
                        (1.0 if len(seen) == 1 else 7.0))
    assert perf.measure_matmul_peak(torch.float32, "cpu", size=8, seconds=0.01) == 7.0
    assert len(seen) == 2
