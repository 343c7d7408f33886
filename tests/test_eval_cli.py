"""``goldfish eval`` end to end on a tiny model: results schema, resume, config precedence, one-line errors."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from goldfish.eval import EvalConfig, run_eval
from goldfish.eval.run import PARTIAL
from goldfish.cli import main
from goldfish.errors import UserError

from eval_fixtures import TEXTS, save_model_folder, tiny_llama, tiny_tokenizer, write_jsonl

WINDOW_KEYS = {"doc_id", "title", "repetitions", "split", "prefix_len", "suffix_len", "window", "start",
               "exact_match", "token_match", "longest_match_prefix", "rouge_l", "rouge_l_words", "lcs_len",
               "edit_distance", "onepass_exact", "extraction_strength", "suffix_logprob", "p_suffix",
               "np_extraction", "generation", "truth", "generation_ids", "truth_ids", "sha256"}


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
    return ["eval", "--model", str(root / "run"), "--data", str(docs), "--nonmembers", str(non), "--out", str(out),
            "--prefix-len", "8,all", "--suffix-len", "6", "--no-progress", "n_bootstrap=20", *extra]


def test_cli_writes_results_following_the_schema(setup, tmp_path, capsys):
    out = tmp_path / "ev"
    assert main(_args(setup, out)) == 0
    printed = capsys.readouterr().out
    assert "results.json" in printed
    res = json.loads((out / "results.json").read_text())
    assert res["schema"] == "goldfish-eval/1"
    assert set(res["versions"]) >= {"goldfish", "torch", "transformers"}
    assert res["config"]["prefix_lens"] == [8, -1] and res["config"]["suffix_len"] == 6
    assert res["model"]["vocab_size"] == 300 and res["model"]["num_parameters"] > 0
    assert res["data"]["members"] == len(TEXTS) and res["data"]["nonmembers"] == len(TEXTS)
    assert len(res["windows"]) == 2 * len(TEXTS)
    for w in res["windows"]:
        assert WINDOW_KEYS <= set(w)
        assert len(w["generation_ids"]) == len(w["truth_ids"]) == 6
        assert w["exact_match"] == (w["generation_ids"] == w["truth_ids"])
    assert res["summary"]["overall"]["n_windows"] == 2 * len(TEXTS)
    assert set(res["summary"]["by_prefix_len"]) == {"8", "-1"}
    assert res["summary"]["overall"]["onepass_disagreements"] == 0
    assert {"loss", "zlib", "min_k_20", "min_k_pp_20"} <= set(res["membership"]["attacks"])
    assert len(res["membership"]["scores"]["loss"]["members"]) == len(TEXTS)
    csv_header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert "exact_match" in csv_header and "generation_ids" not in csv_header
    assert (out / "report.md").is_file() and (out / "eval_config.yaml").is_file()
    assert yaml.safe_load((out / "eval_config.yaml").read_text())["suffix_len"] == 6


def test_resume_skips_finished_windows(setup, tmp_path):
    root, model, docs, non = setup
    out = tmp_path / "ev"
    cfg = EvalConfig(model=str(model), data=str(docs), out=str(out), prefix_lens=[8], suffix_len=6,
                     report=False, progress=False)
    first = run_eval(cfg)
    lines = (out / PARTIAL).read_text().splitlines()
    assert json.loads(lines[0])["fingerprint"]["model"] == str(model)
    # mark one finished window, and leave a torn line as a killed run would
    rec = json.loads(lines[1])
    rec["generation"] = "MARKER"
    (out / PARTIAL).write_text("\n".join([lines[0], json.dumps(rec)]) + "\n{\"doc_id\": \"torn")
    second = run_eval(cfg)
    assert second["windows"][0]["generation"] == "MARKER"  # reused, not recomputed
    assert [w["sha256"] for w in second["windows"]] == [w["sha256"] for w in first["windows"]]
    assert [w["generation_ids"] for w in second["windows"][1:]] == [w["generation_ids"] for w in first["windows"][1:]]
    assert len((out / PARTIAL).read_text().splitlines()) == 1 + len(TEXTS)  # torn line gone, nothing duplicated
    with pytest.raises(UserError, match="different setup.*dtype"):
        run_eval(EvalConfig(**{**cfg.__dict__, "dtype": "bfloat16"}))
    os.utime(model / "model.safetensors", ns=(1, 1))  # "retrained" model at the same path
    with pytest.raises(UserError, match="different setup.*weights"):
        run_eval(cfg)
    fresh = run_eval(EvalConfig(**{**cfg.__dict__, "resume": False}))
    assert fresh["windows"][0]["generation"] != "MARKER"


def test_config_precedence_defaults_yaml_overrides_flags(setup, tmp_path):
    import argparse

    from goldfish.commands import evaluate
    from goldfish.commands.evaluate import build_config

    conf = tmp_path / "eval.yaml"
    conf.write_text("suffix_len: 7\nbeam: 2\nprefix_lens: [16]\n")
    parser = argparse.ArgumentParser()
    evaluate.add_arguments(parser)
    cfg = build_config(parser.parse_args([str(conf)]))
    assert (cfg.suffix_len, cfg.beam, cfg.prefix_lens, cfg.samples) == (7, 2, [16], 0)
    cfg = build_config(parser.parse_args([str(conf), "suffix_len=8", "samples=3"]))
    assert (cfg.suffix_len, cfg.samples) == (8, 3)
    cfg = build_config(parser.parse_args([str(conf), "suffix_len=8", "--suffix-len", "9", "--prefix-len", "32",
                                          "--prefix-len", "all,64", "--batch-size", "4", "--window", "start",
                                          "--window", "end"]))
    assert (cfg.suffix_len, cfg.prefix_lens, cfg.batch_size, cfg.window) == (9, [32, -1, 64], 4, ["start", "end"])


@pytest.mark.parametrize("extra, message", [
    (["--prefix-len", "0"], "prefix_lens"),
    (["--suffix-len", "500"], "too short"),
    (["--batch-size", "many"], "batch-size"),
    (["stride=0", "beam=0"], "stride=0 must be >= 1; beam=0"),
    (["--model", "/nonexistent/model"], "model path not found"),
])
def test_user_errors_are_one_line(setup, tmp_path, capsys, extra, message):
    assert main(_args(setup, tmp_path / "ev", *extra)) == 2
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
    from goldfish.config import from_dict

    texts = [f"Part {i}: {t} {TEXTS[(i + 1) % 6]}" for i, t in enumerate(TEXTS * 2)]  # 12 distinct openings
    corpus = write_jsonl(tmp_path / "corpus.jsonl", texts)
    pcfg = from_dict(PrepareConfig, {"name": "t", "source": {"name": "local", "path": str(corpus)},
                                     "tokenizer": {"name": "bpe", "vocab_size": 300}, "seq_len": 48,
                                     "min_tokens": 8, "doc_tokens": 40, "num_members": 8, "repetitions": [1, 4],
                                     "nonmember_mode": "held_out", "num_nonmembers": 4})
    prepared = prepare(pcfg, out=tmp_path / "prep", progress=False)
    data = load_prepared(prepared)
    model = save_model_folder(tmp_path / "m", tiny_llama(len(data.tokenizer)))  # no tokenizer: the data's is used
    res = run_eval(EvalConfig(model=str(model), data=str(prepared), out=str(tmp_path / "ev"), prefix_lens=[16],
                              suffix_len=8, report=False, progress=False, n_bootstrap=10))
    assert res["data"]["members"] == 8 and res["data"]["nonmembers"] == 4
    assert sorted({w["repetitions"] for w in res["windows"]}) == [1, 4]
    assert set(res["summary"]["by_repetitions"]) == {"1", "4"}
    first = data.members[0]
    w0 = res["windows"][0]
    assert w0["truth_ids"] == list(first["input_ids"])[-8:] and w0["truth"] == data.tokenizer.decode(w0["truth_ids"])
    assert res["membership"]["n_members"] == 8
