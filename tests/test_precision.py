"""precision=auto by rule from what the hardware reports (injected, never timed), threads that fit the machine,
and MFU that cannot exceed 100 %."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from train_helpers import tiny_config

from goldfish import hardware, precision
from goldfish.cli import main
from goldfish.config import from_dict
from goldfish.errors import UserError
from goldfish.provenance import read_fingerprint
from goldfish.io import read_jsonl
from goldfish.hardware import CpuFeatures, gpu_peak_flops, gpu_spec
from goldfish.perf import MfuMeter
from goldfish.train import train
from goldfish.train_config import TrainConfig

AMX = CpuFeatures(
    amx=True, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap=None, vendor="GenuineIntel", family=6
)
# this machine's class (issue 34): a 2-core AMD EPYC (Zen 4, family 25) with AVX512-BF16 and no AMX
EPYC = CpuFeatures(
    amx=False, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap=None, vendor="AuthenticAMD", family=25
)
# a Xeon whose AMX its hypervisor hid (measured: a bf16 GEMM at 0.9x fp32, a SmolLM2 step at 1/1.8x)
XEON_HIDDEN = CpuFeatures(
    amx=False, avx512_bf16=True, aten_capability="AVX512", onednn_isa_cap=None, vendor="GenuineIntel", family=6
)
AVX2 = CpuFeatures(
    amx=False, avx512_bf16=False, aten_capability="AVX2", onednn_isa_cap=None, vendor="GenuineIntel", family=6
)


@pytest.fixture
def never_timed(monkeypatch):
    """Any timing taken while resolving a precision fails the test: auto is a rule."""
    monkeypatch.setattr(precision, "_WARNED", set())
    monkeypatch.setattr(precision, "_ANNOUNCED", set())

    def timed(*a, **k):
        raise AssertionError("precision=auto took a timing")

    monkeypatch.setattr(hardware, "measure_bf16_speedup", timed)


@pytest.mark.parametrize(
    "features, bf16",
    [
        (AMX, True),
        (EPYC, True),  # the table's AMD Zen 4 row, measured 3.7-4.9x
        (XEON_HIDDEN, False),  # the table's Intel row, measured 0.9x
        (dataclasses.replace(EPYC, vendor="HygonGenuine", family=24), False),  # not in the table: fp32
        (dataclasses.replace(EPYC, family=26), False),  # AMD Zen 5: not measured by the project, so not in the table
        (AVX2, False),  # AVX2 laptop: bf16 emulated
        (CpuFeatures(amx=False, avx512_bf16=False, aten_capability="AVX512", onednn_isa_cap=None), False),  # AVX-512
        # AMX hidden by the runtime: ATen at AVX2, or oneDNN capped below AMX -> the class's row (Intel: fp32)
        (dataclasses.replace(AMX, aten_capability="AVX2"), False),
        (dataclasses.replace(AMX, onednn_isa_cap="avx2"), False),
        (dataclasses.replace(AMX, onednn_isa_cap="avx512_core"), False),
        (dataclasses.replace(AMX, onednn_isa_cap="avx512_core_bf16"), False),
        (dataclasses.replace(AMX, onednn_isa_cap="avx512_core_amx"), True),
        (dataclasses.replace(AMX, onednn_isa_cap="all"), True),
        (dataclasses.replace(EPYC, onednn_isa_cap="avx512_core"), False),  # the cap emulates an AVX-512-only CPU
    ],
)
def test_cpu_rule_decides_every_class_without_a_timing(features, bf16, never_timed):
    decided, why = features.bf16_rule()
    assert decided is bf16 and why


def test_the_table_rows_say_what_was_measured(never_timed):
    assert EPYC.cpu_class().name == "AMD Zen 4" and "3.7-4.9x" in EPYC.bf16_rule()[1]
    assert XEON_HIDDEN.cpu_class().bf16 is False and "0.9x" in XEON_HIDDEN.bf16_rule()[1]
    unknown = dataclasses.replace(EPYC, family=26).bf16_rule()[1]
    assert "not in goldfish.hardware.CPU_CLASSES" in unknown and "goldfish doctor" in unknown


@pytest.mark.parametrize("features, chosen", [(EPYC, "bf16"), (XEON_HIDDEN, "fp32"), (AMX, "bf16"), (AVX2, "fp32")])
def test_auto_is_the_same_on_every_thread_count_and_load(monkeypatch, never_timed, features, chosen):
    """The issue's failure: a timed probe chose fp32 at 2 threads under load and bf16 at 1 thread. By rule, the
    answer cannot depend on either (any timing would fail through never_timed)."""
    monkeypatch.setattr(hardware, "cpu_features", lambda: features)
    before = torch.get_num_threads()
    try:
        answers = set()
        for threads in (1, 2, 1):
            torch.set_num_threads(threads)
            answers.add(precision.resolve_precision("auto", "cpu"))
    finally:
        torch.set_num_threads(before)
    assert answers == {chosen}


def test_auto_is_announced_once_with_its_reason(monkeypatch, never_timed, capsys):
    monkeypatch.setattr(hardware, "cpu_features", lambda: EPYC)
    for _ in range(2):
        precision.announce("auto", "cpu")
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"precision: auto -> bf16 (cpu: {EPYC.bf16_rule()[1]})"]
    precision.announce("auto", "cpu", bf16_ok=False)  # AxoNN on a CPU
    assert capsys.readouterr().err.strip() == "precision: auto -> fp32 (cpu: the engine computes in fp32 here)"
    precision.announce("fp32", "cpu")  # chosen, not resolved: nothing to say
    precision.announce("checkpoint", "cpu")
    assert capsys.readouterr().err == ""


def test_a_training_run_announces_auto_after_its_checks(tmp_path, data, capsys, monkeypatch):
    """The line comes when the run is about to compute, so a refused config still prints one error line only
    (tests/test_train_config.py test_cli_errors_are_one_line)."""
    monkeypatch.setattr(precision, "_ANNOUNCED", set())
    train(from_dict(TrainConfig, tiny_config(data, tmp_path / "run", precision="auto", schedule__max_steps=1)))
    chosen = precision.resolve_precision("auto", "cpu")
    assert f"precision: auto -> {chosen} (cpu: {hardware.native_bf16('cpu')[1]})" in capsys.readouterr().err


def test_explicit_bf16_warns_only_where_it_is_slower(monkeypatch, never_timed, capsys):
    monkeypatch.setattr(hardware, "cpu_features", lambda: EPYC)
    assert precision.resolve_precision("bf16", "cpu") == "bf16"
    assert capsys.readouterr().err == ""  # faster here: nothing to warn about
    monkeypatch.setattr(hardware, "cpu_features", lambda: AVX2)
    assert precision.resolve_precision("bf16", "cpu") == "bf16"
    assert precision.resolve_precision("bf16", "cpu") == "bf16"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: precision=bf16 on cpu where it is not faster than fp32")
    assert "no AVX512-BF16 and no AMX" in err[0] and "slower" in err[0]
    assert precision.resolve_precision("fp32", "cpu") == "fp32"
    assert precision.resolve_precision("float32", "cpu") == "fp32"  # aliases resolve to the short form


def test_the_doctor_measures_both_precisions():
    """The doctor's reading on one tiny shape: both timings positive and the ratio their quotient (no timing
    asserted); runs never read it (test_cpu_rule_decides_every_class_without_a_timing)."""
    out = hardware.measure_bf16_speedup(shapes=((8, 16, 16),), rounds=1)
    assert out["fp32_s"] > 0 and out["bf16_s"] > 0 and out["speedup"] == out["fp32_s"] / out["bf16_s"]


def test_doctor_reports_what_auto_and_threads_choose(capsys, never_timed):
    assert main(["doctor", "--no-measure", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["precision_auto"] == precision.resolve_precision("auto", "cpu")
    assert out["default_threads"] == hardware.default_threads() and "bf16_measured" not in out
    assert out["reason"] == hardware.native_bf16("cpu")[1]


def test_environment_cap_reaches_auto(monkeypatch, never_timed):
    """The emulations the README documents: ONEDNN_MAX_CPU_ISA=AVX2 (AVX2-only CPU) and AVX512_CORE (AVX-512
    without bf16) make auto fp32 on any CPU."""
    for cap in ("AVX2", "AVX512_CORE"):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
        assert hardware.cpu_features().onednn_isa_cap == cap.lower()
        assert precision.resolve_precision("auto", "cpu") == "fp32"


# ------------------------------------------------------------------------------------------------ threads

# two packages of two cores with two hardware threads each (8 logical CPUs), as /proc/cpuinfo lists them
CPUINFO = "\n\n".join(
    f"processor\t: {cpu}\nphysical id\t: {cpu // 4}\ncore id\t\t: {cpu % 4 // 2}\n" for cpu in range(8)
)


def test_physical_cores_counts_cores_not_hardware_threads(monkeypatch):
    monkeypatch.setattr(hardware, "_cgroup_cpus", lambda: None)
    assert hardware.physical_cores(CPUINFO, set(range(8))) == 4
    assert hardware.physical_cores(CPUINFO, {0, 1}) == 1  # both threads of one core
    assert hardware.physical_cores(CPUINFO, {0, 2, 5}) == 3
    assert hardware.physical_cores("", {0, 1, 2}) == 3  # nothing in cpuinfo: the logical CPUs allowed
    monkeypatch.setattr(hardware, "_cgroup_cpus", lambda: 1.5)  # a container's quota of 1.5 CPUs
    assert hardware.physical_cores(CPUINFO, set(range(8))) == 2


def test_default_threads_never_oversubscribe(monkeypatch):
    monkeypatch.setattr(hardware, "physical_cores", lambda: 4)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert hardware.default_threads() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two ranks of a launch on this node share the cores
    assert hardware.default_threads() == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert hardware.default_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's setting wins
    assert hardware.default_threads() == 3
    before = torch.get_num_threads()
    try:
        assert hardware.apply_threads(None) == 3 and torch.get_num_threads() == 3
        assert hardware.apply_threads(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_the_command_sleeps_its_openmp_threads_unless_told(tmp_path):
    """`goldfish` sets OMP_WAIT_POLICY=PASSIVE before torch loads (spinning threads starve a shared core), and
    leaves a user's own policy alone: checked in fresh processes, where torch is not yet imported."""
    import os
    import subprocess
    import sys

    code = (
        "import os, sys; from goldfish.cli import passive_openmp; assert 'torch' not in sys.modules; "
        "passive_openmp(); print(os.environ.get('OMP_WAIT_POLICY'))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert plain.stdout.strip() == "PASSIVE"
    own = subprocess.run(
        [sys.executable, "-c", code],
        env=env | {"OMP_WAIT_POLICY": "ACTIVE"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert own.stdout.strip() == "ACTIVE"


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


@pytest.mark.parametrize(
    "name, kind",
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100"),
        ("AMD Instinct MI250X", "mi250x-gcd"),
        ("AMD Instinct MI300X", "mi300x"),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
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
    monkeypatch.setattr(
        perf,
        "_best_rate",
        lambda product, size, device, seconds: seen.append(product) or (1.0 if len(seen) == 1 else 7.0),
    )
    assert perf.measure_matmul_peak(torch.float32, "cpu", size=8, seconds=0.01) == 7.0
    assert len(seen) == 2


def test_a_launch_whose_ranks_resolve_differently_is_refused(monkeypatch):
    """One launch computes in one precision: ranks on machines of different classes (all-gathered here by a fake
    collective) are refused in one line naming which rank chose what."""
    import torch.distributed as dist

    from goldfish.train import _same_precision_everywhere

    gathered = ["bf16", "bf16", "fp32", "bf16"]
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda: len(gathered))
    monkeypatch.setattr(dist, "all_gather_object", lambda out, value: out.__setitem__(slice(None), gathered))
    with pytest.raises(UserError, match=r"bf16 on ranks \[0, 1, 3\], fp32 on ranks \[2\].*set precision=fp32"):
        _same_precision_everywhere("bf16")
    gathered[2] = "bf16"
    _same_precision_everywhere("bf16")  # all alike: nothing to say
