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
# this machine's class (issue 34): a 2-core AMD EPYC (Zen 5) with AVX512-BF16 and no AMX
EPYC = CpuFeatures(amx=False, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap=None)
AVX2 = CpuFeatures(amx=False, avx512_bf16=False, aten_capability="AVX2", onednn_isa_cap=None)
# measured bf16 / fp32 rates of the probe (fp32 time / bf16 time of its linear layers): the EPYC 3.67-4.06x
# (2026-12-03, 1 and 2 threads, load ~1 on 2 cores); the Xeon whose AMX its hypervisor hid: a bf16 GEMM at 0.9x
EPYC_SPEEDUP, XEON_SPEEDUP = 3.97, 0.9


@pytest.fixture
def probe(monkeypatch, tmp_path):
    """A fake probe (the speedup it reports is set by the test) in an empty cache; records each measurement."""
    monkeypatch.setenv("GOLDFISH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(precision, "_WARNED", set())
    calls: list[int] = []
    state = {"speedup": EPYC_SPEEDUP}

    def measure():
        calls.append(torch.get_num_threads())
        return {"speedup": state["speedup"], "fp32_s": 1.0, "bf16_s": 1.0 / state["speedup"]}

    monkeypatch.setattr(hardware, "measure_bf16_speedup", measure)
    return state, calls


@pytest.mark.parametrize("features, decided", [
    (AMX, True),
    (EPYC, None),  # AVX512-BF16 without AMX: it depends on the chip, measured
    (AVX2, False),  # AVX2 laptop: emulated, never run
    (CpuFeatures(amx=False, avx512_bf16=False, aten_capability="AVX512", onednn_isa_cap=None), False),  # AVX-512 only
    # AMX hidden by the runtime: ATen at AVX2, or oneDNN capped below AMX (how the slow path is emulated)
    (CpuFeatures(amx=True, avx512_bf16=True, aten_capability="AVX2", onednn_isa_cap=None), None),
    (CpuFeatures(amx=True, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap="avx2"), False),
    (CpuFeatures(amx=True, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap="avx512_core"), False),
    (CpuFeatures(amx=True, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap="avx512_core_bf16"), None),
    (CpuFeatures(amx=True, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap="avx512_core_amx"), True),
    (CpuFeatures(amx=True, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap="all"), True),
])
def test_cpu_rule_decides_where_the_features_are_certain(features, decided):
    assert features.bf16_rule()[0] is decided


@pytest.mark.parametrize("speedup, chosen", [(EPYC_SPEEDUP, "bf16"), (XEON_SPEEDUP, "fp32"),
                                             (hardware.BF16_MIN_SPEEDUP, "bf16"), (1.49, "fp32")])
def test_auto_on_this_machines_class_follows_the_measured_ratio(monkeypatch, probe, speedup, chosen):
    """AVX512-BF16 without AMX: the measured ratio decides (this machine's 3.97x -> bf16, the Xeon's 0.9x -> fp32);
    the reason names the ratio, and the explicit-bf16 warning says the truth."""
    state, calls = probe
    state["speedup"] = speedup
    monkeypatch.setattr(hardware, "cpu_features", lambda: EPYC)
    assert precision.resolve_precision("auto", "cpu") == chosen
    native, why = hardware.native_bf16("cpu")
    assert native is (chosen == "bf16") and f"bf16 measured {speedup:.2f}x the fp32 rate" in why
    assert calls == [torch.get_num_threads()]  # measured once, then read from the cache


def test_explicit_bf16_warns_only_where_it_is_slower(monkeypatch, probe, capsys):
    state, _ = probe
    monkeypatch.setattr(hardware, "cpu_features", lambda: EPYC)
    assert precision.resolve_precision("bf16", "cpu") == "bf16"
    assert capsys.readouterr().err == ""  # faster here: nothing to warn about
    monkeypatch.setattr(hardware, "cpu_features", lambda: AVX2)
    assert precision.resolve_precision("bf16", "cpu") == "bf16"
    assert precision.resolve_precision("bf16", "cpu") == "bf16"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: precision=bf16 on cpu where it is not faster than fp32")
    assert "no AVX512-BF16 and no AMX" in err[0] and "slower" in err[0]


def test_certain_answers_never_run_the_probe(monkeypatch, probe):
    _, calls = probe
    for features, chosen in ((AVX2, "fp32"), (AMX, "bf16")):
        monkeypatch.setattr(hardware, "cpu_features", lambda f=features: f)
        assert precision.resolve_precision("auto", "cpu") == chosen
    assert precision.resolve_precision("auto", "cpu", bf16_ok=False) == "fp32"  # AxoNN on a CPU
    assert precision.resolve_precision("fp32", "cpu") == "fp32"
    assert precision.resolve_precision("float32", "cpu") == "fp32"  # aliases resolve to the short form
    assert calls == []


def test_probe_is_cached_per_thread_count_and_torch_version(monkeypatch, probe, tmp_path):
    state, calls = probe
    monkeypatch.setattr(hardware, "cpu_features", lambda: EPYC)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 1, 2):
            torch.set_num_threads(threads)
            assert hardware.native_bf16("cpu")[0]
    finally:
        torch.set_num_threads(before)
    assert calls == [1, 2]
    cached = json.loads((tmp_path / "cache" / "precision" / "bf16_probe.json").read_text())
    assert len(cached) == 2 and {" 1 threads " in key for key in cached} == {True, False}
    assert all(torch.__version__ in key and hardware.cpu_model() in key for key in cached)
    monkeypatch.setattr(torch, "__version__", "9.9.9")  # another torch: measured again
    state["speedup"] = XEON_SPEEDUP
    assert not hardware.native_bf16("cpu")[0] and len(calls) == 3


def test_the_probe_measures_both_precisions():
    """The real probe on one tiny shape: both timings positive and the ratio their quotient (no timing asserted)."""
    out = hardware.measure_bf16_speedup(shapes=((8, 16, 16),), rounds=1)
    assert out["fp32_s"] > 0 and out["bf16_s"] > 0 and out["speedup"] == out["fp32_s"] / out["bf16_s"]


def test_environment_cap_reaches_auto(monkeypatch, probe):
    """The emulations the README documents: ONEDNN_MAX_CPU_ISA=AVX2 (AVX2-only CPU) and AVX512_CORE (AVX-512
    without bf16) make auto fp32 on any CPU, without running the probe."""
    _, calls = probe
    for cap in ("AVX2", "AVX512_CORE"):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
        assert hardware.cpu_features().onednn_isa_cap == cap.lower()
        assert precision.resolve_precision("auto", "cpu") == "fp32"
    assert calls == []


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
