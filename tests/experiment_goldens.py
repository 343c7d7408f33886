"""The tiny sweeps whose study outputs are pinned in ``tests/golden/experiments`` (see ``test_experiment_golden.py``).

Three sweeps stand for the shipped ones: ``demo`` (``experiments/default.yaml``: standard vs Goldfish vs control,
paper numbers, the mask-consistent attack), ``extreme`` (``experiments/extreme.yaml``: seeds, beam search and
sampling) and ``size_sweep`` (``experiments/size_sweep.yaml``: sizes, a background-trained control, the learning rate
tuned per size, canaries, sizes compared on the same targets). Each is a real run of tiny models (seconds each);
what its study outputs are computed from -- the cells' files and the prepared data, without model weights -- is
kept as ``<name>.tar.xz`` and the outputs as ``<name>/`` (``report.md``, ``results.json``, ``summary.json``,
``results.csv``), with the run's folder written as ``ROOT``. Recomputing the outputs from the archive must give the
same bytes, whatever changes in how they are computed.

    python tests/experiment_goldens.py        # rerun the sweeps and pin their outputs again (from the repo root)
    python tests/experiment_goldens.py --outputs-only extreme   # an intended change of the outputs: recompute them
                                                                 # from the pinned inputs, nothing rerun
"""

from __future__ import annotations

import io
import os
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "experiments"
OUTPUTS = ("report.md", "results.json", "summary.json", "results.csv")
SWEEPS = ("demo", "extreme", "size_sweep")
# what the study outputs are not computed from: model weights, checkpoints, plots, eval's partial files and logs, the
# per-cell eval outputs besides results.json, and the study outputs themselves
_SKIPPED_DIRS = {"model", "checkpoints"}
_SKIPPED_SUFFIXES = {".png", ".safetensors"}
_SKIPPED_NAMES = {"windows.partial.jsonl", "membership.partial.jsonl", "eval_log.jsonl", "results.csv", "report.md"}
MICRO = "experiments/micro.yaml"
_DEMO = ["paper_numbers=true", "eval.decoding.adversary=mask_consistent", "eval.mask.k=4", "eval.mask.h=13"]
_EXTREME = [
    "paper_numbers=true",
    "eval.decoding.beam=2",
    "eval.decoding.samples=2",
    "grid={seed: [{label: 0, data.seed: 0, train.seed: 0}, {label: 1, data.seed: 1, train.seed: 1}]}",
]


def _kept(path: Path, root: Path) -> bool:
    rel = path.relative_to(root)
    return not (
        set(rel.parts[:-1]) & _SKIPPED_DIRS
        or path.suffix in _SKIPPED_SUFFIXES
        or rel.name in _SKIPPED_NAMES
        or (len(rel.parts) == 1 and rel.name in OUTPUTS)
    )


def pack(out: Path, archive: Path) -> None:
    """Keep what the study outputs of the experiment folder ``out`` are computed from, as ``archive`` (tar.xz)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for path in sorted(p for p in out.rglob("*") if p.is_file() and _kept(p, out)):
            info = tar.gettarinfo(str(path), str(path.relative_to(out)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(path, "rb") as f:
                tar.addfile(info, f)
    archive.write_bytes(buf.getvalue())


def unpack(archive: Path, out: Path) -> Path:
    """Extract a pinned sweep into the (new) folder ``out``; returns it."""
    out.mkdir(parents=True)
    with tarfile.open(archive, mode="r:xz") as tar:
        tar.extractall(out, filter="data")
    return out


def normalised(text: str, root: Path) -> str:
    """An output with the experiment's folder written as ``ROOT`` (results name the prepared folders by path)."""
    return text.replace(str(root), "ROOT")


def outputs(folder: Path) -> dict[str, str]:
    """The study outputs the current code computes from an unpacked sweep (written into it): ``{file: text}``."""
    from goldfish.config import load_config
    from goldfish.experiment import ExperimentConfig, default_pipeline, plan_cells
    from goldfish.experiment.finish import finish

    cfg = load_config(ExperimentConfig, folder / "experiment.yaml", [f"out={folder}"])
    finish(cfg, plan_cells(cfg, default_pipeline()))
    return {name: (folder / name).read_text(encoding="utf-8") for name in OUTPUTS}


def run_sweep(name: str, out: Path) -> None:
    """Run one tiny sweep into ``out`` (a real experiment, from the repository root)."""
    from goldfish.cli import main

    if name == "size_sweep":
        from test_exposure_sweep import _config
        from train_helpers import word_corpus

        from goldfish.experiment.runner import run_experiment

        out.parent.mkdir(parents=True, exist_ok=True)
        word_corpus(out.parent / "docs.jsonl", 70, 40, seed=5)
        cfg = _config(out.parent)
        cfg.out = str(out)
        run_experiment(cfg, progress=False)
        return
    extra = _DEMO if name == "demo" else _EXTREME
    assert main(["experiment", MICRO, f"out={out}", *extra, "--no-progress"]) == 0


def pin(name: str, work: Path) -> None:
    """Run ``name``, keep its inputs and pin the outputs recomputed from them."""
    run = work / name / "run"
    run_sweep(name, run)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    pack(run, GOLDEN / f"{name}.tar.xz")
    pin_outputs(name, work)


def pin_outputs(name: str, work: Path) -> None:
    """Pin the outputs the current code computes from ``name``'s pinned inputs."""
    copy = unpack(GOLDEN / f"{name}.tar.xz", work / name / "copy")
    expected = GOLDEN / name
    expected.mkdir(exist_ok=True)
    for file, text in outputs(copy).items():
        (expected / file).write_text(normalised(text, copy), encoding="utf-8")


if __name__ == "__main__":
    # as the suite runs (tests/conftest.py): one thread, oneDNN capped below AVX512-BF16 so precision=auto is fp32
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")
    os.chdir(REPO)
    sys.path.insert(0, str(REPO / "tests"))
    args = sys.argv[1:]
    only_outputs = args[:1] == ["--outputs-only"]
    with tempfile.TemporaryDirectory() as tmp:
        for sweep in args[only_outputs:] or SWEEPS:
            (pin_outputs if only_outputs else pin)(sweep, Path(tmp))
