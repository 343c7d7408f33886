"""Probe cases of issue 39 ("Reliability V"), families 13-18: clean-up inside a prepared folder (13), the Hugging
Face cache (14), a tampered shard, manifest or source (15), bounded work per input (16), one error line (17) and
local paths in a model card (18)."""

from __future__ import annotations

import hashlib
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
)


def _streamed_argv(p: Probe, out: Path, *extra) -> list:
    """A prepare whose background streams from a folder of its own (``<work>/bg``), 6 documents a shard, capped at
    12 chunks: a merge reaches the cap before the last shards."""
    bg = p.work / "bg"
    if not bg.is_dir():
        bg.mkdir()
        corpus(bg / "part.jsonl", docs=60, seed=7, words=120)
    return prepare_argv(
        corpus(p.work / "c.jsonl"),
        out,
        "background_source.name=local",
        f"background_source.path={bg}",
        "num_background=12",
        "background_chunk_tokens=31",
        "shard_documents=6",
        *extra,
    )


def _shards(p: Probe, out: Path, spec: str = "0:10") -> None:
    ok(goldfish(*_streamed_argv(p, out, "--shards", spec)), f"writing shards {spec}")


def _merge(p: Probe, out: Path):
    return goldfish(*_streamed_argv(p, out, "--merge"))


# ------------------------------------------------------------------------------------------------ 13 clean-up


@case("13", fast=True)
def merge_keeps_users_files_named_like_shards(p: Probe) -> None:
    out = p.work / "prep"
    _shards(p, out)
    mine = {"00099.npy": "x", "00008.idx.npy.orig": "x", ".00009.json.mine.tmp": "x", "00004": "x"}
    for name, text in mine.items():
        (out / "background" / name).write_text(text)
    (out / "train" / ".order.npy.tmp").write_text("mine")
    before = {n: (out / "background" / n).read_text() for n in mine}
    ok(_merge(p, out))
    for name, text in before.items():
        if not (out / "background" / name).is_file() or (out / "background" / name).read_text() != text:
            fail(f"the user's background/{name} was deleted or changed")
    exists(out / "train" / ".order.npy.tmp")
    if (out / "background" / "00009.bin").exists():
        fail("an unused shard that prepare wrote (its entry names it) was left")


@case("13")
def merge_through_a_linked_background_deletes_nothing_behind_the_link(p: Probe) -> None:
    out = p.work / "prep"
    _shards(p, out)
    kept = p.work / "disk2"
    shutil.move(out / "background", kept)
    (out / "background").symlink_to(kept)
    with Unchanged(kept):
        ok(_merge(p, out))


# ------------------------------------------------------------------------------------------------ 14 the HF cache


def _fake_cache(p: Probe, repo_id: str) -> tuple[Path, Path]:
    cache = p.work / "hub"
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / ("c" * 40)
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("c" * 40)
    for f in (p.finished / "model").iterdir():
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        (repo / "blobs" / digest).write_bytes(f.read_bytes())
        (snapshot / f.name).symlink_to(Path("../../blobs") / digest)
    return cache, snapshot


def _eval_offline(cache: Path, argv: list):
    def run() -> int:
        from huggingface_hub import constants

        from goldfish.cli import main
        from goldfish.model_source import hub_snapshot

        constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE = str(cache), True
        hub_snapshot.cache_clear()
        return main([str(a) for a in argv])

    return in_child(run)


@case("14", fast=True)
def update_card_of_a_hub_id_writes_nothing_into_the_cache(p: Probe) -> None:
    cache, _ = _fake_cache(p, "org/tiny")
    with Unchanged(cache):
        ok(_eval_offline(cache, [*eval_argv("org/tiny", p.prepared, p.work / "ev"), "--update-card"]))
    exists(p.work / "ev" / "model_card" / "README.md")


@case("14")
def update_card_of_a_cached_snapshot_path_writes_nothing_into_the_cache(p: Probe) -> None:
    cache, snapshot = _fake_cache(p, "org/tiny")
    with Unchanged(cache):
        ok(_eval_offline(cache, [*eval_argv(snapshot, p.prepared, p.work / "ev"), "--update-card"]))


# ------------------------------------------------------------------------------------------------ 15 tampering


@case("15", fast=True)
def a_token_file_edited_with_its_times_set_back_is_refused_by_train(p: Probe) -> None:
    prep = p.copy(p.prepared, "prep")
    ok(goldfish(*train_argv(prep, p.work / "first", schedule__max_steps=1)))  # verified and recorded
    shard = prep / "train" / "targets.bin"
    st = shard.stat()
    data = bytearray(shard.read_bytes())
    data[2] ^= 0x01
    with open(shard, "r+b") as fh:
        fh.write(bytes(data))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    one_error(goldfish(*train_argv(prep, p.work / "run")), "targets.bin", "sha256")
    exists(p.work / "run", False)


@case("15")
def a_resume_after_the_manifest_row_count_was_edited_is_refused(p: Probe) -> None:
    prep = p.copy(p.prepared, "prep")
    run = p.work / "run"
    ok(goldfish(*train_argv(prep, run)))
    shutil.rmtree(run / "model")
    (run / "summary.json").unlink()
    manifest = json.loads((prep / "manifest.json").read_text())
    manifest["train"]["rows"] -= 1
    (prep / "manifest.json").write_text(json.dumps(manifest))
    with Unchanged(run / "checkpoints"):
        one_error(goldfish(*train_argv(prep, run)), "data.layout")


@case("15")
def a_store_path_leading_out_of_the_folder_is_refused(p: Probe) -> None:
    prep = p.copy(p.prepared, "prep")
    other = p.copy(p.prepared, "other")
    manifest = json.loads((prep / "manifest.json").read_text())
    manifest["train"]["stores"][0]["path"] = str(other / "train" / "targets")
    (prep / "manifest.json").write_text(json.dumps(manifest))
    one_error(goldfish(*train_argv(prep, p.work / "run")), "token store")


@case("15")
def a_merge_of_shards_read_before_and_after_the_source_changed_is_refused(p: Probe) -> None:
    out = p.work / "prep"
    every = "num_background=null"  # every chunk of every shard is used
    ok(goldfish(*_streamed_argv(p, out, every, "--shards", "0:2")))
    corpus(p.work / "bg" / "part.jsonl", docs=60, seed=8, words=120)  # rewritten between the jobs
    ok(goldfish(*_streamed_argv(p, out, every, "--shards", "2:11")))
    with Unchanged(out / "background"):
        one_error(goldfish(*_streamed_argv(p, out, every, "--merge")), "changed between shard jobs", "00000, 00001")


@case("15")
def a_source_rewritten_in_place_with_its_size_and_mtime_kept_is_refused_at_the_merge(p: Probe) -> None:
    out = p.work / "prep"
    every = "num_background=null"
    ok(goldfish(*_streamed_argv(p, out, every, "--shards", "0:2")))
    part = p.work / "bg" / "part.jsonl"
    st = part.stat()
    lines = part.read_bytes().splitlines(keepends=True)
    with open(part, "r+b") as fh:  # the same bytes in another order: the same size, the same inode
        fh.write(b"".join(lines[::-1]))
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))
    ok(goldfish(*_streamed_argv(p, out, every, "--shards", "2:11")))
    with Unchanged(out / "background"):
        one_error(goldfish(*_streamed_argv(p, out, every, "--merge")), "changed between shard jobs", "00000, 00001")


# ------------------------------------------------------------------------------------------------ 16 bounded


@case("16")
def a_background_document_of_30_mb_is_tokenized_in_bounded_memory(p: Probe) -> None:
    bg = p.work / "bg"
    bg.mkdir()
    corpus(bg / "part.jsonl", docs=60, seed=7, words=120)
    words = (" ".join(["river stone market", "garden\nwinter", "letter  silver"]) + " ") * (30 * 10**6 // 48)
    with open(bg / "part.jsonl", "a") as fh:
        fh.write(json.dumps({"text": words}) + "\n")
    r = ok(goldfish(*_streamed_argv(p, p.work / "prep", "num_background=null", "--num-proc", "1")))
    if r.peak_mib > 1024:
        fail(f"a 30 MB document took {r.peak_mib:.0f} MiB")


# ------------------------------------------------------------------------------------------------ 17 one line


@case("17", fast=True)
def eval_on_a_device_this_machine_lacks_is_one_line(p: Probe) -> None:
    for device in ("xla", "meta"):
        one_error(
            goldfish(*eval_argv(p.finished / "model", p.prepared, p.work / f"ev_{device}"), "--device", device),
            f"device='{device}'",
        )
        exists(p.work / f"ev_{device}" / "results.json", False)


@case("17")
def a_prepare_state_that_is_not_an_object_is_one_line(p: Probe) -> None:
    out = p.work / "prep"
    _shards(p, out, "0:1")
    (out / "prepare-state.json").write_text('"done"')
    one_error(goldfish(*_streamed_argv(p, out, "--shards", "1:2")), "prepare-state.json is damaged")


@case("17")
def a_shard_entry_without_its_files_is_one_line(p: Probe) -> None:
    out = p.work / "prep"
    _shards(p, out)
    entry = json.loads((out / "background" / "00000.json").read_text())
    entry["sha256"] = {}
    (out / "background" / "00000.json").write_text(json.dumps(entry))
    one_error(_merge(p, out), "00000.json is damaged")


@case("17")
def shards_in_other_digits_are_one_line(p: Probe) -> None:
    one_error(goldfish(*_streamed_argv(p, p.work / "prep", "--shards", "\u0660:\u0662")), "is not a range A:B")
    exists(p.work / "prep", False)


# ------------------------------------------------------------------------------------------------ 18 card


@case("18", fast=True)
def the_model_card_does_not_name_the_sources_folder(p: Probe) -> None:
    card = (p.finished / "model" / "README.md").read_text()
    source = json.loads((p.prepared / "manifest.json").read_text())["source"]
    if str(p.root) in card or source.split(":", 1)[-1] in card:
        fail(f"the card holds the local path of {source}")
