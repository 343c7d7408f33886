"""`goldfish eval` speaks the conventions of the tools around it: a Hub id resolved from the Hugging Face cache
(offline: a fake cache laid out as huggingface_hub lays it out), lm-evaluation-harness's flags and results layout,
a log line at least once a minute when not on a terminal, and no partial files in a finished folder."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from huggingface_hub import constants

from goldfish.cli import main
from goldfish.eval.heartbeat import Heartbeat
from goldfish.eval.lmeval import FILE as LM_EVAL_FILE
from goldfish.model_source import hub_snapshot

from eval_fixtures import TEXTS, save_model_folder, tiny_llama, tiny_tokenizer, write_jsonl

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fake_hub_cache(cache: Path, repo_id: str, model_folder: Path) -> Path:
    """``<cache>/models--ORG--NAME`` as huggingface_hub writes it: files in ``blobs/`` named by their sha256,
    ``refs/main`` holding the commit, ``snapshots/<commit>/`` symlinking each file to its blob."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    for f in model_folder.iterdir():
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        (repo / "blobs" / digest).write_bytes(f.read_bytes())
        (snapshot / f.name).symlink_to(Path("../../blobs") / digest)
    return snapshot


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("conventions")
    tok = tiny_tokenizer()
    model = save_model_folder(root / "model", tiny_llama(len(tok), seed=3), tok)
    docs = write_jsonl(root / "docs.jsonl", TEXTS)
    non = write_jsonl(root / "non.jsonl", [" ".join(reversed(t.split())) for t in TEXTS], "non")
    return root, model, docs, non


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, offline: nothing may be fetched."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    hub_snapshot.cache_clear()
    yield cache
    hub_snapshot.cache_clear()


def test_a_hub_id_is_evaluated_from_the_hf_cache_offline(setup, offline_cache, tmp_path, capsys):
    root, model, docs, non = setup
    snapshot = fake_hub_cache(offline_cache, "acme/tiny-llama", model)
    args = [
        "eval",
        "--model",
        "acme/tiny-llama",
        "--data",
        str(docs),
        "--out",
        str(tmp_path / "ev_hub"),
        "data.prefix_lens=[8]",
        "data.suffix_len=6",
        "data.window=[start]",
        "tasks=[extraction]",
    ]
    assert main(args + ["--log-samples"]) == 0, capsys.readouterr().err
    out = tmp_path / "ev_hub"
    hub = json.loads((out / "results.json").read_text())
    # provenance as lm-eval gives it: the Hub id and the snapshot's commit, never the cache path
    assert snapshot.name == COMMIT and (hub["model"]["path"], hub["model"]["revision"]) == ("acme/tiny-llama", COMMIT)
    lm = json.loads((out / LM_EVAL_FILE).read_text())
    assert (
        lm["model_name"] == "acme/tiny-llama"
        and f"pretrained=acme/tiny-llama,revision={COMMIT}," in lm["config"]["model_args"]
    )
    assert f"`acme/tiny-llama` at revision `{COMMIT}`" in (out / "report.md").read_text()
    for name in ("results.json", LM_EVAL_FILE, "report.md"):
        assert str(offline_cache) not in (out / name).read_text(), name
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == len(hub["windows"]) == len(TEXTS)
    for sample, w in zip(samples, hub["windows"]):
        assert sample["revision"] == COMMIT and sample["generation_ids"] == w["generation_ids"]
        assert sample["exact_match"] == (w["generation_ids"] == w["truth_ids"]) and sample["start"] == w["start"]
    (out / "samples.jsonl").unlink()
    assert main(args + ["--log-samples"]) == 0  # the finished evaluation is reused, its samples written again
    assert (out / "samples.jsonl").read_text().count("\n") == len(TEXTS)
    assert main(args) == 0 and not (out / "samples.jsonl").exists()  # never beside results it was not asked for
    local = ["eval", "--model", str(model), *args[3:5], "--out", str(tmp_path / "local"), *args[7:]]
    assert main(local) == 0
    ours = json.loads((tmp_path / "local" / "results.json").read_text())
    assert [w["generation_ids"] for w in hub["windows"]] == [w["generation_ids"] for w in ours["windows"]]


def test_hub_ids_that_cannot_be_used_are_one_error_line(setup, offline_cache, tmp_path, capsys, monkeypatch):
    root, model, docs, non = setup
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((model / "config.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(b"not fetched")
    fake_hub_cache(offline_cache, "acme/pickled", pickled)
    for repo_id, needle in (
        ("acme/absent", "is not in the Hugging Face cache"),
        ("acme/pickled", "has no safetensors weights on the Hub"),
    ):
        capsys.readouterr()
        assert main(["eval", "--model", repo_id, "--data", str(docs), "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], err
        assert repo_id != "acme/absent" or "(hf download acme/absent)" in err[0]  # today's CLI, not huggingface-cli
    assert not (tmp_path / "x").exists()
    # a local folder named like a Hub id is the local folder, and runs/typo (runs/ exists) is a missing local path
    monkeypatch.chdir(tmp_path)
    (tmp_path / "acme").mkdir()
    assert main(["eval", "--model", "acme/absent", "--data", str(docs), "--out", str(tmp_path / "y")]) == 2
    assert "model path not found" in capsys.readouterr().err


def _lm_eval_table(result_dict: dict) -> list[tuple]:
    """The rows lm-evaluation-harness's ``utils.make_table`` reads from a results file (its own loop, transcribed:
    ``results[task]["<metric>,<filter>"]`` with ``"<metric>_stderr,<filter>"``, ``versions``, ``n-shot``,
    ``higher_is_better``)."""
    rows = []
    for task, dic in result_dict["results"].items():
        version, n = result_dict["versions"].get(task, "N/A"), str(result_dict["n-shot"][task])
        better = result_dict.get("higher_is_better", {}).get(task, {})
        for mf, value in dic.items():
            metric, _, filt = mf.partition(",")
            if metric.endswith("_stderr") or metric == "alias":
                continue
            stderr = dic.get(f"{metric}_stderr,{filt}", "N/A")
            rows.append((task, version, filt, n, metric, better.get(metric), value, stderr))
    return rows


def test_lm_eval_flags_and_results_layout(setup, tmp_path):
    """--device, --batch_size / --batch-size and --limit set the toolkit's own settings; lm_eval_results.json holds
    results[task]["metric,none"] equal to results.json's summary, each stderr the standard error of the mean over the
    windows (recomputed here with numpy), the AUCs with their bootstrap stderr, and config/versions/n-samples."""
    root, model, docs, non = setup
    out = tmp_path / "ev"
    args = [
        "eval",
        "--model",
        str(model),
        "--data",
        str(docs),
        "--nonmembers",
        str(non),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--batch_size",
        "3",
        "--limit",
        "5",
        "data.prefix_lens=[8]",
        "data.suffix_len=6",
        "data.window=[start,end]",
        "membership.n_bootstrap=50",
        "report=false",
        "progress=false",
    ]
    assert main(args) == 0
    saved = yaml.safe_load((out / "eval_config.yaml").read_text())
    assert (saved["model"]["device"], saved["decoding"]["batch_size"], saved["data"]["max_docs"]) == ("cpu", 3, 5)
    assert main([*args[:-2], "--batch-size", "3", "--out", str(tmp_path / "dash")]) == 0  # lm-eval's other spelling
    results = json.loads((out / "results.json").read_text())
    lm = json.loads((out / LM_EVAL_FILE).read_text())
    assert set(lm) >= {
        "results",
        "configs",
        "versions",
        "n-shot",
        "higher_is_better",
        "n-samples",
        "config",
        "git_hash",
        "date",
        "model_name",
    }
    assert lm["config"]["device"] == "cpu" and lm["config"]["batch_size"] == 3 and lm["config"]["limit"] == 5
    assert set(lm["results"]) == {"goldfish_extraction_start", "goldfish_extraction_end", "goldfish_membership"}
    for placement in ("start", "end"):
        task, row = f"goldfish_extraction_{placement}", results["summary"]["by_window"][placement]
        windows = [w for w in results["windows"] if w["window"] == placement]
        entry = lm["results"][task]
        assert entry["exact_match,none"] == row["exact_match_rate"] and entry["rouge_l,none"] == row["rouge_l"]
        for metric in ("exact_match", "token_match", "rouge_l_paper"):
            values = np.array([float(w[metric]) for w in windows])
            assert entry[f"{metric}_stderr,none"] == pytest.approx(
                values.std(ddof=1) / math.sqrt(len(values)), rel=1e-12, abs=1e-15
            )
        assert lm["n-samples"][task] == {"original": len(windows), "effective": len(windows)} and len(windows) == 5
    loss = results["membership"]["attacks"]["loss"]
    assert lm["results"]["goldfish_membership"]["auc_loss,none"] == loss["auc"]
    assert lm["results"]["goldfish_membership"]["auc_loss_stderr,none"] == pytest.approx(
        (loss["auc_ci_high"] - loss["auc_ci_low"]) / (2 * 1.959963984540054), rel=1e-12
    )
    rows = _lm_eval_table(lm)
    assert (
        "goldfish_extraction_end",
        "goldfish-eval/1",
        "none",
        "0",
        "exact_match",
        True,
        results["summary"]["by_window"]["end"]["exact_match_rate"],
        lm["results"]["goldfish_extraction_end"]["exact_match_stderr,none"],
    ) in rows
    assert not list(out.glob("*.partial.jsonl"))  # a finished folder keeps no partial files


class _Log(io.StringIO):
    """A log file: not a terminal."""

    def isatty(self) -> bool:
        return False


def test_a_heartbeat_line_comes_while_a_long_phase_runs_without_a_terminal():
    """A phase that blocks longer than the interval (one long batch) still gets its lines; a terminal gets none."""
    log = _Log()
    with Heartbeat("extraction", lambda: 3, total=12, unit="windows", interval=0.01, stream=log):
        deadline = time.monotonic() + 30
        while log.getvalue().count("\n") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # the phase's one long batch
    lines = log.getvalue().splitlines()
    assert len(lines) >= 3 and lines[0].startswith("extraction: 3/12 (25 %) windows, ") and "windows/s" in lines[0]
    assert lines[-1].endswith("(done)")

    class Terminal(_Log):
        def isatty(self) -> bool:
            return True

    tty = Terminal()
    with Heartbeat("extraction", lambda: 3, total=12, unit="windows", interval=0.01, stream=tty):
        time.sleep(0.1)
    assert tty.getvalue() == ""


def test_eval_without_a_terminal_logs_each_phase(setup, tmp_path, monkeypatch, capsys):
    """The CLI in a log file: extraction and membership each print heartbeat lines (interval shortened), no bar."""
    import goldfish.eval.extraction_task as task
    import goldfish.eval.heartbeat as heartbeat

    root, model, docs, non = setup
    monkeypatch.setattr(heartbeat, "INTERVAL_S", 0.01)
    chunk = task.evaluate_chunk
    monkeypatch.setattr(task, "evaluate_chunk", lambda *a, **k: time.sleep(0.1) or chunk(*a, **k))  # a slow batch
    args = [
        "eval",
        "--model",
        str(model),
        "--data",
        str(docs),
        "--nonmembers",
        str(non),
        "--out",
        str(tmp_path / "ev"),
        "data.prefix_lens=[8]",
        "data.suffix_len=6",
        "membership.n_bootstrap=10",
        "report=false",
    ]
    assert main(args) == 0
    err = capsys.readouterr().err
    label = "/".join((tmp_path / "ev").parts[-3:])  # an experiment's out folder cells/<cell>/eval names its cell
    assert f"extraction [{label}]: " in err and f"membership [{label}]: " in err
    assert "it/s]" not in err and "%|" not in err


def test_the_first_heartbeat_line_comes_after_the_first_batch_with_its_measured_rate():
    """Not "0/35 (0 %) ... 0.00 windows/s" for minutes: once the count moves a line says so, long before the
    interval."""
    log, done = _Log(), [0]
    with Heartbeat(
        "extraction",
        lambda: done[0],
        total=12,
        unit="windows",
        interval=3600,
        stream=log,
        label="cells/standard_x4/eval",
        poll=0.01,
    ):
        time.sleep(0.2)  # the first batch
        done[0] = 4
        deadline = time.monotonic() + 30
        while not log.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        first = log.getvalue().splitlines()[0]
    assert first.startswith("extraction [cells/standard_x4/eval]: 4/12 (33 %) windows, 0.0 min, ")
    rate = float(first.rsplit(", ", 1)[1].split()[0])
    assert 0 < rate <= 4 / 0.2  # 4 windows in at least the 0.2 s the batch took


def test_extraction_progress_moves_per_batch_not_per_chunk(setup, tmp_path, monkeypatch):
    """The heartbeat's count advances after every decoding batch of a chunk (6 windows, batches of 2)."""
    import goldfish.eval.extraction_task as task

    root, model, docs, non = setup
    seen, counts = [], []

    def spy(shard, what, count, **kwargs):
        counts.append(count)
        return contextlib.nullcontext()

    real = task.generate

    def generate(*args, on_batch=None, **kwargs):
        def batch(n):
            on_batch(n)
            seen.append(counts[0]())

        return real(*args, on_batch=batch, **kwargs)

    monkeypatch.setattr(task, "for_shard", spy)
    monkeypatch.setattr(task, "generate", generate)
    assert (
        main(
            [
                "eval",
                "--model",
                str(model),
                "--data",
                str(docs),
                "--out",
                str(tmp_path / "ev"),
                "report=false",
                "data.prefix_lens=[8]",
                "data.suffix_len=6",
                "data.window=[start]",
                "tasks=[extraction]",
                "decoding.batch_size=2",
                "progress=false",
            ]
        )
        == 0
    )
    assert seen == [2, 4, 6]
