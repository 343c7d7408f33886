"""The ``goldfish`` command: thin subcommands, each living in its own module.

Every subcommand module exposes ``DESCRIPTION`` (a docstring-style help with copy-pasteable examples),
``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only when their command runs, so
``goldfish --help`` is instant and a missing optional dependency only affects the command that needs it.

User errors (:class:`goldfish.errors.UserError`, and the failures :func:`goldfish.errors.one_line` maps: a missing
input, a full disk, a read-only folder, no CUDA) print one line, ``error: ...``, and exit with status 2 -- no
traceback; under ``torchrun`` / ``accelerate launch`` the first process (``RANK`` 0) prints it and every process
exits with status 2.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import logging
import os
import sys
import threading
from typing import NoReturn

from . import __version__
from .errors import one_line, peer_lost
from .ownership import is_main_process, launched

# name -> (module, one-line summary)
COMMANDS: dict[str, tuple[str, str]] = {
    "mask": ("goldfish.commands.mask", "show which tokens of a text the Goldfish mask drops"),
    "prepare": ("goldfish.commands.prepare", "build a memorization dataset (members, nonmembers, packed train rows)"),
    "train": ("goldfish.commands.train", "train a Llama (standard or Goldfish loss) on one CPU or many GPUs"),
    "eval": ("goldfish.commands.evaluate", "measure extraction and membership inference on any checkpoint"),
    "experiment": ("goldfish.commands.experiment", "run a grid of prepare -> train -> eval cells and aggregate them"),
    "doctor": ("goldfish.commands.doctor", "report this machine: device, what precision auto and threads choose, why"),
}


def _top_help() -> str:
    lines = ["usage: goldfish COMMAND [options]   (goldfish COMMAND --help for details)", "", "commands:"]
    lines += [f"  {name:<11} {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def passive_openmp() -> None:
    """Let torch's OpenMP threads sleep, not spin, while they wait (``OMP_WAIT_POLICY=PASSIVE``), unless the user
    chose a wait policy or a spin count. Set before torch is first imported (OpenMP reads it when it loads), so the
    ``goldfish`` command's processes and the ranks it launches inherit it. Why: on cores shared with another job,
    threads that spin at every barrier take the time the descheduled one needs -- measured on 2 cores beside one
    CPU-bound process, greedy generation of a SmolLM2-shaped model ran 3.4x slower than idle when spinning, 1.4x when
    sleeping; idle, sleeping costs 10-25 % (docs/troubleshooting.md)."""
    if "torch" in sys.modules or "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


def main(argv: list[str] | None = None) -> int:
    passive_openmp()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_top_help())
        return 0
    if argv[0] == "--version":
        print(__version__)
        return 0
    name = argv[0]
    if name not in COMMANDS:
        print(f"error: unknown command '{name}'; choose one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    # Deliberately lazy (start-up speed): only the chosen subcommand's module is imported, and each subcommand
    # imports its heavy modules (torch, transformers, the trainer) inside ``run``; the import-graph test
    # (tests/test_architecture.py) still sees these edges and checks they point down the layers.
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(
        prog=f"goldfish {name}",
        description=module.DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(parser)
    # intermixed: `key=value` overrides may come before or after --flags
    args = parser.parse_intermixed_args(argv[1:])
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        message = one_line(e)
        if message is None:
            raise  # a bug: keep the traceback
        # under torchrun/accelerate every process meets it: one line, by the first process -- but a process that
        # lost a peer says so itself (the first process may be the one that died)
        if is_main_process() or peer_lost(e):
            print(f"error: {message}", file=sys.stderr)
        return 2


def run() -> NoReturn:
    """The ``goldfish`` command and ``python -m goldfish``: :func:`main`, then this process's exit.

    A process of a torchrun / accelerate launch (``WORLD_SIZE`` > 1) ends by ``os._exit`` once what a normal exit
    does first is done: its non-daemon threads joined, its atexit functions run (wandb, the GGUF cache's scratch),
    its logs and streams flushed. Why: with DDP, torch 2.13 keeps a gloo process group alive after
    ``destroy_process_group``, and a gloo worker thread may free the last backward's all-reduce late. That work holds
    the backward's Python context, and freeing it takes the GIL; during interpreter shutdown that ends the thread
    inside a destructor -- ``std::terminate``, SIGABRT, and the launcher reports a finished run as failed (1 in ~20
    2-process runs on 2 loaded cores, 2026-12-05; gdb: ``ProcessGroupGloo::runLoop`` -> ``~AsyncAllreduceWork``
    -> ``~ThreadLocalState`` -> ``SafePyObject`` decref -> ``take_gil`` -> ``pthread_exit``). Everything the run
    writes is written before this point."""
    code = main()
    if launched():
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
