"""Tiny prepared folders and configs for the trainer tests (no network, a few KB each).

``make_prepared`` writes the ``goldfish-prepared/2`` layout (manifest, tokenizer/, members/, nonmembers/, train/)
with a word-level tokenizer and packed rows: several random documents per row, each ended by EOS, ``position_ids``
restarting per document, ``document_ids`` per document, and padding (-100 labels) at the end of a row.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from pytest import approx
from tolerances import adamw_drift, llama_terms, rounding

PAD, EOS, BOS = 0, 1, 2
REPO = Path(__file__).resolve().parents[1]
DIST_MARKED = [False]  # set by conftest.pytest_runtest_setup: is the running test marked ``dist``?


def require_dist_marker() -> None:
    """Fail a test that starts a process group (gloo ranks or torchrun) without ``@pytest.mark.dist``."""
    if not DIST_MARKED[0]:
        raise AssertionError(
            "this test starts several processes: mark it @pytest.mark.dist (make test-fast skips those)"
        )


def _tokenizer(vocab: int, folder: Path) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<eos>", "<bos>"] + [f"w{i}" for i in range(3, vocab)]
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    tok.pre_tokenizer = WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")
    fast.save_pretrained(str(folder))


def _greedy_starts(lengths: list[int], seq_len: int) -> np.ndarray:
    """First slot of each document packed greedily (each <= seq_len): one that does not fit in the rest of a row
    starts the next row, whose rest is padding."""
    starts, used, row = [], 0, 0
    for n in lengths:
        if used + n > seq_len:
            row, used = row + 1, 0
        starts.append(row * seq_len + used)
        used += n
    return np.asarray(starts, dtype=np.int64)


WORDS = (
    "river stone light north market garden winter letter silver engine harbor forest paper window "
    "morning voice island bridge valley castle thunder mirror candle meadow planet signal"
).split()


def word_corpus(path: str | Path, documents: int, words: int, seed: int) -> Path:
    """A JSONL corpus of ``documents`` texts of ``words`` random words each (ids d0, d1, ...): a `local` source."""
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(documents):
            f.write(json.dumps({"id": f"d{i}", "text": " ".join(rng.choice(WORDS, words))}) + "\n")
    return Path(path)


def make_prepared(folder: str | Path, rows: int = 16, seq_len: int = 32, vocab: int = 64, seed: int = 0) -> Path:
    """Write a prepared folder with ``rows`` packed training rows; returns its path. The documents (each ending in
    its own EOS id) are stored once in a token shard, laid out greedily in order (document d has document_ids d)."""
    import pyarrow as pa

    from goldfish.data.prepared import train_sha256
    from goldfish.data.prepared import DOC_COLUMNS, FORMAT, save_table
    from goldfish.data.tokens import file_sha256, write_file, write_shard

    folder = Path(folder)
    rng = np.random.default_rng(seed)
    docs = []
    while len(docs) < rows * 3:
        length = int(rng.integers(seq_len // 4, seq_len // 2))
        docs.append(np.append(rng.integers(3, vocab, size=length - 1), EOS))
    starts = _greedy_starts([len(d) for d in docs], seq_len)
    used = int(np.searchsorted(starts, rows * seq_len))  # the documents of the first `rows` rows
    docs, starts = docs[:used], starts[:used]
    folder.mkdir(parents=True, exist_ok=True)
    write_shard(folder / "train", "targets", docs, np.dtype("<u2"))
    write_file(folder / "train" / "order.npy", np.arange(used, dtype=np.int64))
    write_file(folder / "train" / "starts.npy", starts)
    for split in ("members", "nonmembers"):
        ids = [d.tolist() for d in docs[:2]]
        cols = {
            "id": [f"{split}{i}" for i in range(2)],
            "title": ["t", "t"],
            "source": ["test", "test"],
            "text": [" ".join(f"w{i}" for i in d) for d in ids],
            "input_ids": pa.array(ids, pa.list_(pa.int64())),
            "repetitions": [1 if split == "members" else 0] * 2,
            "split": [split] * 2,
        }
        save_table({c: cols[c] for c in DOC_COLUMNS}, folder / split)
    _tokenizer(vocab, folder / "tokenizer")
    files = {f"{sub}/{f.name}": file_sha256(f) for sub in ("tokenizer", "train") for f in (folder / sub).iterdir()}
    stores = [{"path": "train/targets", "documents": used}]
    train = {
        "dtype": "uint16",
        "seq_len": seq_len,
        "packing": "one_per_row",
        "eos_id": EOS,
        "pad_id": PAD,
        "rows": rows,
        "tokens": int(sum(len(d) for d in docs)),
        "occurrences": used,
        "variants": 0,
        "stores": stores,
    }  # one_per_row: the documents carry their EOS, none is added
    manifest = {
        "format": FORMAT,
        "name": "test",
        "seq_len": seq_len,
        "packing": "pack",
        "tokenizer": {"name": "wordlevel", "vocab_size": vocab, "eos_id": EOS, "bos_id": BOS, "pad_id": PAD},
        "counts": {"members": 2, "nonmembers": 2, "train": rows},
        "files": files,
        "train": train,
        "sha256": {"train": train_sha256(files, stores)},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


# rounded terms along one token's forward path through tiny_config's model (hidden 32, MLP 64, 2 layers, 2 heads of
# 16, rows of 32 positions, vocabulary 64); tests/tolerances.py turns counts of terms into tolerances
TINY_FORWARD = llama_terms(hidden=32, intermediate=64, layers=2, head_dim=16, seq=32, vocab=64)


STEP_KEYS = ("loss", "kept_loss", "dropped_loss", "grad_norm")  # the rounded values a metrics.jsonl record logs


def step_tolerance(key: str, step: int, tokens: int, params: int) -> float:
    """Relative difference allowed in a logged value of tiny_config's model at ``step`` (from 1) between two runs
    that round differently (another split of the batch, another kernel or instruction set).

    One step's gradient carries n = 2·TINY_FORWARD + ``tokens`` rounded terms (each target's path forward and
    backward, summed over the step's targets) and moves the weights every later value is computed from, so to first
    order a value at step t carries the rounding of t - 1 earlier gradients besides its own: a loss its targets'
    forward paths and their sum, the gradient norm its step's gradient and a sum of squares over ``params``."""
    step_terms = 2 * TINY_FORWARD + tokens
    earlier = (step - 1) * step_terms
    if key == "grad_norm":
        return rounding(earlier + step_terms) + rounding(params)
    return rounding(earlier + TINY_FORWARD + tokens)


def assert_same_training(run_a: Path, run_b: Path, eps: float, tokens: int) -> None:
    """Two runs of tiny_config's model from the same weights on the same batches that round differently: the same
    token counts, every step's logged values within :func:`step_tolerance` and final weights within
    :func:`tolerances.adamw_drift` (``eps``: the runs' AdamW ε; ``tokens``: targets per step)."""
    from goldfish.io import read_jsonl
    from goldfish.train_config import OptimConfig

    ra, rb = read_jsonl(Path(run_a) / "metrics.jsonl"), read_jsonl(Path(run_b) / "metrics.jsonl")
    assert [(r["kept_tokens"], r["dropped_tokens"], r["lr"]) for r in ra] == [
        (r["kept_tokens"], r["dropped_tokens"], r["lr"]) for r in rb
    ]
    a, b = load_weights(run_a), load_weights(run_b)
    assert a.keys() == b.keys()
    params = sum(t.numel() for t in a.values())
    for step, (x, y) in enumerate(zip(ra, rb), start=1):
        for key in STEP_KEYS:
            if x[key] is None:  # no dropped targets: the standard loss
                assert y[key] is None, (step, key)
            else:
                assert y[key] == approx(x[key], rel=step_tolerance(key, step, tokens, params), abs=0), (step, key)
    # a clipped gradient has |g_i| <= ||g|| <= max_grad_norm, so a component differs by at most rounding(n) times
    # that per step; AdamW turns it into at most adamw_drift(...) per weight
    optim, n = OptimConfig(), 2 * TINY_FORWARD + tokens
    drift = adamw_drift(
        [r["lr"] for r in ra],
        rounding(n) * optim.max_grad_norm,
        eps,
        optim.betas,
        norm_error=rounding(n) + rounding(params),
        weight_scale=max(t.abs().max().item() for t in a.values()),
    )
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst <= drift, (worst, drift)


def tiny_config(data: Path, out: Path, **overrides) -> dict:
    """A config dict for a ~30 k-parameter model that trains in well under a second per step on one core."""
    cfg = {
        "data": {"path": str(data)},
        "model": {"name": "llama-demo", "hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64},
        "optim": {"lr": 1e-2, "warmup_steps": 2},
        "schedule": {"max_steps": 6, "global_batch_size": 4, "micro_batch_size": 4},
        "checkpoint": {"every_steps": 0},
        "out": str(out),
        "progress": False,
        "log_every": 1000,
    }
    for dotted, value in overrides.items():
        node = cfg
        *parents, last = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return cfg


def overrides_of(cfg: dict, prefix: str = "") -> list[str]:
    """A nested config dict as ``key=value`` command-line overrides."""
    out = []
    for key, value in cfg.items():
        if isinstance(value, dict):
            out += overrides_of(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={json.dumps(value)}")
    return out


def cli_env() -> dict:
    """Environment for ``goldfish`` subprocesses: one thread (bit-identical numerics across processes)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_train(cfg: dict, nproc: int = 2, timeout: int = 300) -> subprocess.CompletedProcess:
    """``accelerate launch --multi_gpu --num_processes nproc -m goldfish train key=value...`` on a free local port
    (``--multi_gpu`` is accelerate's torchrun launcher; on CPUs the processes join with gloo)."""
    require_dist_marker()
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        f"--num_processes={nproc}",
        "--num_machines=1",
        "--mixed_precision=no",
        "--dynamo_backend=no",
        f"--main_process_port={_free_port()}",
        "-m",
        "goldfish",
        "train",
        *overrides_of(cfg),
    ]
    return subprocess.run(cmd, env=cli_env(), cwd=REPO, capture_output=True, text=True, timeout=timeout)


def load_weights(run: str | Path) -> dict:
    """The exported model's tensors (``<run>/model/model.safetensors``)."""
    from safetensors.torch import load_file

    return load_file(str(Path(run) / "model" / "model.safetensors"))


def run_micro_experiment(out: Path, *overrides: str) -> int:
    """``goldfish experiment experiments/micro.yaml out=<out> <overrides> --no-progress`` from the repository root
    (the recipe paths in the config are relative to it); returns the exit code."""
    from goldfish.cli import main

    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        return main(["experiment", "experiments/micro.yaml", f"out={out}", *overrides, "--no-progress"])
    finally:
        os.chdir(cwd)


# the session's one real micro experiment (conftest's ``micro_sweep``): every override a test of a real micro
# experiment reads -- beam search and samples (the adaptive-decoding summaries), an equivalence margin (the
# membership comparison), TensorBoard logging where it is installed (each cell a run of the experiment)
MICRO_EVAL = ("eval.decoding.beam=2", "eval.decoding.samples=2", "equivalence.margin=0.1")
MICRO_LOGGED = ("train.logging.tensorboard=true",) if importlib.util.find_spec("tensorboard") else ()
MICRO_OVERRIDES = MICRO_EVAL + MICRO_LOGGED
LOADS: dict[str, list[str]] = {}  # run -> the model paths load_pretrained read during it, in order
SCORED: dict[str, Counter] = {}  # run -> how often each whole document (its tokens) went through the model


def run_counting_loads(out: Path, run: str, *overrides: str) -> int:
    """:func:`run_micro_experiment`, counting into ``LOADS[run]`` the models it loads and into ``SCORED[run]`` the
    whole-document scoring passes."""
    import pytest

    from goldfish.eval import loading, membership, scoring

    real, passes = loading.load_pretrained, scoring.iter_token_statistics
    LOADS[run], SCORED[run] = [], Counter()

    def counting(model, docs, **kwargs):
        if kwargs.get("first") is None:  # whole documents (extraction and the k baseline score windows' suffixes)
            SCORED[run].update(tuple(int(t) for t in d) for d in docs)
        return passes(model, docs, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            loading, "load_pretrained", lambda path, *a, **k: LOADS[run].append(str(path)) or real(path, *a, **k)
        )
        mp.setattr(scoring, "iter_token_statistics", counting)  # token_statistics' pass, and membership's:
        mp.setattr(membership, "iter_token_statistics", counting)
        return run_micro_experiment(out, *overrides)


def one_error(capsys, *needles: str) -> str:
    """The one ``error:`` line a command printed (no traceback), holding every needle."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
