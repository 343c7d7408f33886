"""Run a function in N processes that form a gloo process group on CPU (tests of parallel layouts).

Each worker initialises ``torch.distributed`` through a file store in a temporary folder (no ports to collide on a
shared CI machine), pins torch to one thread, runs ``fn(rank, world_size, *args)`` and saves what it returns with
``torch.save``; the parent loads the results with ``weights_only=True``. A failing worker's traceback is re-raised in
the parent, so a test shows the real error instead of a hang.

It also holds what the parallel tests share: a tiny Llama, deterministic Goldfish batches, and a one-process
reference that trains the *plain* Hugging Face model (its own ``forward``, no stage wrapper, no parallelism) with the
Goldfish loss, global kept-token normalisation, gradient clipping and AdamW -- an independent implementation every
distributed layout is compared with.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tolerances import U_BF16, adamw_drift, llama_terms, rounding
from train_helpers import REPO, _free_port, cli_env, overrides_of, require_dist_marker
from transformers import LlamaConfig, LlamaForCausalLM

from goldfish.cli import main as goldfish_main
from goldfish.loss import goldfish_loss
from goldfish.masks import GoldfishConfig, config_mask


# The ranks start from a fork server that imported these once per pytest process (multiprocessing's forkserver), so
# a rank costs its test's work; a spawned rank re-imported torch, transformers' Llama and the toolkit, 3-5 s of CPU
# each (tests/test_parallel_layouts.py + test_axonn_engine.py: 75 -> 34 s of CPU, 2026-12-05). Each rank gets the
# environment of the test that starts it, as a spawned one did.
PRELOAD = [
    "torch",
    "torch.distributed.tensor",
    "transformers.models.llama.modeling_llama",
    "dist_utils",
    "goldfish.engines.native",
    "goldfish.engines.axonn",
    "goldfish.loss",
    "goldfish.train_config",
    "goldfish.train",
    "goldfish.commands.train",
    "goldfish.commands.evaluate",
    "goldfish.eval.run",
    "goldfish.eval.series",
    "goldfish.commands.prepare",
    "goldfish.data.prepare",
    "goldfish.commands.experiment",
    "goldfish.experiment.runner",
    "goldfish.experiment.dryrun",
    "goldfish.commands.doctor",
]


def _worker(rank: int, world_size: int, folder: str, fn: Callable, args: tuple, environ: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(environ, RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    out = Path(folder)
    try:
        dist.init_process_group("gloo", init_method=f"file://{out / 'store'}", rank=rank, world_size=world_size)
        result = fn(rank, world_size, *args)
        torch.save(result, out / f"result_{rank}.pt")
    except BaseException:
        (out / f"error_{rank}.txt").write_text(traceback.format_exc())
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _start(fn: Callable, args: tuple, nprocs: int, join: bool = True) -> mp.ProcessContext | None:
    mp.set_forkserver_preload(PRELOAD)  # read when the server starts: the first call of this process
    return mp.start_processes(fn, args=args, nprocs=nprocs, join=join, start_method="forkserver")


def run_distributed(fn: Callable[..., Any], world_size: int, *args: Any) -> list[Any]:
    """``[fn(rank, world_size, *args) for rank in range(world_size)]``, each in its own gloo process.

    ``fn`` must be a module-level function (it is pickled into the rank processes) and return plain values or
    tensors."""
    require_dist_marker()
    with tempfile.TemporaryDirectory(prefix="goldfish-dist-") as folder:
        try:
            _start(_worker, (world_size, folder, fn, args, dict(os.environ)), world_size)
        except (mp.ProcessRaisedException, mp.ProcessExitedException):
            errors = sorted(Path(folder).glob("error_*.txt"))
            raise RuntimeError("\n".join(p.read_text() for p in errors) or "a worker failed") from None
        return [torch.load(Path(folder) / f"result_{r}.pt", weights_only=True) for r in range(world_size)]


def _cli_process(rank: int, nproc: int | None, folder: str, argv: list[str], environ: dict[str, str], cwd: str) -> None:
    """One process of :func:`launch` (nproc ranks: torchrun's environment for this rank) or of
    :func:`run_goldfish` (nproc None: the environment as given): ``goldfish.cli.main`` as the ``goldfish`` command
    runs it, in ``cwd``, its output and exit status in files."""
    os.environ.clear()
    os.environ.update(environ)
    if nproc is not None:
        os.environ.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            GROUP_RANK="0",
            ROLE_RANK=str(rank),
            WORLD_SIZE=str(nproc),
            LOCAL_WORLD_SIZE=str(nproc),
            ROLE_WORLD_SIZE=str(nproc),
        )
    os.chdir(cwd)
    out = Path(folder)
    for stream, name in ((sys.stdout, "stdout"), (sys.stderr, "stderr")):
        stream.flush()
        file = os.open(out / f"{name}_{rank}.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(file, stream.fileno())
        os.close(file)
    code = 1
    try:
        code = goldfish_main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        atexit._run_exitfuncs()  # a multiprocessing child ends by os._exit, as goldfish.cli.run ends a launched one
        sys.stdout.flush()
        sys.stderr.flush()
        (out / f"exit_{rank}").write_text(str(code))


def _forked(
    argv: list[str], nproc: int | None, environ: dict[str, str], cwd: str | Path, timeout: float
) -> subprocess.CompletedProcess:
    """Run :func:`_cli_process` in ``nproc`` forked processes (one when None) -> the first nonzero exit status and
    the processes' stdout and stderr, the first process's first."""
    count = 1 if nproc is None else nproc
    with tempfile.TemporaryDirectory(prefix="goldfish-launch-") as folder:
        processes = _start(_cli_process, (nproc, folder, argv, environ, str(cwd)), count, join=False)
        deadline = time.monotonic() + timeout
        while not processes.join(timeout=max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                for process in processes.processes:
                    process.kill()
                raise subprocess.TimeoutExpired(["goldfish", *argv], timeout)
        out = Path(folder)
        codes = [int((out / f"exit_{r}").read_text()) for r in range(count)]
        return subprocess.CompletedProcess(
            ["goldfish", *argv],
            next((c for c in codes if c), 0),
            "".join((out / f"stdout_{r}.txt").read_text() for r in range(count)),
            "".join((out / f"stderr_{r}.txt").read_text() for r in range(count)),
        )


def launch(argv: list[str], nproc: int = 2, timeout: float = 300) -> subprocess.CompletedProcess:
    """What ``torchrun --nproc_per_node=nproc -m goldfish *argv`` runs, without torchrun's own start:
    nproc ranks forked from the preloaded server, each with the environment torchrun gives a rank (RANK, LOCAL_RANK,
    WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID; ``cli_env``'s one thread) running
    ``goldfish.cli.main`` from the repository root. Returns the first nonzero exit status (torchrun's) and the ranks'
    stdout and stderr, rank 0's first.

    torchrun's start (1-2 s of CPU) and its ranks' imports (3-5 s each) were most of these tests' CPU. Real
    launchers still run the README's torchrun and accelerate commands (tests/test_readme_commands.py), the
    distributed eval (tests/test_eval_distributed.py), the accelerate run (tests/test_train_distributed.py) and a
    killed peer (tests/test_faults_oneline.py)."""
    require_dist_marker()
    environ = dict(
        cli_env(),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        TORCHELASTIC_RUN_ID=f"goldfish-test-{os.getpid()}",
        TORCHELASTIC_RESTART_COUNT="0",
    )
    return _forked(argv, nproc, environ, REPO, timeout)


def run_goldfish(
    argv: list[str], cwd: str | Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess:
    """What the ``goldfish`` command does with ``argv`` in ``cwd`` under ``env`` (one process, no launcher), forked
    from the preloaded server instead of a new interpreter: the command's imports (torch, transformers, the
    toolkit: 3-5 s of CPU) were most of a docs command's time at smoke size. The console script itself is
    ``goldfish.cli.run``; tests/test_readme_commands.py still starts it for real once, and .ci/wheel from a wheel."""
    return _forked(argv, None, env, cwd, timeout)


def launch_train(cfg: dict, nproc: int = 2, timeout: float = 300) -> subprocess.CompletedProcess:
    """:func:`launch` of ``goldfish train key=value...``."""
    return launch(["train", *overrides_of(cfg)], nproc, timeout)


# ------------------------------------------------------------------------ tiny model, data, one-process reference

VOCAB, SEQ, ROWS, STEPS, LR, MAX_NORM = 128, 16, 8, 3, 1e-3, 0.5
# AdamW of every run here, reference and layouts alike. ε = 1e-2 bounds how far a gradient's rounding difference can
# move a weight ((1 + C)/ε per step, tolerances.adamw_drift); at the default 1e-8 a weight whose gradient is near ε
# can move by a good part of lr.
EPS, BETAS = 1e-2, (0.9, 0.999)


def adamw(params) -> torch.optim.Optimizer:
    """The optimizer of every run here."""
    return torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS)


def tiny_config(layers: int = 2, tied: bool = False) -> LlamaConfig:
    """Hidden 32, 4 query heads / 2 KV heads (grouped-query attention), eager attention, fp32."""
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=tied,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
    )
    cfg._attn_implementation = "eager"
    return cfg


def build_model(cfg: LlamaConfig, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).float()


def global_batches(
    steps: int = STEPS, rows: int = ROWS, seed: int = 1, packed: bool = False
) -> list[dict[str, torch.Tensor]]:
    """One global batch per step: ids, labels (first 3 targets of odd rows unsupervised), Goldfish drop mask, and
    with ``packed`` the ``position_ids`` of two documents per row (positions restart at token 6)."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(steps):
        ids = torch.randint(0, VOCAB, (rows, SEQ), generator=g)
        labels = ids.clone()
        labels[1::2, :3] = -100
        batch = {"input_ids": ids, "labels": labels}
        if packed:
            batch["position_ids"] = torch.cat([torch.arange(6), torch.arange(SEQ - 6)]).expand(rows, SEQ).clone()
        batch["drop_mask"] = config_mask(labels, GoldfishConfig(k=3, h=2), position_ids=batch.get("position_ids"))
        batches.append(batch)
    return batches


def kept_count(batch: dict[str, torch.Tensor]) -> int:
    """Global normaliser: supervised, kept targets after the causal shift."""
    return int(((batch["labels"][:, 1:] != -100) & ~batch["drop_mask"][:, 1:]).sum())


def reference_run(cfg: LlamaConfig, micro_rows: int = 2, packed: bool = False) -> dict:
    """Train the plain HF model in one process; returns per-step stats, grad norms, final weights, how far each
    weight moved, and the scales the tolerances are relative to: the largest |logit| and, per weight, the largest
    |clipped gradient| over the steps."""
    model = build_model(cfg)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    opt = adamw(model.parameters())
    losses, norms, logit_scale, grad_scale = [], [], 0.0, {}
    for batch in global_batches(packed=packed):
        normalizer = kept_count(batch)
        stats = torch.zeros(4, dtype=torch.float64)
        for start in range(0, ROWS, micro_rows):
            mb = {k: v[start : start + micro_rows] for k, v in batch.items()}
            # use_cache=False as in training: HF then masks attention across packed documents (position_ids restart)
            logits = model(input_ids=mb["input_ids"], position_ids=mb.get("position_ids"), use_cache=False).logits
            logit_scale = max(logit_scale, float(logits.detach().abs().max()))
            out = goldfish_loss(logits, mb["labels"], drop_mask=mb["drop_mask"])
            (out.kept_sum / normalizer).backward()
            stats += torch.stack(
                [
                    out.kept_sum.detach().double(),
                    out.kept_count.double(),
                    out.dropped_sum.double(),
                    out.dropped_count.double(),
                ]
            )
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)))
        for name, p in model.state_dict(keep_vars=True).items():  # tied weights: both names, one gradient
            grad_scale[name] = max(grad_scale.get(name, 0.0), float(p.grad.abs().max()))
        opt.step()
        opt.zero_grad()
        losses.append(stats)
    return {
        "stats": torch.stack(losses),
        "norms": torch.tensor(norms, dtype=torch.float64),
        "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "logit_scale": logit_scale,
        "grad_scale": grad_scale,
        "moved": {k: float((v - init[k]).abs().max()) for k, v in model.state_dict().items()},
    }


# ------------------------------------------------------------------ how close a layout must come to the reference


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """What rounding allows between a layout and the one-process reference (tests/tolerances.py)."""

    loss: float  # absolute, per-step mean kept / dropped loss
    norm: float  # relative, per-step gradient norm before clipping
    weight: dict[str, float]  # absolute, final weights, by name


def parity_tolerance(ref: dict, layers: int = 2, precision: str = "fp32") -> Tolerance:
    """A layout sums what the reference sums, split across ranks, stages or chunks: the same values rounded in
    another order.

    fp32: one step's gradient carries n = 2·forward + ROWS·SEQ rounded terms (each target's path through the model,
    forward and backward, summed over the step's targets); to first order a value after STEPS steps carries the
    rounding of every earlier step's gradient besides its own (tolerances.rounding assumes each rounding moves the
    result by at most its own size relative to the result's scale: the well-conditioned case AdamW's ε = 1e-2
    secures for the weights). A gradient component's rounding is relative to its terms' scale, taken per weight as
    the reference's largest |clipped gradient| of that weight.

    bf16 (autocast or bf16 parameters): each of the 9 matmuls per layer and the head rounds its two operands to 8
    bits, relative 2^-8 on its products, while fp32 accumulation adds nothing comparable; a logit carries those
    roundings relative to the logits' scale, and a cross-entropy moves by at most twice its logits' error. Those
    bounds (tens of percent on a gradient) exceed AdamW's largest move over STEPS steps, so bf16 weights are not
    compared at all."""
    forward = llama_terms(hidden=32, intermediate=64, layers=layers, head_dim=8, seq=SEQ, vocab=VOCAB)
    step_terms = 2 * forward + ROWS * SEQ
    params = sum(w.numel() for w in ref["weights"].values())
    top_loss = float((ref["stats"][:, 0] / ref["stats"][:, 1]).max())
    loss = rounding((STEPS - 1) * step_terms + forward + ROWS * SEQ) * top_loss
    step_grad, grad = rounding(step_terms), rounding(STEPS * step_terms)  # relative, one step's and all steps'
    if precision == "bf16":
        operands = 2 * (9 * layers + 1)  # bf16 roundings along one token's forward path
        loss += 2 * rounding(operands, U_BF16) * ref["logit_scale"]
        step_grad += rounding(2 * operands, U_BF16)
        grad += rounding(2 * operands, U_BF16)
    norm = grad + rounding(params)
    weight = {
        name: adamw_drift(
            [LR] * STEPS, step_grad * ref["grad_scale"][name], EPS, BETAS, norm, weight_scale=float(w.abs().max())
        )
        for name, w in ref["weights"].items()
    }
    # every weight moved further than its tolerance: a layout that skipped an update cannot pass the comparison
    assert precision == "bf16" or all(ref["moved"][name] > weight[name] for name in weight), (ref["moved"], weight)
    return Tolerance(loss, norm, weight)


def assert_stats_close(got: torch.Tensor, want: torch.Tensor, tol: Tolerance) -> None:
    """(steps, 4) stats: counts exactly; the kept (trained) and dropped (measured) mean losses within ``tol.loss``."""
    torch.testing.assert_close(got[:, [1, 3]], want[:, [1, 3]], atol=0, rtol=0)
    means = lambda s: torch.stack([s[:, 0] / s[:, 1], s[:, 2] / s[:, 3]], dim=1)  # noqa: E731
    torch.testing.assert_close(means(got), means(want), atol=tol.loss, rtol=0)
