"""Probe cases of families 1-4: what lies beside an output folder, lock files, folders goldfish did not make, and
replacements that must not remove the old output before they succeed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from harness import (
    Probe,
    Unchanged,
    case,
    corpus,
    eval_argv,
    exists,
    fail,
    goldfish,
    in_child,
    ok,
    one_error,
    prepare_argv,
    train_argv,
    tree,
)

# ------------------------------------------------------------------------------------------------ 1 debris


def _look_alikes(p: Probe, out: Path) -> list[Path]:
    """The user's folders named like goldfish's debris of ``out``: ``.<out>.old``, ``.<out>.<x>.tmp``, and an
    ``.<out>.old`` that is a file."""
    made = [
        p.user_folder(out.parent / f".{out.name}.old"),
        p.user_folder(out.parent / f".{out.name}.mine.tmp"),
        p.user_folder(out.parent / f".{out.name}.k2j4.old"),
    ]
    return made


@case("1", fast=True)
def train_failing_at_once_keeps_look_alikes_beside_out(p: Probe) -> None:
    out = p.work / "run"
    looks = _look_alikes(p, out)
    with Unchanged(*looks):
        one_error(goldfish(*train_argv(p.work / "typo", out)), "prepared data not found")
    exists(out, False)


@case("1")
def train_succeeding_keeps_look_alikes_beside_out(p: Probe) -> None:
    out = p.work / "run"
    looks = _look_alikes(p, out)
    with Unchanged(*looks):
        ok(goldfish(*train_argv(p.prepared, out, schedule__max_steps=2)))


@case("1")
def overwrite_keeps_look_alikes_beside_out(p: Probe) -> None:
    run = p.run()
    looks = _look_alikes(p, run)
    with Unchanged(*looks):
        ok(goldfish(*train_argv(p.prepared, run, "--overwrite", schedule__max_steps=2)))


@case("1", fast=True)
def a_writer_with_out_missing_does_not_rename_a_users_old_into_place(p: Probe) -> None:
    out = p.work / "prep"
    old = p.user_folder(p.work / ".prep.old")
    with Unchanged(old):
        ok(goldfish(*prepare_argv(corpus(p.work / "c.jsonl"), out)))
    if (out / "notes.txt").exists():
        fail("the user's .prep.old was renamed into place")


@case("1", fast=True)
def train_reading_missing_data_does_not_rename_a_users_old_into_place(p: Probe) -> None:
    old = p.user_folder(p.work / ".data.old", **{"manifest.json": "{}"})
    with Unchanged(old):
        one_error(goldfish(*train_argv(p.work / "data", p.work / "run")), "prepared data not found")
    exists(p.work / "data", False)


@case("1")
def eval_reading_missing_data_does_not_rename_a_users_old_into_place(p: Probe) -> None:
    old = p.user_folder(p.work / ".data.old", **{"manifest.json": "{}"})
    with Unchanged(old):
        one_error(goldfish(*eval_argv(p.finished / "model", p.work / "data", p.work / "ev")), "not found")
    exists(p.work / "data", False)


@case("1")
def eval_keeps_look_alikes_beside_out(p: Probe) -> None:
    out = p.work / "ev"
    looks = _look_alikes(p, out)
    with Unchanged(*looks):
        ok(goldfish(*eval_argv(p.finished / "model", p.prepared, out)))


@case("1")
def prepare_overwrite_keeps_look_alikes_beside_out(p: Probe) -> None:
    out = p.copy(p.prepared, "prep")
    looks = _look_alikes(p, out)
    with Unchanged(*looks):
        ok(goldfish(*prepare_argv(corpus(p.work / "c.jsonl", seed=3), out, "--overwrite")))


@case("1")
def look_alikes_that_are_files_or_links_stay(p: Probe) -> None:
    out = p.work / "run"
    mine = p.user_folder(p.work / "elsewhere")
    (p.work / ".run.old").write_text("a file of mine")
    (p.work / ".run.x.tmp").symlink_to(mine)
    with Unchanged(mine, p.work / ".run.old", p.work / ".run.x.tmp"):
        one_error(goldfish(*train_argv(p.work / "typo", out)), "prepared data not found")


@case("1")
def a_staging_folder_made_for_another_output_stays(p: Probe) -> None:
    """goldfish's own staging record, but naming another output: not this writer's debris."""
    run = p.run()
    other = p.user_folder(p.work / ".run.a1b2.tmp")
    (other / ".goldfish-staging.json").write_text(
        json.dumps({"target": "other", "role": "new", "pid": 1, "host": "h", "written_by": "goldfish"})
    )
    with Unchanged(other):
        ok(goldfish(*train_argv(p.prepared, run, "--overwrite", schedule__max_steps=2)))


@case("1", fast=True)
def goldfish_removes_its_own_debris(p: Probe) -> None:
    """The positive control: a staging folder goldfish made (its record) and a kill left is deleted by the next
    writer; the user's look-alike beside it stays."""

    def leave_debris() -> None:
        from goldfish.io import new_temp_dir

        new_temp_dir(p.work / "run")  # what a killed replacement leaves
        os.kill(os.getpid(), 9)

    in_child(leave_debris)
    mine = p.user_folder(p.work / ".run.mine.tmp")
    debris = [f for f in p.work.glob(".run.*.tmp") if f != mine]
    if len(debris) != 1:
        fail(f"expected one staging folder, found {debris}")
    with Unchanged(mine):
        ok(goldfish(*train_argv(p.prepared, p.work / "run", schedule__max_steps=2)))
    exists(debris[0], False)


@case("1")
def a_reader_restores_goldfishs_own_old_folder(p: Probe) -> None:
    """The positive control of the two-rename fallback: killed between its renames, the old prepared folder is put
    back by the next reader (train), and a user's ``.prep.old`` stays where it is."""
    prep = p.copy(p.prepared, "prep")

    def killed_between_the_renames() -> None:
        import goldfish.io as gio

        gio.exchange = lambda a, b: False
        real = os.replace

        def replace(src, dst):
            if str(src).endswith(".tmp") and Path(src).is_dir():
                os.kill(os.getpid(), 9)
            real(src, dst)

        os.replace = replace
        with gio.atomic_directory(prep, overwrite=True) as tmp:
            (tmp / "x").write_text("new")

    in_child(killed_between_the_renames)
    exists(prep, False)
    mine = p.user_folder(p.work / ".prep.old")
    with Unchanged(mine):
        ok(goldfish(*train_argv(prep, p.work / "run", schedule__max_steps=2)))
    exists(prep / "manifest.json")


# ------------------------------------------------------------------------------------------------ 2 locks


def _lock_cases(p: Probe, kind: str) -> tuple[Path, list]:
    if kind == "train":
        return p.work / "run", train_argv(p.prepared, p.work / "run", schedule__max_steps=2)
    if kind == "prepare":
        return p.work / "prep", prepare_argv(corpus(p.work / "c.jsonl"), p.work / "prep")
    return p.work / "ev", eval_argv(p.finished / "model", p.prepared, p.work / "ev")


def _lock_refused(p: Probe, kind: str, make) -> None:
    out, argv = _lock_cases(p, kind)
    lock = out.parent / f".{out.name}.lock"
    guarded = make(lock)
    with Unchanged(lock, *guarded):
        one_error(goldfish(*argv), str(lock))
    exists(out, False)


def _user_file(p: Probe) -> Path:
    mine = p.work / "secret.txt"
    mine.write_text("the user's own file\n")
    return mine


@case("2", fast=True)
def a_lock_that_is_a_symlink_to_a_users_file_is_not_written_through(p: Probe) -> None:
    mine = _user_file(p)
    _lock_refused(p, "train", lambda lock: (lock.symlink_to(mine), [mine])[1])


@case("2", fast=True)
def a_users_file_named_like_the_lock_is_neither_overwritten_nor_deleted(p: Probe) -> None:
    _lock_refused(p, "train", lambda lock: (lock.write_text("12345 my-host\nimportant\n"), [])[1])


@case("2")
def an_empty_users_file_named_like_the_lock_stays(p: Probe) -> None:
    _lock_refused(p, "train", lambda lock: (lock.write_text(""), [])[1])


@case("2")
def a_folder_named_like_the_lock_stays(p: Probe) -> None:
    _lock_refused(p, "train", lambda lock: [p.user_folder(lock)])


@case("2")
def a_dangling_symlink_lock_creates_nothing(p: Probe) -> None:
    target = p.work / "nowhere" / "made"
    _lock_refused(p, "train", lambda lock: (lock.symlink_to(target), [target.parent])[1])


@case("2")
def a_fifo_named_like_the_lock_does_not_hang(p: Probe) -> None:
    _lock_refused(p, "train", lambda lock: (os.mkfifo(lock), [])[1])


@case("2")
def prepare_refuses_a_symlink_lock(p: Probe) -> None:
    mine = _user_file(p)
    _lock_refused(p, "prepare", lambda lock: (lock.symlink_to(mine), [mine])[1])


@case("2")
def eval_refuses_a_users_lock_file(p: Probe) -> None:
    _lock_refused(p, "eval", lambda lock: (lock.write_text("mine"), [])[1])


@case("2")
def experiment_refuses_a_users_lock_file(p: Probe) -> None:
    out = p.work / "exp"
    lock = p.work / ".exp.lock"
    lock.write_text("mine")
    with Unchanged(lock):
        one_error(goldfish("experiment", _micro(p), f"out={out}", "--no-progress"), str(lock))


@case("2")
def a_lock_left_by_a_killed_goldfish_is_taken_over(p: Probe) -> None:
    out = p.work / "run"

    def hold_and_die() -> None:
        from goldfish.ownership import FolderLock

        FolderLock(out).__enter__()
        os.kill(os.getpid(), 9)

    in_child(hold_and_die)
    exists(p.work / ".run.lock")
    ok(goldfish(*train_argv(p.prepared, out, schedule__max_steps=2)))
    exists(p.work / ".run.lock", False)


# ------------------------------------------------------------------------------------------------ 3 adoption


def _micro(p: Probe, control: bool = True) -> Path:
    """A two-cell experiment (and its control cell, unless ``control=False``) on a corpus of the probe's own (tiny
    model, a few steps)."""
    source = corpus(p.work / "exp_corpus.jsonl", docs=30)
    config = p.work / "micro.yaml"
    config.write_text(f"""name: probe
data_recipe: {Path(__file__).resolve().parents[2] / "data" / "local_jsonl.yaml"}
data: {{source: {{path: {source}}}, seq_len: 32, doc_tokens: 32, min_tokens: 16, num_nonmembers: 5,
       repetitions: [1, 2], tokenizer: {{name: bpe, vocab_size: 300}}}}
train:
  model: {{name: llama-demo, hidden_size: 32, num_layers: 1, num_heads: 2, intermediate_size: 64}}
  optim: {{lr: 1.0e-2, warmup_steps: 2}}
  schedule: {{max_steps: 4, global_batch_size: 4, micro_batch_size: 4}}
  checkpoint: {{every_steps: 2, keep_last: 1}}
eval: {{data: {{prefix_lens: [8], suffix_len: 8}}, membership: {{n_bootstrap: 10}}}}
arms:
  standard: {{train.loss.type: standard}}
  goldfish: {{train.loss.type: goldfish, train.loss.goldfish: {{k: 4, h: 13}}}}
control: {"true" if control else "false"}
""")
    return config


def _run_without_marker(p: Probe) -> Path:
    """A folder holding a real run's files (config.yaml, fingerprint.json, model/) but no ownership marker, and the
    user's notes: what a user's copy looks like."""
    run = p.run("mine")
    (run / ".goldfish-owner.json").unlink()
    (run / "notes.txt").write_text("my notes\n")
    return run


@case("3", fast=True)
def train_does_not_adopt_a_look_alike_run(p: Probe) -> None:
    mine = _run_without_marker(p)
    with Unchanged(mine):
        one_error(goldfish(*train_argv(p.prepared, mine)), "goldfish did not write there")


@case("3")
def train_overwrite_does_not_replace_a_look_alike_run(p: Probe) -> None:
    mine = _run_without_marker(p)
    with Unchanged(mine):
        one_error(goldfish(*train_argv(p.prepared, mine, "--overwrite")), "replaces only a training run")


@case("3")
def train_does_not_adopt_a_folder_with_only_a_config_yaml(p: Probe) -> None:
    mine = p.user_folder(p.work / "mine")
    shutil.copy(p.finished / "config.yaml", mine / "config.yaml")
    (mine / "model").mkdir()
    (mine / "model" / "weights.bin").write_bytes(b"mine")
    with Unchanged(mine):
        one_error(goldfish(*train_argv(p.prepared, mine)), "goldfish did not write there")


@case("3")
def eval_does_not_adopt_a_look_alike_evaluation(p: Probe) -> None:
    mine = p.copy(p.evaluated, "mine")
    (mine / ".goldfish-owner.json").unlink()
    with Unchanged(mine):
        one_error(goldfish(*eval_argv(p.finished / "model", p.prepared, mine)), "goldfish did not write there")


@case("3")
def series_does_not_adopt_a_look_alike_folder(p: Probe) -> None:
    mine = p.user_folder(p.work / "mine", **{"fingerprint.json": "{}"})
    with Unchanged(mine):
        one_error(
            goldfish(
                "eval",
                f"series.checkpoints={p.finished}",
                "--data",
                p.prepared,
                "--out",
                mine,
                "data.prefix_lens=[4]",
                "data.suffix_len=4",
                "progress=false",
            ),
            "goldfish did not write there",
        )


@case("3")
def experiment_does_not_adopt_a_look_alike_folder(p: Probe) -> None:
    mine = p.user_folder(p.work / "mine", **{"experiment.yaml": "name: mine\n", "report.md": "# my report\n"})
    with Unchanged(mine):
        one_error(goldfish("experiment", _micro(p), f"out={mine}", "--no-progress"), "goldfish did not write there")


@case("3", fast=True)
def report_only_does_not_overwrite_a_users_folder(p: Probe) -> None:
    mine = p.user_folder(
        p.work / "mine",
        **{"experiment.yaml": "name: mine\n", "report.md": "# my report\n", "summary.json": '{"mine": true}\n'},
    )
    with Unchanged(mine):
        one_error(
            goldfish("experiment", _micro(p), f"out={mine}", "--report-only", "--no-progress"),
            "goldfish did not write there",
        )


@case("3")
def report_only_does_not_write_into_another_kinds_folder(p: Probe) -> None:
    run = p.run()
    with Unchanged(run):
        one_error(
            goldfish("experiment", _micro(p), f"out={run}", "--report-only", "--no-progress"), "holds a training run"
        )


@case("3")
def prepare_overwrite_does_not_replace_a_training_run(p: Probe) -> None:
    run = p.run()
    with Unchanged(run):
        one_error(goldfish(*prepare_argv(corpus(p.work / "c.jsonl"), run, "--overwrite")), "holds a training run")


@case("3")
def an_empty_folder_is_used(p: Probe) -> None:
    (p.work / "empty").mkdir()
    ok(goldfish(*train_argv(p.prepared, p.work / "empty", schedule__max_steps=2)))


# ------------------------------------------------------------------------------------------------ 4 replace


@case("4", fast=True)
def overwrite_diverging_after_its_first_checkpoint_keeps_the_old_run(p: Probe) -> None:
    run = p.run()
    with Unchanged(run):  # a checkpoint every step: step 1's is written, step 2's loss is no longer finite
        one_error(
            goldfish(
                *train_argv(
                    p.prepared,
                    run,
                    "--overwrite",
                    optim__lr=1e30,
                    optim__warmup_steps=0,
                    optim__max_grad_norm="null",
                    checkpoint__every_steps=1,
                )
            ),
            "diverged at step 2",
        )
    _no_debris(p.work)


def _no_debris(folder: Path) -> None:
    left = [str(f) for f in folder.rglob(".*") if f.name.endswith((".tmp", ".old", ".deleting"))]
    if left:
        fail(f"debris left: {left[:3]}")


@case("4")
def overwrite_killed_keeps_the_old_run_and_the_same_command_continues(p: Probe) -> None:
    run = p.run()
    argv = train_argv(p.prepared, run, "--overwrite", optim__lr=0.005, schedule__max_steps=40)

    def staged_checkpoint() -> bool:
        return any(p.work.glob(".run.*.tmp/checkpoints/step_000004/COMPLETE"))

    with Unchanged(run):
        r = goldfish(*argv, kill_when=staged_checkpoint)
        if r.rc != -9:
            fail(f"the replacement ended before it could be killed (rc {r.rc}): {r.tail()}")
    r = ok(goldfish(*argv))
    if json.loads((run / "fingerprint.json").read_text())["optim.lr"] != 0.005:
        fail("the old run is still in place after the replacement finished")
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    if steps != list(range(1, 41)):
        fail(f"metrics.jsonl steps {steps[:8]}...: not one clean run")
    if "resum" not in r.err + r.out and not any(s == 4 for s in steps):
        fail("no sign that the replacement continued")
    _no_debris(p.work)


@case("4")
def overwrite_failing_at_export_keeps_the_old_run(p: Probe) -> None:
    run = p.run()

    def export_fails() -> int:
        from transformers import PreTrainedModel

        from goldfish.cli import main

        def full(*a, **k):
            raise OSError(28, "No space left on device")

        PreTrainedModel.save_pretrained = full
        return main([str(a) for a in train_argv(p.prepared, run, "--overwrite", optim__lr=0.005)])

    with Unchanged(run):
        one_error(in_child(export_fails), "no space left on device")
    _no_debris(p.work)


@case("4")
def overwrite_with_an_infinite_lr_one_step_keeps_the_old_run(p: Probe) -> None:
    run = p.run()
    with Unchanged(run):
        one_error(
            goldfish(
                *train_argv(
                    p.prepared,
                    run,
                    "--overwrite",
                    optim__lr=1e300,
                    optim__warmup_steps=0,
                    optim__max_grad_norm="null",
                    schedule__max_steps=1,
                )
            ),
            "diverged",
        )


@case("4")
def overwrite_succeeding_replaces_the_run(p: Probe) -> None:
    run = p.run()
    before = tree(run)
    ok(goldfish(*train_argv(p.prepared, run, "--overwrite", optim__lr=0.005, schedule__max_steps=2)))
    if tree(run) == before or json.loads((run / "summary.json").read_text())["steps"] != 2:
        fail("the run was not replaced")
    _no_debris(p.work)


@case("4")
def eval_overwrite_failing_keeps_the_old_evaluation(p: Probe) -> None:
    ev = p.copy(p.evaluated, "ev")
    with Unchanged(ev):
        one_error(goldfish(*eval_argv(p.work / "missing_model", p.prepared, ev, "overwrite=true")), "not found")


@case("4")
def prepare_overwrite_failing_keeps_the_old_folder(p: Probe) -> None:
    prep = p.copy(p.prepared, "prep")
    with Unchanged(prep):
        one_error(goldfish(*prepare_argv(p.work / "typo.jsonl", prep, "--overwrite")), "not found")
    _no_debris(p.work)


@case("4")
def rerun_stale_failing_keeps_the_old_cell(p: Probe) -> None:
    config = _micro(p)
    out = p.work / "exp"
    ok(goldfish("experiment", config, f"out={out}", "--no-progress"))
    with Unchanged(out / "cells" / "standard", out / "cells" / "goldfish"):  # the untrained control does succeed
        one_error(
            goldfish(
                "experiment",
                config,
                f"out={out}",
                "--no-progress",
                "--rerun-stale",
                "train.optim.lr=1e30",
                "train.optim.warmup_steps=0",
                "train.optim.max_grad_norm=null",
            ),
            "diverged",
        )
    _no_debris(p.work)
