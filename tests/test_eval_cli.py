"""``goldfish eval`` end to end on a tiny model: results schema, resume, config precedence, one-line errors."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path

import pytest
import yaml

import goldfish.eval
from goldfish.cli import main
from goldfish.commands import evaluate
from goldfish.config import from_dict
from goldfish.errors import UserError
from goldfish.eval import EvalConfig, scoring
from goldfish.eval.attack_names import ATTACK_SPECS
from goldfish.eval.loading import SharedModel
from goldfish.eval.run import run_eval
from goldfish.eval.state import MEMBERSHIP_PARTIAL, WINDOWS_PARTIAL

from eval_fixtures import TEXTS, save_model_folder, schema_fields, tiny_llama, tiny_tokenizer, write_jsonl

WINDOW_KEYS = {
    "doc_id",
    "title",
    "repetitions",
    "split",
    "group",
    "prefix_len",
    "suffix_len",
    "window",
    "start",
    "exact_match",
    "token_match",
    "longest_match_prefix",
    "rouge_l",
    "rouge_l_words",
    "rouge_l_paper",
    "lcs_len",
    "edit_distance",
    "onepass_exact",
    "extraction_strength",
    "onepass_token_acc",
    "suffix_logprob",
    "p_suffix",
    "np_extraction",
    "generation",
    "truth",
    "generation_ids",
    "truth_ids",
    "sha256",
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    tok = tiny_tokenizer()
    model = save_model_folder(root / "run" / "model", tiny_llama(len(tok), seed=2), tok)
    docs = write_jsonl(root / "docs.jsonl", TEXTS)
    non = write_jsonl(root / "non.jsonl", [" ".join(reversed(t.split())) for t in TEXTS], "non")
    return root, model, docs, non


def _args(setup, out, *extra):
    root, model, docs, non = setup
    return [
        "eval",
        "--model",
        str(root / "run"),
        "--data",
        str(docs),
        "--nonmembers",
        str(non),
        "--out",
        str(out),
        "data.prefix_lens=8,all",
        "data.suffix_len=6",
        "data.window=[start]",
        "progress=false",
        "membership.n_bootstrap=20",
        *extra,
    ]


def _cfg(setup, out, **sections) -> EvalConfig:
    root, model, docs, non = setup
    data = {
        "model": {"path": str(model)},
        "data": {"path": str(docs), "prefix_lens": [8], "suffix_len": 6, "window": ["start"]},
        "out": str(out),
        "report": False,
        "progress": False,
        "membership": {"n_bootstrap": 10},
    }
    for key, value in sections.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) else value
    return from_dict(EvalConfig, data)


def _documented() -> dict[str, set[str]]:
    """eval/SCHEMA.md: section title -> field names listed in its table."""
    return schema_fields(Path(goldfish.eval.__file__).parent / "SCHEMA.md")


def _no_constants(name):
    raise ValueError(f"non-standard JSON constant {name}")


def test_cli_writes_results_following_the_schema(setup, tmp_path, capsys):
    out = tmp_path / "ev"
    assert main(_args(setup, out, "decoding.beam=2", "decoding.samples=2")) == 0
    printed = capsys.readouterr().out
    assert "results.json" in printed and "window start" in printed
    res = json.loads((out / "results.json").read_text(), parse_constant=_no_constants)  # strict JSON
    assert res["schema"] == "goldfish-eval/1"
    assert res["config"]["data"]["prefix_lens"] == [8, -1] and res["config"]["data"]["suffix_len"] == 6
    assert res["model"]["vocab_size"] == 300 and res["data"]["nonmembers"] == len(TEXTS)
    assert len(res["windows"]) == 2 * len(TEXTS)
    for w in res["windows"]:
        assert WINDOW_KEYS <= set(w)
        assert len(w["generation_ids"]) == len(w["truth_ids"]) == 6
        assert w["exact_match"] == (w["generation_ids"] == w["truth_ids"])
    s = res["summary"]
    assert set(s["by_prefix_len"]) == {"8", "-1"} and set(s["by_window"]) == {"start"}
    assert s["overall"]["onepass_disagreements"] == 0 and "beam_exact_match_rate" in s["by_split"]["members"]
    # every registered attack but the one needing a reference model (none given): its keys at the default Min-K 20 %
    assert set(res["membership"]["attacks"]) == {
        k for a in ATTACK_SPECS.values() if "reference_model" not in a.needs for k in a.keys([0.2])
    }
    assert len(res["membership"]["scores"]["loss"]["members"]) == len(TEXTS)
    assert "exact_match" in (out / "results.csv").read_text().splitlines()[0].split(",")
    assert yaml.safe_load((out / "eval_config.yaml").read_text())["data"]["suffix_len"] == 6
    md = (out / "report.md").read_text()
    assert "one-pass top-1 acc" in md and "## Partial memorisation" in md and "## Glossary" in md
    assert ("## By split" in md) == (len(s["by_split"]) > 1 or len(s["by_window"]) > 1)  # else the headline's row
    # every field emitted is documented in eval/SCHEMA.md
    doc = _documented()
    assert set(res) <= doc["top level"]
    for section in ("versions", "model", "data", "summary", "membership"):
        assert set(res[section]) <= doc[section], section
    rows = [
        r
        for key, strata in s.items()
        if key not in ("overall", "documents", "metrics", "by_split_window")
        for r in strata.values()
    ] + [r for strata in s["by_split_window"].values() for r in strata.values()]
    assert set().union(*map(set, rows + [s["overall"]])) <= doc["summary row"]
    assert (
        set(s["metrics"]) <= doc["summary row"]
        and set().union(*map(set, s["metrics"].values())) <= doc["summary.metrics"]
    )
    assert set().union(*map(set, s["documents"])) <= doc["summary.documents"]
    assert set().union(*map(set, res["windows"])) <= doc["windows"]
    assert len(res["documents"]) == len(TEXTS) and set().union(*map(set, res["documents"])) <= doc["documents"]
    assert set().union(*map(set, res["membership"]["attacks"].values())) <= doc["membership.attacks.<name>"]


def test_resume_refusal_and_overwrite(setup, tmp_path, capsys):
    root, model, docs, non = setup
    out = tmp_path / "ev"
    cfg = _cfg(setup, out)
    first = run_eval(cfg)
    assert not (out / WINDOWS_PARTIAL).exists() and not (out / MEMBERSHIP_PARTIAL).exists()  # finished: no partials
    assert run_eval(cfg) == first  # this evaluation, finished: its results.json is reused
    # as a kill after the windows leaves it: no results.json, the partial file with every window (one marked) and a
    # torn last line
    lines = [json.dumps(w) for w in first["windows"]]
    rec = dict(first["windows"][0], generation="MARKER")
    (out / "results.json").unlink()
    (out / WINDOWS_PARTIAL).write_text("\n".join([json.dumps(rec)] + lines[1:]) + '\n{"doc_id": "torn')
    second = run_eval(cfg)
    assert second["windows"][0]["generation"] == "MARKER"  # reused, not recomputed
    assert [w["generation_ids"] for w in second["windows"][1:]] == [w["generation_ids"] for w in first["windows"][1:]]
    assert len(second["windows"]) == len(TEXTS) and not (out / WINDOWS_PARTIAL).exists()  # torn line gone
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    code = main(
        [
            "eval",
            "--model",
            str(model),
            "--data",
            str(docs),
            "--out",
            str(out),
            "data.prefix_lens=[8]",
            "data.suffix_len=6",
            "report=false",
            "model.dtype=float16",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "different evaluation" in err and "config.model.dtype" in err and "\n" not in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing written
    weights = model / "model.safetensors"  # "retrained" model at the same path: other bytes, same size and mtime
    data, stat = bytearray(weights.read_bytes()), weights.stat()
    data[8 + int.from_bytes(data[:8], "little")] ^= 1  # the lowest mantissa bit of the first weight
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(UserError, match="different evaluation.*weights"):
        run_eval(cfg)
    fresh = run_eval(_cfg(setup, out, overwrite=True))
    assert fresh["windows"][0]["generation"] != "MARKER"
    assert run_eval(cfg)["windows"][0]["generation"] == fresh["windows"][0]["generation"]  # new fingerprint kept
    data[8 + int.from_bytes(data[:8], "little")] ^= 1  # the module's model as it was, for the tests after
    weights.write_bytes(bytes(data))


def test_a_failed_rerun_without_resume_keeps_the_earlier_results(setup, tmp_path, monkeypatch):
    import goldfish.eval.extraction_task as task

    out = tmp_path / "ev"
    run_eval(_cfg(setup, out))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "eval_log.jsonl"}

    def crash(*args, **kwargs):
        raise RuntimeError("killed")

    monkeypatch.setattr(task, "evaluate_chunk", crash)
    with pytest.raises(RuntimeError):
        run_eval(_cfg(setup, out, resume=False))  # recomputes every window: the first chunk dies
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "eval_log.jsonl"}
    assert WINDOWS_PARTIAL not in before and after.keys() == before.keys() | {WINDOWS_PARTIAL}
    assert all(after[k] == before[k] for k in before)  # results.json etc. untouched
    assert after[WINDOWS_PARTIAL] == b""  # the recomputation had finished no window


def test_killed_membership_run_resumes_without_rescoring(setup, tmp_path, monkeypatch):
    root, model, docs, non = setup
    import goldfish.eval.membership_task as task

    cfg = _cfg(setup, tmp_path / "ev", tasks=["membership"], data={"nonmembers": str(non)})
    full = run_eval(dataclasses.replace(cfg, out=str(tmp_path / "full")))
    with monkeypatch.context() as patch:  # killed after scoring, before the results were written
        patch.setattr(task.membership, "membership_section", lambda *a, **k: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            run_eval(cfg)
    partial = tmp_path / "ev" / MEMBERSHIP_PARTIAL
    lines = partial.read_text().splitlines()
    # a target, a lowercase and ReCaLL's pass after the prefix per member and nonmember (ReCaLL's unconditional
    # likelihood is the target pass's own where the document fits beside the prefix: no pass of its own)
    assert len(lines) == 3 * 2 * len(TEXTS)
    kept = lines[: len(lines) - 5]
    partial.write_text("\n".join(kept) + '\n{"key": "torn')  # killed: 5 results lost, a torn line left
    scored = []
    real = scoring._score_batch
    monkeypatch.setattr(scoring, "_score_batch", lambda m, batch, *a: scored.extend(batch) or real(m, batch, *a))
    again = run_eval(cfg)
    assert len(scored) == 5  # only the lost documents went through the model again
    # the same scores; the rescored ones (ReCaLL's prefixed pass, last in the file) to float32 batching noise: they
    # share a padded batch with other documents than in the full run
    for name, split in full["membership"]["scores"].items():
        for key, values in split.items():
            nan = float("nan")
            got = [nan if v is None else v for v in again["membership"]["scores"][name][key]]
            assert got == pytest.approx([nan if v is None else v for v in values], rel=1e-6, nan_ok=True), name


def test_membership_only_mode(setup, tmp_path):
    root, model, docs, non = setup
    res = run_eval(_cfg(setup, tmp_path / "ev", tasks=["membership"], report=True, data={"nonmembers": str(non)}))
    assert res["windows"] == [] and res["summary"] is None and res["membership"]["n_members"] == len(TEXTS)
    md = (tmp_path / "ev" / "report.md").read_text()
    assert "Extraction not run" in md and "| loss |" in md
    assert not (tmp_path / "ev" / WINDOWS_PARTIAL).exists()  # no extraction at all


def test_groups_from_a_jsonl_field(setup, tmp_path):
    root, model, docs, non = setup
    data = tmp_path / "grouped.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "text": t, "source": ["book", "web"][i % 2]}) + "\n" for i, t in enumerate(TEXTS)
        )
    )
    res = run_eval(_cfg(setup, tmp_path / "ev", data={"path": str(data), "group_field": "source"}))
    assert set(res["summary"]["by_group"]) == {"book", "web"}
    assert res["summary"]["by_group"]["book"]["n_windows"] == 3
    assert {w["group"] for w in res["windows"] if w["doc_id"] == "d0"} == {"book"}
    assert run_eval(_cfg(setup, tmp_path / "ev2", data={"path": str(data)}))["summary"]["by_group"] == {}


def test_context_and_reference_are_checked_before_anything_is_written(setup, tmp_path, capsys):
    root, model, docs, non = setup
    long = write_jsonl(tmp_path / "long.jsonl", [" ".join(TEXTS * 8)])  # > 512 tokens: the model's context
    assert (
        main(
            [
                "eval",
                "--model",
                str(model),
                "--data",
                str(long),
                "--out",
                str(tmp_path / "a"),
                "data.prefix_lens=all",
                "data.suffix_len=6",
            ]
        )
        == 2
    )
    assert "exceeds the model's context of 512" in capsys.readouterr().err and not (tmp_path / "a").exists()
    assert main(_args(setup, tmp_path / "b", "model.reference=/nonexistent/ref")) == 2
    assert "model path not found: /nonexistent/ref" in capsys.readouterr().err and not (tmp_path / "b").exists()


def test_config_precedence_defaults_yaml_command_line(setup, tmp_path, capsys):
    conf = tmp_path / "eval.yaml"
    conf.write_text("data: {suffix_len: 7, prefix_lens: [16]}\ndecoding: {beam: 2}\n")
    parser = argparse.ArgumentParser()
    evaluate.add_arguments(parser)
    cfg = evaluate.build_config(parser.parse_args([str(conf)]))
    assert (cfg.data.suffix_len, cfg.decoding.beam, cfg.data.prefix_lens, cfg.decoding.samples) == (7, 2, [16], 0)
    assert cfg.data.window == ["start"] and cfg.tasks == ["extraction", "membership"]  # the defaults
    cfg = evaluate.build_config(
        parser.parse_args(
            [
                str(conf),
                "data.suffix_len=8",
                "decoding.samples=3",
                "--offsets",
                "0,100,200",
                "--max-offset",
                "150",
                "--threads",
                "1",
            ]
        )
    )
    assert (cfg.data.suffix_len, cfg.decoding.samples, cfg.model.threads) == (8, 3, 1)
    assert (cfg.data.offsets, cfg.data.max_offset, cfg.data.window) == ([0, 100, 200], 150, ["offsets"])
    assert main(["eval", str(conf), "--out", "x", "out=y"]) == 2
    assert "--out and out= both given" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["data.prefix_lens=0"], "prefix_lens"),
        (["decoding.batch_size=many"], "batch_size"),
        (["data.stride=0", "decoding.beam=0"], "stride=0 must be >= 1"),
        (["data.window=[offsets]"], "needs data.offsets"),
        (["--model", "/nonexistent/model"], "model path not found"),
        (["--threads", "0"], "threads=0"),
        (["prefix_lens=8"], "unknown config key 'prefix_lens'"),
    ],
)
def test_user_errors_are_one_line(setup, tmp_path, capsys, extra, message):
    args = _args(setup, tmp_path / "ev", *extra)
    if extra[0] == "--model":
        args = [a for i, a in enumerate(args) if a != "--model" and (i == 0 or args[i - 1] != "--model")] + extra
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_missing_and_empty_inputs(setup, tmp_path, capsys):
    root, model, docs, non = setup
    assert main(["eval", "--data", str(docs), "--out", str(tmp_path)]) == 2
    assert "missing --model" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert main(["eval", "--model", str(model), "--data", str(empty), "--out", str(tmp_path / "o")]) == 2
    assert "holds no documents" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "text": "fine"}\n{"id": 2, "body": "no text"}\n')
    assert main(["eval", "--model", str(model), "--data", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "line 2" in capsys.readouterr().err


def test_prepared_folder_input(tmp_path):
    from goldfish.data import PrepareConfig, load_prepared, prepare

    texts = [f"Part {i}: {t} {TEXTS[(i + 1) % 6]}" for i, t in enumerate(TEXTS * 2)]  # 12 distinct openings
    corpus = write_jsonl(tmp_path / "corpus.jsonl", texts)
    pcfg = from_dict(
        PrepareConfig,
        {
            "name": "t",
            "source": {"name": "local", "path": str(corpus)},
            "tokenizer": {"name": "bpe", "vocab_size": 300},
            "seq_len": 48,
            "min_tokens": 8,
            "doc_tokens": 40,
            "num_members": 8,
            "repetitions": [1, 4],
            "nonmember_mode": "held_out",
            "num_nonmembers": 4,
        },
    )
    prepared = prepare(pcfg, out=tmp_path / "prep", progress=False)
    data = load_prepared(prepared)
    model = save_model_folder(tmp_path / "m", tiny_llama(len(data.tokenizer)))  # no tokenizer: the data's is used
    res = run_eval(
        from_dict(
            EvalConfig,
            {
                "model": {"path": str(model)},
                "data": {"path": str(prepared), "prefix_lens": [16], "suffix_len": 8, "window": ["end"]},
                "out": str(tmp_path / "ev"),
                "report": False,
                "progress": False,
                "membership": {"n_bootstrap": 10},
            },
        )
    )
    assert res["data"]["members"] == 8 and res["data"]["nonmembers"] == 4
    assert sorted({w["repetitions"] for w in res["windows"]}) == [1, 4]
    assert set(res["summary"]["by_repetitions"]) == {"1", "4"}
    first = data.members[0]
    w0 = res["windows"][0]
    assert w0["truth_ids"] == list(first["input_ids"])[-8:] and w0["truth"] == data.tokenizer.decode(w0["truth_ids"])
    assert res["membership"]["n_members"] == 8


def test_a_newly_registered_metric_reaches_every_summary_row(setup, tmp_path):
    from goldfish.eval import metrics

    @metrics.register_metric("first_token_match", higher_is_better=True, aggregation="rate")
    def first_token_match(gen, truth, gen_text="", truth_text=""):
        return bool(gen) and bool(truth) and gen[0] == truth[0]

    try:
        res = run_eval(_cfg(setup, tmp_path / "ev", tasks=["extraction"]))
    finally:
        del metrics.METRICS["first_token_match"]
    windows = res["windows"]
    hits = [w["generation_ids"][0] == w["truth_ids"][0] for w in windows]
    assert [w["first_token_match"] for w in windows] == hits  # computed for every window
    s = res["summary"]
    assert s["metrics"]["first_token_match_rate"] == {
        "metric": "first_token_match",
        "aggregation": "rate",
        "higher_is_better": True,
    }
    for row in [s["overall"], *s["by_window"].values(), *s["by_prefix_len"].values(), *s["by_split"].values()]:
        assert {"first_token_match_rate", "first_token_match_rate_ci_low", "first_token_match_rate_ci_high"} <= set(row)
    assert s["overall"]["first_token_match_rate"] == sum(hits) / len(hits)  # a count over a count: exact
    assert s["overall"]["first_token_match_rate_ci_low"] <= s["overall"]["first_token_match_rate"]


def test_whole_document_windows_are_read_from_the_target_pass(setup, tmp_path, monkeypatch):
    # prefix_lens [all] + window [end]: each member's extraction window is the whole document, which membership's
    # target pass (run first) has scored; with the model's memo it goes through the model once, same numbers
    root, model, docs, non = setup
    cfg = _cfg(setup, tmp_path / "memo", data={"nonmembers": str(non), "prefix_lens": [-1], "window": ["end"]})
    scored: list[int] = []
    real = scoring._score_batch
    monkeypatch.setattr(scoring, "_score_batch", lambda m, batch, *a: scored.extend(batch) or real(m, batch, *a))
    shared = SharedModel(cfg.model)
    got = run_eval(cfg, shared)
    with_memo, members = len(scored), len(TEXTS)
    assert shared.memo.hits == members  # extraction's one pass: every member's window from the memo
    monkeypatch.setattr(scoring.ScoreMemo, "get", lambda self, *a: None)  # the second implementation: no memo
    scored.clear()
    plain = run_eval(dataclasses.replace(cfg, out=str(tmp_path / "plain")))
    assert len(scored) == with_memo + members  # without it each member's document goes through the model twice
    # the memo's values come from the target pass's batches, plain's from extraction's: float32 batching noise
    for a, b in zip(got["windows"], plain["windows"]):
        for key in ("onepass_exact", "onepass_hits", "extraction_strength", "generation_ids"):
            assert a[key] == b[key], key
        assert a["suffix_logprob"] == pytest.approx(b["suffix_logprob"], rel=1e-6)
    assert got["membership"]["scores"] == plain["membership"]["scores"]  # the target pass itself: unchanged
