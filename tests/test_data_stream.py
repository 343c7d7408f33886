"""The streamed background: lazy sources that skip without parsing, shards written by worker processes or by
independent jobs, a SIGKILLed prepare resumed to the same bytes, caps, and one-line errors for a foreign, missing or
corrupt shard and a vocabulary too large for the dtype."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from train_helpers import REPO, WORDS, cli_env

from goldfish.cli import main
from goldfish.config import from_dict
from goldfish.data import PrepareConfig, SourceConfig, load_prepared, prepare
from goldfish.data.sources import iter_source
from goldfish.errors import UserError


def write_jsonl(path: Path, rows: list[dict], gz: bool = False) -> None:
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def texts(n: int, words: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, int(rng.integers(words // 2, words)))) for _ in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A main source (30 documents) and a background folder of 3 JSONL shards (~120 documents)."""
    root = tmp_path_factory.mktemp("stream")
    write_jsonl(root / "main.jsonl", [{"id": f"m{i}", "text": t} for i, t in enumerate(texts(30, 80, 0))])
    bg = root / "bg"
    bg.mkdir()
    docs = texts(121, 300, 1)
    for k, lo in enumerate(range(0, len(docs), 50)):
        write_jsonl(bg / f"part-{k}.jsonl", [{"text": t} for t in docs[lo : lo + 50]])
    return root


def recipe(corpus: Path, **over) -> dict:
    base = {
        "name": "stream",
        "source": {"name": "local", "path": str(corpus / "main.jsonl"), "id_field": "id"},
        "tokenizer": {"name": "gpt2"},
        "seq_len": 64,
        "packing": "pack",
        "min_tokens": 16,
        "doc_tokens": 24,
        "num_members": 8,
        "repetitions": [1, 3],
        "nonmember_mode": "random_split",
        "num_nonmembers": 8,
        "num_background": None,
        "background_chunk_tokens": 63,
        "background_source": {"name": "local", "path": str(corpus / "bg")},
        "shard_documents": 16,
    }
    base.update(over)
    return base


def files(folder: Path) -> dict[str, bytes]:
    """Every data file of a prepared folder (not the manifest's timestamps), by relative path."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_file() and rel not in ("manifest.json", ".goldfish-owner.json"):
            out[rel] = p.read_bytes()
    return out


def without_time(manifest: dict) -> dict:
    return {k: v for k, v in manifest.items() if k not in ("created", "stats")} | {
        "stats": {k: v for k, v in manifest["stats"].items() if k != "seconds"}
    }


# ------------------------------------------------------------------------------------------------ sources


def test_a_source_read_from_a_position_is_the_tail_of_the_whole(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = texts(23, 12, 2)
    (tmp_path / "jsonl").mkdir()
    for k, lo in enumerate(range(0, 23, 7)):  # shards of 7, 7, 7, 2; one gzipped; blank lines are not documents
        write_jsonl(tmp_path / "jsonl" / f"s{k}.jsonl", [{"text": t} for t in docs[lo : lo + 7]], gz=k == 1)
    (tmp_path / "jsonl" / "s1.jsonl").rename(tmp_path / "jsonl" / "s1.jsonl.gz")
    (tmp_path / "jsonl" / "s2.jsonl").write_text("\n" + (tmp_path / "jsonl" / "s2.jsonl").read_text() + "\n\n")
    (tmp_path / "parquet").mkdir()
    for k, lo in enumerate(range(0, 23, 10)):  # row groups of 3 inside files of 10
        pq.write_table(pa.table({"text": docs[lo : lo + 10]}), tmp_path / "parquet" / f"p{k}.parquet", row_group_size=3)
    from datasets import Dataset

    Dataset.from_dict({"text": docs}).save_to_disk(str(tmp_path / "saved"))
    for path in ("jsonl", "parquet", "saved"):
        cfg = SourceConfig(name="local", path=str(tmp_path / path))
        whole = list(iter_source(cfg))
        assert [d.text for _, d in whole] == docs and [p for p, _ in whole] == list(range(23)), path
        for start in (0, 5, 7, 10, 22, 23, 40):
            tail = list(iter_source(cfg, start))
            assert [(p, d.id, d.text) for p, d in tail] == [(p, d.id, d.text) for p, d in whole[start:]], (path, start)


def test_skipping_a_jsonl_shard_does_not_parse_it(tmp_path):
    (tmp_path / "bg").mkdir()
    (tmp_path / "bg" / "a.jsonl").write_text('{"text": "one"}\n{not json at all\n')  # only counted when skipped
    write_jsonl(tmp_path / "bg" / "b.jsonl", [{"text": "three"}])
    cfg = SourceConfig(name="local", path=str(tmp_path / "bg"))
    assert [(p, d.text) for p, d in iter_source(cfg, 2)] == [(2, "three")]
    with pytest.raises(UserError, match=r"a.jsonl:2 is not valid JSON"):
        list(iter_source(cfg, 1))


# ------------------------------------------------------------------------------------------------ shards


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "p"
    prepare(from_dict(PrepareConfig, recipe(corpus)), out, progress=False, num_proc=1)
    return out


def test_the_streamed_background_is_every_accepted_chunk_once(reference, corpus):
    data = load_prepared(reference)
    m = data.manifest
    assert m["stats"]["background_read"] == 121 and m["stats"]["background_shards"] == 8  # 16 per shard
    assert m["counts"]["background"] == len(data.background) == m["train"]["occurrences"] - 8 * 2
    # independently: tokenize every background text, cut into 63-token chunks, keep those >= 16 tokens
    tok = data.tokenizer
    want = []
    for p in sorted((corpus / "bg").glob("*.jsonl")):
        for line in p.read_text().splitlines():
            ids = tok(json.loads(line)["text"], add_special_tokens=False)["input_ids"]
            want += [ids[s : s + 63] for s in range(0, len(ids), 63) if len(ids[s : s + 63]) >= 16]
    assert [data.background[i].tolist() for i in range(len(data.background))] == want
    assert data.manifest["train"]["dtype"] == "uint16"
    rows = data.train.batch(np.arange(len(data.train)))
    assert int(rows["attention_mask"].sum()) == m["tokens"]["train"]
    on_disk = sum((reference / p).stat().st_size for p in m["files"] if not p.startswith("tokenizer/"))
    assert on_disk / m["tokens"]["train"] < 4.5  # bytes per training token (~2 for uint16 ids + the indexes)


def test_two_workers_and_independent_jobs_write_the_same_bytes(corpus, reference, tmp_path, one_thread):
    cfg = from_dict(PrepareConfig, recipe(corpus))
    prepare(cfg, tmp_path / "two", progress=False, num_proc=2)
    assert files(tmp_path / "two") == files(reference)
    jobs = tmp_path / "jobs"
    prepare(cfg, jobs, progress=False, shards=(4, 12), num_proc=1)  # past the end of the source: nothing more
    # the unfinished folder's config.yaml is the recipe other jobs run (what a Slurm array of jobs is given)
    assert main(["prepare", str(jobs / "config.yaml"), "--out", str(jobs), "--shards", "0:4", "--quiet"]) == 0
    assert not (jobs / "manifest.json").exists()
    with pytest.raises(UserError, match="unfinished prepare"):
        load_prepared(jobs)
    prepare(cfg, jobs, progress=False, merge_only=True)
    assert files(jobs) == files(reference)
    a, b = (json.loads((p / "manifest.json").read_text()) for p in (jobs, reference))
    assert without_time(a) == without_time(b)


def test_merge_names_a_missing_shard_and_another_recipes_shards(corpus, tmp_path, capsys):
    out = tmp_path / "p"
    rec = tmp_path / "r.json"
    rec.write_text(json.dumps(recipe(corpus)))
    assert main(["prepare", str(rec), "--out", str(out), "--shards", "0:3", "--quiet"]) == 0
    assert main(["prepare", str(rec), "--out", str(out), "--merge"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "background shard 00003 is missing" in err and "--shards 3:4" in err
    other = tmp_path / "other.json"
    other.write_text(json.dumps(recipe(corpus, seed=1)))
    assert main(["prepare", str(other), "--out", str(out), "--shards", "3:5", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unfinished prepare of another recipe" in err
    # a shard copied in from another recipe's folder
    assert main(["prepare", str(other), "--out", str(tmp_path / "o"), "--shards", "3:4", "--quiet"]) == 0
    for f in (tmp_path / "o" / "background").glob("00003.*"):
        (out / "background" / f.name).write_bytes(f.read_bytes())
    assert main(["prepare", str(rec), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "00003.json was prepared from another recipe" in err
    for bad in ("3", "5:2", "a:b"):
        assert main(["prepare", str(rec), "--out", str(out), "--shards", bad]) == 2
        assert "is not a range A:B" in capsys.readouterr().err


def test_a_corrupt_shard_is_one_line_at_merge_and_at_load(corpus, reference, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(reference, copy)
    shard = copy / "background" / "00002.bin"
    raw = bytearray(shard.read_bytes())
    raw[10] ^= 0xFF  # same size, one token changed
    shard.write_bytes(bytes(raw))
    with pytest.raises(UserError, match=r"00002.bin does not match the sha256 in its manifest"):
        load_prepared(copy)
    # before the merge: the shard's own entry catches it
    out = tmp_path / "p"
    rec = tmp_path / "r.json"
    rec.write_text(json.dumps(recipe(corpus)))
    assert main(["prepare", str(rec), "--out", str(out), "--shards", "0:8", "--quiet"]) == 0
    (out / "background" / "00005.bin").write_bytes(b"\x00\x01")
    assert main(["prepare", str(rec), "--out", str(out), "--merge"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "background shard 00005 is damaged" in err and "00005.*" in err


def test_caps_take_the_first_chunks_of_the_first_documents(corpus, reference, tmp_path):
    whole = load_prepared(reference)
    capped = load_prepared(
        prepare(from_dict(PrepareConfig, recipe(corpus, num_background=37)), tmp_path / "n", progress=False, num_proc=1)
    )
    assert [capped.background[i].tolist() for i in range(37)] == [whole.background[i].tolist() for i in range(37)]
    assert len(capped.background) == 37 and len(list((capped.path / "background").glob("*.bin"))) < 8
    first = recipe(corpus)
    first["background_source"] = dict(first["background_source"], max_documents=20)
    docs = load_prepared(prepare(from_dict(PrepareConfig, first), tmp_path / "d", progress=False, num_proc=1))
    tags = np.concatenate([np.load(p) for p in sorted((docs.path / "background").glob("*.tag.npy"))])
    n = len(docs.background)
    assert n and tags[:n].max() < 20 and docs.manifest["counts"]["background"] == int((tags < 20).sum())


def test_a_killed_prepare_resumes_to_the_same_bytes(corpus, tmp_path):
    big = tmp_path / "big"  # 48 shards of 20 documents: the kill lands in the middle, not after the end
    big.mkdir()
    write_jsonl(big / "bg.jsonl", [{"text": t} for t in texts(960, 400, 3)])
    rec = tmp_path / "r.json"
    rec.write_text(
        json.dumps(recipe(corpus, background_source={"name": "local", "path": str(big)}, shard_documents=20))
    )
    reference = tmp_path / "reference"
    assert main(["prepare", str(rec), "--out", str(reference), "--num-proc", "1", "--quiet"]) == 0
    out = tmp_path / "p"
    argv = [sys.executable, "-m", "goldfish", "prepare", str(rec), "--out", str(out), "--num-proc", "1", "--quiet"]
    proc = subprocess.Popen(argv, env=cli_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (out / "background" / "00002.json").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL  # killed, not finished
    done_before = {p.name for p in (out / "background").glob("*.json")}
    assert not (out / "manifest.json").exists() and "00002.json" in done_before and len(done_before) < 48
    assert subprocess.run(argv, env=cli_env(), cwd=REPO).returncode == 0
    assert files(out) == files(reference)
    assert done_before < {p.name for p in (out / "background").glob("*.json")}


def test_a_vocabulary_too_large_for_the_dtype_is_one_line(corpus, tmp_path, capsys):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    words = ["<eos>"] + sorted(set(WORDS)) + [f"x{i}" for i in range(70_000)]
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<eos>"))
    tok.pre_tokenizer = WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>").save_pretrained(
        str(tmp_path / "tok")
    )
    rec = tmp_path / "r.json"
    rec.write_text(json.dumps(recipe(corpus, tokenizer={"name": str(tmp_path / "tok")}, token_dtype="uint16")))
    assert main(["prepare", str(rec), "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "token_dtype=uint16 holds ids below 65,536 but the tokenizer has 70," in err
    assert not (tmp_path / "p").exists()
    rec.write_text(json.dumps(recipe(corpus, tokenizer={"name": str(tmp_path / "tok")})))  # auto: uint32
    assert main(["prepare", str(rec), "--out", str(tmp_path / "p"), "--quiet"]) == 0
    data = load_prepared(tmp_path / "p")
    assert data.manifest["train"]["dtype"] == "uint32"
    assert (tmp_path / "p" / "train" / "targets.bin").stat().st_size == 4 * sum(map(len, data.members["input_ids"]))


def test_the_model_ships_only_the_tokenizer_the_manifest_vouches_for(reference, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(reference, copy)
    data = load_prepared(copy)
    shipped = data.tokenizer_files()  # read and checked now, as a training run does at its start
    (copy / "tokenizer" / "model.safetensors").write_bytes(b"planted")  # not in the manifest: never read
    (copy / "tokenizer" / "tokenizer.json").write_text("{}")  # swapped after the run started
    dest = tmp_path / "model"
    dest.mkdir()
    data.copy_tokenizer(dest)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == shipped
    assert not (dest / "model.safetensors").exists()
    with pytest.raises(UserError, match=r"tokenizer.json does not match the sha256"):
        load_prepared(copy).tokenizer_files()
    (copy / "tokenizer" / "tokenizer.json").unlink()
    (copy / "tokenizer" / "tokenizer.json").symlink_to(reference / "tokenizer" / "tokenizer.json")
    with pytest.raises(UserError, match=r"not a regular file"):
        load_prepared(copy)
