"""Probe cases of families 6-12: series and reference models, concurrent experiments, values, numbers, paths and
files, resumes, and cases beyond the issue's families."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from cases_folders import _micro
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
    start_goldfish,
    train_argv,
    tree,
)

# ------------------------------------------------------------------------------------------------ 6 series, reference


def _series_argv(p: Probe, out: Path, *extra) -> list:
    return [
        "eval",
        "--data",
        p.prepared,
        "--out",
        out,
        "data.prefix_lens=[4]",
        "data.suffix_len=4",
        "report=false",
        "progress=false",
        "membership.n_bootstrap=10",
        *extra,
    ]


@case("6", fast=True)
def series_refuses_a_checkpoint_copied_from_another_run(p: Probe) -> None:
    run = p.run()
    other = p.work / "other"
    ok(goldfish(*train_argv(p.prepared, other, optim__lr=0.02, schedule__max_steps=2)))
    foreign = run / "checkpoints" / "step_000003"
    shutil.copytree(other / "checkpoints" / "step_000002", foreign)
    state = json.loads((foreign / "trainer_state.json").read_text())
    state["step"] = state["progress"]["step"] = 3
    (foreign / "trainer_state.json").write_text(json.dumps(state))
    one_error(goldfish(*_series_argv(p, p.work / "series", f"series.checkpoints={run}")), str(foreign), "optim.lr")
    exists(p.work / "series", False)


def _label_refused(p: Probe, labels: str, needle: str) -> None:
    """A series of the finished model twice with ``series.labels=LABELS``: one line, nothing written anywhere."""
    model = p.finished / "model"
    one_error(
        goldfish(*_series_argv(p, p.work / "s", f"series.models=[{model},{model}]", f"series.labels={labels}")),
        needle,
        "series.labels",
    )
    if list(p.work.iterdir()):
        fail(f"wrote {sorted(f.name for f in p.work.iterdir())}")


@case("6", fast=True)
def series_label_with_a_slash_is_refused(p: Probe) -> None:
    _label_refused(p, "[x/y,z]", "x/y")


@case("6")
def series_label_dotdot_is_refused(p: Probe) -> None:
    _label_refused(p, "['..',z]", "'..'")


@case("6")
def series_label_absolute_is_refused(p: Probe) -> None:
    _label_refused(p, f"['{p.work / 'elsewhere'}',z]", str(p.work / "elsewhere"))


@case("6")
def series_label_dot_and_empty_are_refused(p: Probe) -> None:
    _label_refused(p, "['.',z]", "'.'")
    _label_refused(p, "['',z]", "is empty")


@case("6")
def series_label_derived_from_a_dotdot_path_is_refused(p: Probe) -> None:
    model = p.copy(p.finished / "model", "m")
    (model / "sub").mkdir()
    one_error(goldfish(*_series_argv(p, p.work / "s", f"series.models=[{model}/sub/..,{model}]")), "label")
    exists(p.work / "s", False)


@case("6")
def series_with_a_damaged_summary_is_one_line(p: Probe) -> None:
    run = p.run()
    (run / "summary.json").write_text('{"steps": 6, ')
    one_error(goldfish(*_series_argv(p, p.work / "s", f"series.checkpoints={run}")), str(run / "summary.json"))


@case("6")
def series_with_a_damaged_trainer_state_is_one_line(p: Probe) -> None:
    run = p.run()
    state = run / "checkpoints" / "step_000002" / "trainer_state.json"
    state.write_text('{"progress": "nonsense"}')
    one_error(goldfish(*_series_argv(p, p.work / "s", f"series.checkpoints={run}")), str(state.parent))


def _reference_model(p: Probe, vocab: int, foreign: bool) -> Path:
    """A tiny model folder with ``vocab`` embeddings and a BPE tokenizer trained on other words (``foreign``) or
    the data's own tokenizer."""
    folder = p.work / f"reference_{vocab}_{foreign}"

    def build() -> None:
        import random

        from transformers import LlamaConfig, LlamaForCausalLM

        from goldfish.data.prepared import load_saved_tokenizer
        from goldfish.data.tokenizer import train_bpe

        tok = load_saved_tokenizer(p.prepared / "tokenizer")
        if foreign:
            rng = random.Random(7)
            words = ["".join(rng.choice("qwxyzjkv") for _ in range(6)) for _ in range(60)]
            tok = train_bpe([" ".join(rng.choice(words) for _ in range(50)) for _ in range(40)], vocab)
        LlamaForCausalLM(
            LlamaConfig(
                vocab_size=vocab,
                hidden_size=32,
                num_hidden_layers=1,
                num_attention_heads=2,
                num_key_value_heads=2,
                intermediate_size=64,
                max_position_embeddings=64,
            )
        ).save_pretrained(str(folder))
        tok.save_pretrained(str(folder))

    ok(in_child(build), "building a reference model")
    return folder


def _vocab(p: Probe) -> int:
    return json.loads((p.prepared / "manifest.json").read_text())["tokenizer"]["vocab_size"]


@case("6", fast=True)
def a_reference_model_with_a_same_size_foreign_tokenizer_is_refused(p: Probe) -> None:
    ref = _reference_model(p, _vocab(p), foreign=True)
    one_error(
        goldfish(*eval_argv(p.finished / "model", p.prepared, p.work / "ev", f"model.reference={ref}")),
        str(ref),
        "tokenizer",
    )
    exists(p.work / "ev", False)


@case("6")
def a_smaller_reference_model_is_refused(p: Probe) -> None:
    ref = _reference_model(p, 260, foreign=True)
    one_error(goldfish(*eval_argv(p.finished / "model", p.prepared, p.work / "ev", f"model.reference={ref}")), str(ref))
    exists(p.work / "ev", False)


@case("6")
def a_reference_model_with_the_datas_tokenizer_is_used(p: Probe) -> None:
    ref = _reference_model(p, _vocab(p), foreign=False)
    ok(goldfish(*eval_argv(p.finished / "model", p.prepared, p.work / "ev", f"model.reference={ref}")))
    results = json.loads((p.work / "ev" / "results.json").read_text())
    if "reference" not in results["membership"]["attacks"]:
        fail("no reference attack in the results")


def _jsonl(p: Probe, rows: list) -> Path:
    path = p.work / "docs.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


@case("6", fast=True)
def special_token_text_in_eval_jsonl_stays_text(p: Probe) -> None:
    text = "the river <|endoftext|> the city of the king was built " * 3
    docs = _jsonl(p, [{"id": "a", "text": text}])

    def same_ids_as_prepare() -> int:
        from goldfish.data.prepare_targets import _encode
        from goldfish.eval.inputs import tokenize_jsonl
        from goldfish.models import load_model_tokenizer

        tok = load_model_tokenizer(p.finished / "model")
        ids = tokenize_jsonl(docs, tok)[0].tokens
        return 0 if list(ids) == _encode(tok, [text])[0] and tok.eos_token_id not in ids else 3

    if in_child(same_ids_as_prepare).rc != 0:
        fail("eval tokenised the JSONL text differently from prepare (special-token text became an id)")


@case("9")
def jsonl_repetitions_infinity_is_one_line(p: Probe) -> None:
    docs = _jsonl(p, ['{"id": "a", "text": "the river city", "repetitions": Infinity}'])
    one_error(goldfish(*eval_argv(p.finished / "model", docs, p.work / "ev")), "repetitions")


@case("9")
def jsonl_repetitions_nan_is_one_line(p: Probe) -> None:
    docs = _jsonl(p, ['{"id": "a", "text": "the river city", "repetitions": NaN}'])
    one_error(goldfish(*eval_argv(p.finished / "model", docs, p.work / "ev")), "repetitions")


@case("9", fast=True)
def jsonl_repetitions_of_5000_digits_is_one_line(p: Probe) -> None:
    docs = _jsonl(p, ['{"id": "a", "text": "the river city", "repetitions": ' + "9" * 5000 + "}"])
    one_error(goldfish(*eval_argv(p.finished / "model", docs, p.work / "ev")), str(docs))


@case("9")
def jsonl_repetitions_negative_fractional_or_text_is_one_line(p: Probe) -> None:
    for value in ("-1", "1.5", '"3"', "true", "1e300"):
        docs = _jsonl(p, ['{"id": "a", "text": "the river city", "repetitions": ' + value + "}"])
        one_error(goldfish(*eval_argv(p.finished / "model", docs, p.work / "ev")), "repetitions")


# ------------------------------------------------------------------------------------------------ 7 experiments


@case("7", fast=True)
def a_second_experiment_with_another_config_does_not_report_the_firsts_cell(p: Probe) -> None:
    """Two experiments with different learning rates start into one folder at once: both find the cell unstarted,
    one trains it while the other waits on its lock. The waiting one must not take the cell (trained at the other's
    lr) as its own: exactly one succeeds, the other is one line naming the cell and the difference."""
    config = _micro(p, control=False)  # --only standard: no control cell to wait for
    out = p.work / "exp"
    runs = [
        start_goldfish("experiment", config, f"out={out}", "--no-progress", "--only", "standard", *extra)
        for extra in ([], ["train.optim.lr=0.002"])
    ]
    results = [r.wait() for r in runs]
    if sorted(r.rc for r in results) != [0, 2]:
        fail(f"exit codes {[r.rc for r in results]}: {results[0].tail(150)} / {results[1].tail(150)}")
    one_error(next(r for r in results if r.rc == 2), "standard", "train.optim.lr", bounded=False)


@case("7")
def a_rerun_of_a_finished_cell_with_another_config_is_refused(p: Probe) -> None:
    config = _micro(p, control=False)  # --only standard: no control cell to wait for
    out = p.work / "exp"
    ok(goldfish("experiment", config, f"out={out}", "--no-progress", "--only", "standard"))
    with Unchanged(out / "cells"):
        one_error(
            goldfish("experiment", config, f"out={out}", "--no-progress", "--only", "standard", "train.optim.lr=0.002"),
            "standard",
            "train.optim.lr",
        )


# ------------------------------------------------------------------------------------------------ 8 values


def _writes_exactly(p: Probe, value: str, folder: str | None = None) -> None:
    """``goldfish train out=VALUE`` (in the case's folder) creates exactly the folder ``folder`` (default: VALUE)."""
    ok(goldfish(*train_argv(p.prepared, value, schedule__max_steps=1), cwd=p.work))
    made = [f.name for f in p.work.iterdir() if not f.name.startswith(".")]
    if made != [folder or value]:
        fail(f"out={value} wrote {made}")


def _writes_case(family: str, name: str, value: str, folder: str | None = None, fast: bool = False) -> None:
    """Register the case ``name``: ``out=VALUE`` writes exactly the folder ``folder`` (default: VALUE)."""

    def check(p: Probe) -> None:
        _writes_exactly(p, value, folder)

    check.__name__ = name
    case(family, fast)(check)


for _name, _value, _folder, _fast in (
    ("out_0123_is_the_folder_0123", "0123", None, True),
    ("out_12_30_is_the_folder_12_30", "12:30", None, False),
    ("out_yes_is_the_folder_yes", "yes", None, False),
    ("out_with_a_hash_keeps_the_whole_text", "run #2", None, False),
    ("out_2024_01_01_is_text_not_a_date", "2024-01-01", None, False),
    ("a_quoted_value_is_the_text_inside_the_quotes", "'007'", "007", False),
):
    _writes_case("8", _name, _value, _folder, _fast)
_writes_case("10", "out_with_spaces_and_unicode_works", "my run ü 🐟")


@case("8")
def out_true_or_null_is_refused(p: Probe) -> None:
    for value in ("true", "null"):
        one_error(goldfish(*train_argv(p.prepared, value), cwd=p.work), "out=", "not a string")
    if list(p.work.iterdir()):
        fail(f"wrote {list(p.work.iterdir())}")


@case("8", fast=True)
def a_newline_in_a_value_is_refused_not_folded(p: Probe) -> None:
    one_error(goldfish(*train_argv(p.prepared, "a\nb"), cwd=p.work), "line break")
    if list(p.work.iterdir()):
        fail(f"wrote {list(p.work.iterdir())}")


@case("8")
def a_newline_in_a_key_is_refused(p: Probe) -> None:
    one_error(goldfish(*train_argv(p.prepared, p.work / "run"), "optim\n.lr=0.1"), "line break")


@case("8", fast=True)
def a_key_given_twice_in_a_yaml_file_names_key_and_lines(p: Probe) -> None:
    config = p.work / "c.yaml"
    config.write_text(f"out: {p.work / 'run'}\noptim:\n  lr: 0.01\n  eps: 1.0e-8\n  lr: 0.1\n")
    one_error(goldfish("train", config, f"data.path={p.prepared}"), "'lr'", "lines 3 and 5")
    exists(p.work / "run", False)


def _experiment_refused(p: Probe, edit, *needles: str) -> None:
    """The probe's micro experiment, its YAML changed by ``edit(text)``: one line holding ``needles``, no folder."""
    config = _micro(p)
    config.write_text(edit(config.read_text()))
    one_error(goldfish("experiment", config, f"out={p.work / 'exp'}", "--no-progress"), *needles)
    exists(p.work / "exp", False)


@case("8")
def a_top_level_key_given_twice_in_an_experiment_yaml(p: Probe) -> None:
    _experiment_refused(p, lambda text: text + "name: again\n", "'name'", "given twice")


@case("8", fast=True)
def an_arm_named_dotdot_is_refused(p: Probe) -> None:
    _experiment_refused(p, lambda text: text.replace("  goldfish: {", "  ..: {"), "'..'")


@case("8")
def an_arm_name_with_a_slash_is_refused(p: Probe) -> None:
    _experiment_refused(p, lambda text: text.replace("  goldfish: {", "  a/b: {"), "a/b")


@case("8")
def hex_octal_and_underscored_integers_are_refused(p: Probe) -> None:
    for value in ("0x10", "0o17", "1_000", "12:30"):
        one_error(goldfish(*train_argv(p.prepared, p.work / "run", seed=value)), "seed=", value, "not an integer")
    exists(p.work / "run", False)


@case("8")
def a_malformed_list_value_is_one_line(p: Probe) -> None:
    one_error(goldfish(*train_argv(p.prepared, p.work / "run"), "optim.betas=[0.9, 0.99"), "optim.betas")


@case("8")
def a_python_tag_in_a_yaml_file_runs_nothing(p: Probe) -> None:
    pwned = p.work / "PWNED"
    config = p.work / "c.yaml"
    config.write_text(f"seed: !!python/object/apply:os.system ['touch {pwned}']\n")
    one_error(goldfish("train", config, f"data.path={p.prepared}", f"out={p.work / 'run'}"), str(config))
    exists(pwned, False)


# ------------------------------------------------------------------------------------------------ 9 numbers


@case("9", fast=True)
def an_infinite_learning_rate_is_refused_at_config_load(p: Probe) -> None:
    for value in (".inf", ".nan", "-.inf", "1e400"):
        one_error(goldfish(*train_argv(p.prepared, p.work / "run", optim__lr=value)), "optim.lr")
    exists(p.work / "run", False)


@case("9")
def infinite_epochs_are_refused_at_config_load(p: Probe) -> None:
    one_error(
        goldfish(*train_argv(p.prepared, p.work / "run", "schedule.epochs=.inf", schedule__max_steps="null")),
        "schedule.epochs",
    )


@case("9", fast=True)
def an_enormous_seq_len_is_refused_at_config_load(p: Probe) -> None:
    one_error(goldfish(*prepare_argv(corpus(p.work / "c.jsonl"), p.work / "prep", f"seq_len={2**62}")), "seq_len")
    exists(p.work / "prep", False)


@case("9")
def an_enormous_vocab_size_is_refused_at_config_load(p: Probe) -> None:
    one_error(
        goldfish(*prepare_argv(corpus(p.work / "c.jsonl"), p.work / "prep", f"tokenizer.vocab_size={2**62}")),
        "vocab_size",
    )
    exists(p.work / "prep", False)


@case("9", fast=True)
def an_enormous_bootstrap_count_is_refused_at_config_load(p: Probe) -> None:
    one_error(
        goldfish(*eval_argv(p.finished / "model", p.prepared, p.work / "ev", f"membership.n_bootstrap={2**62}")),
        "n_bootstrap",
    )
    exists(p.work / "ev", False)


@case("9")
def enormous_repetitions_are_refused_at_config_load(p: Probe) -> None:
    one_error(
        goldfish(*prepare_argv(corpus(p.work / "c.jsonl"), p.work / "prep", f"repetitions=[1,{2**62}]")), "repetitions"
    )


@case("9")
def an_enormous_beam_or_sample_count_is_refused_at_config_load(p: Probe) -> None:
    for key in ("decoding.beam", "decoding.samples", "canaries.n_candidates"):
        one_error(
            goldfish(*eval_argv(p.finished / "model", p.prepared, p.work / "ev", f"{key}={2**62}")), key.split(".")[1]
        )
    exists(p.work / "ev", False)


def _claiming(p: Probe, **config) -> Path:
    """A copy of the finished model whose config.json claims other dimensions."""
    model = p.copy(p.finished / "model", "claims")
    data = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**data, **config}))
    return model


@case("9", fast=True)
def a_config_json_claiming_200000_layers_is_refused_in_bounded_work(p: Probe) -> None:
    model = _claiming(p, num_hidden_layers=200_000)
    one_error(goldfish(*eval_argv(model, p.prepared, p.work / "ev")), str(model))


@case("9")
def fine_tuning_a_config_json_claiming_200000_layers_is_refused(p: Probe) -> None:
    model = _claiming(p, num_hidden_layers=200_000)
    one_error(goldfish(*train_argv(p.prepared, p.work / "run", model__path=model)), str(model))
    exists(p.work / "run", False)


@case("9")
def a_config_json_claiming_enormous_widths_is_refused(p: Probe) -> None:
    for claim in (
        {"hidden_size": 2**40},
        {"intermediate_size": 2**40},
        {"vocab_size": 2**40},
        {"num_attention_heads": 2**40},
    ):
        model = _claiming(p, **claim)
        one_error(goldfish(*eval_argv(model, p.prepared, p.work / "ev")), str(model))
        shutil.rmtree(model)


@case("9")
def an_enormous_model_override_is_one_line(p: Probe) -> None:
    for key, value in (("model.hidden_size", 2**62), ("model.num_layers", 10**12), ("model.intermediate_size", 2**50)):
        one_error(goldfish(*train_argv(p.prepared, p.work / "run", **{key.replace(".", "__"): value})))
        exists(p.work / "run", False)


@case("9", fast=True)
def a_run_whose_weights_become_non_finite_exports_no_model_or_card(p: Probe) -> None:
    run = p.work / "run"
    one_error(
        goldfish(
            *train_argv(
                p.prepared,
                run,
                optim__lr=1e300,
                optim__warmup_steps=0,
                optim__max_grad_norm="null",
                schedule__max_steps=1,
            )
        ),
        "diverged",
    )
    exists(run / "model", False)
    exists(run / "summary.json", False)


@case("9")
def a_run_diverging_at_its_last_step_exports_nothing_and_a_rerun_says_so_again(p: Probe) -> None:
    run = p.work / "run"
    argv = train_argv(
        p.prepared,
        run,
        optim__lr=1e30,
        optim__warmup_steps=0,
        optim__max_grad_norm="null",
        schedule__max_steps=3,
        checkpoint__every_steps=1,
    )
    one_error(goldfish(*argv), "diverged")
    one_error(goldfish(*argv), "diverged")
    exists(run / "model", False)


# ------------------------------------------------------------------------------------------------ 10 paths and files


@case("10", fast=True)
def out_under_a_regular_file_is_one_line(p: Probe) -> None:
    (p.work / "file").write_text("mine")
    with Unchanged(p.work / "file"):
        one_error(goldfish(*train_argv(p.prepared, p.work / "file" / "run")), str(p.work / "file"))


@case("10")
def out_in_a_symlink_loop_is_one_line(p: Probe) -> None:
    (p.work / "loop").symlink_to(p.work / "loop")
    one_error(goldfish(*train_argv(p.prepared, p.work / "loop" / "run")), "loop")


@case("10", fast=True)
def out_with_a_300_character_name_is_one_line(p: Probe) -> None:
    one_error(goldfish(*train_argv(p.prepared, p.work / ("r" * 300))), "too long")


@case("10")
def out_beyond_the_longest_path_is_one_line(p: Probe) -> None:
    deep = p.work.joinpath(*(["d" * 200] * 25))
    one_error(goldfish(*train_argv(p.prepared, deep)), "too long")


@case("10")
def prepare_from_txt_files_with_a_non_utf8_name_is_one_line_or_works(p: Probe) -> None:
    folder = p.work / "texts"
    folder.mkdir()
    for i in range(30):
        (folder / f"doc{i}.txt").write_text(" ".join(["the river city king"] * 30))
    (Path(os.fsdecode(bytes(folder) + b"/caf\xe9.txt"))).write_text(" ".join(["the stone light"] * 30))
    r = goldfish(*prepare_argv(folder, p.work / "prep"))
    if r.rc != 0:
        one_error(r, "UTF-8")


@case("10", fast=True)
def mask_file_that_is_a_folder_is_one_line(p: Probe) -> None:
    one_error(goldfish("mask", "--file", p.work), str(p.work))


@case("10")
def mask_file_missing_is_one_line(p: Probe) -> None:
    one_error(goldfish("mask", "--file", p.work / "missing.txt"), "missing.txt")


@case("10", fast=True)
def mask_invalid_utf8_on_stdin_is_one_line(p: Probe) -> None:
    one_error(goldfish("mask", "--file", "-", stdin=b"caf\xe9 au lait\n"), "UTF-8")


@case("10")
def mask_latin1_file_is_one_line(p: Probe) -> None:
    (p.work / "latin1.txt").write_bytes(b"caf\xe9 au lait\n")
    one_error(goldfish("mask", "--file", p.work / "latin1.txt"), "UTF-8")


def _killed_at_step_4(p: Probe) -> Path:
    run = p.run()
    shutil.rmtree(run / "model")
    (run / "summary.json").unlink()
    shutil.rmtree(run / "checkpoints" / "step_000006")
    return run


def _resumes_past(p: Probe, damaged: str, texts: tuple[str, ...]) -> None:
    """Each of ``texts`` as the newest checkpoint's file ``damaged``: auto-resume skips that checkpoint with a warning
    (or stops with one line naming it), never a traceback or a stuck run."""
    for text in texts:
        run = _killed_at_step_4(p)
        (run / "checkpoints" / "step_000004" / damaged).write_text(text)
        r = goldfish(*train_argv(p.prepared, run))
        if r.rc != 0:
            one_error(r, "step_000004")
        elif "skipping checkpoint" not in r.err:
            fail(f"resumed from {damaged} = {text[:40]} without saying it skipped that checkpoint")
        shutil.rmtree(run)


@case("10", fast=True)
def a_damaged_rng_file_in_the_newest_checkpoint_falls_back_or_is_one_line(p: Probe) -> None:
    _resumes_past(p, "rng_rank00000.json", ('{"python": [3, [1, 2], null], "numpy"',))


@case("10")
def an_rng_file_of_the_wrong_shape_falls_back_or_is_one_line(p: Probe) -> None:
    _resumes_past(p, "rng_rank00000.json", ('{"python": 1, "numpy": [1]}', "[]", '{"python": [3, [], null]}'))


@case("10")
def a_trainer_state_of_the_wrong_shape_falls_back_or_is_one_line(p: Probe) -> None:
    _resumes_past(
        p,
        "trainer_state.json",
        (
            '{"progress": "x", "world_size": 1}',
            "[1, 2]",
            '{"world_size": 1, "rows": 16, "seq_len": 32, "global_batch_size": 4, "progress": {"step": "four"}}',
        ),
    )


@case("10")
def every_checkpoint_damaged_says_how_to_proceed(p: Probe) -> None:
    run = _killed_at_step_4(p)
    for folder in (run / "checkpoints").iterdir():
        (folder / "trainer_state.json").write_text("{")
    with Unchanged(run):
        one_error(goldfish(*train_argv(p.prepared, run)), "no readable checkpoint", "--overwrite")


def _fine_tunes_with_card(p: Probe, card: bytes) -> None:
    """Fine-tuning a copy of the finished model whose README.md is ``card``: it finishes (the card's license is then
    unknown, with a warning), or stops with one line naming the card -- never a traceback at export."""
    model = p.copy(p.finished / "model", "base")
    (model / "README.md").write_bytes(card)
    r = goldfish(*train_argv(p.prepared, p.work / "run", model__path=model, schedule__max_steps=1))
    if r.rc != 0:
        one_error(r, "README.md")


@case("10", fast=True)
def fine_tuning_a_model_whose_card_has_a_python_tag_is_not_a_traceback(p: Probe) -> None:
    _fine_tunes_with_card(p, b"---\nlicense: !!python/object/apply:os.system ['true']\n---\n# card\n")


@case("10")
def fine_tuning_a_model_whose_card_is_latin1_is_not_a_traceback(p: Probe) -> None:
    _fine_tunes_with_card(p, b"---\nlicense: mit\n---\n# caf\xe9\n")


@case("10")
def eval_update_card_of_a_model_whose_card_is_damaged_is_not_a_traceback(p: Probe) -> None:
    run = p.run()
    (run / "model" / "README.md").write_bytes(b"---\nbase_model: [unclosed\n---\n\xff\n")
    r = goldfish(*eval_argv(run / "model", p.prepared, p.work / "ev", "--update-card"))
    if r.rc != 0:
        one_error(r, "README.md")


@case("10")
def data_path_that_is_a_file_is_one_line(p: Probe) -> None:
    (p.work / "data.txt").write_text("x")
    one_error(goldfish(*train_argv(p.work / "data.txt", p.work / "run")), "data.txt")


@case("10")
def a_config_file_that_is_a_folder_is_one_line(p: Probe) -> None:
    one_error(goldfish("train", p.work, f"data.path={p.prepared}", f"out={p.work / 'run'}"), str(p.work))


@case("10")
def a_model_path_that_is_a_fifo_does_not_hang(p: Probe) -> None:
    os.mkfifo(p.work / "model.gguf")
    one_error(goldfish(*eval_argv(p.work / "model.gguf", p.prepared, p.work / "ev")), "model.gguf")


@case("10")
def a_source_that_is_a_fifo_does_not_hang(p: Probe) -> None:
    os.mkfifo(p.work / "corpus.jsonl")
    one_error(goldfish(*prepare_argv(p.work / "corpus.jsonl", p.work / "prep")), "corpus.jsonl")


@case("10")
def a_nul_character_in_a_path_from_a_yaml_file_is_one_line(p: Probe) -> None:
    config = p.work / "c.yaml"
    config.write_text('out: "runs/a\\0b"\n')
    one_error(goldfish("train", config, f"data.path={p.prepared}"), "NUL")


@case("10")
def resume_from_a_file_or_a_non_checkpoint_folder_is_one_line(p: Probe) -> None:
    (p.work / "ckpt").write_text("x")
    one_error(goldfish(*train_argv(p.prepared, p.work / "run", checkpoint__resume=p.work / "ckpt")), "ckpt")
    one_error(goldfish(*train_argv(p.prepared, p.work / "run", checkpoint__resume=p.prepared)), str(p.prepared))


# ------------------------------------------------------------------------------------------------ 11 resume


@case("11", fast=True)
def resuming_with_another_micro_batch_size_is_refused(p: Probe) -> None:
    run = _killed_at_step_4(p)
    with Unchanged(run):
        one_error(goldfish(*train_argv(p.prepared, run, schedule__micro_batch_size=4)), "schedule.micro_batch_size")


@case("11")
def resuming_with_the_same_config_continues(p: Probe) -> None:
    run = _killed_at_step_4(p)
    ok(goldfish(*train_argv(p.prepared, run)))
    exists(run / "model" / "model.safetensors")


@case("11")
def resuming_from_another_runs_checkpoint_with_another_micro_batch_is_refused(p: Probe) -> None:
    step = p.finished / "checkpoints" / "step_000004"
    one_error(
        goldfish(*train_argv(p.prepared, p.work / "run", schedule__micro_batch_size=4, checkpoint__resume=step)),
        "schedule.micro_batch_size",
    )
    exists(p.work / "run", False)


# ------------------------------------------------------------------------------------------------ 12 beyond


@case("12")
def a_yaml_config_with_a_tab_is_one_line(p: Probe) -> None:
    config = p.work / "c.yaml"
    config.write_text("optim:\n\tlr: 0.1\n")
    one_error(goldfish("train", config, f"data.path={p.prepared}"), str(config))


@case("12")
def a_manifest_that_is_a_list_is_one_line(p: Probe) -> None:
    prep = p.copy(p.prepared, "prep")
    (prep / "manifest.json").write_text("[1, 2]")
    one_error(goldfish(*train_argv(prep, p.work / "run")), str(prep))


@case("12")
def eval_of_a_run_folder_without_a_model_is_one_line(p: Probe) -> None:
    run = _killed_at_step_4(p)
    one_error(goldfish(*eval_argv(run, p.prepared, p.work / "ev")), str(run))


@case("12")
def eval_nonmembers_that_is_a_folder_without_manifest_is_one_line(p: Probe) -> None:
    (p.work / "nm").mkdir()
    one_error(
        goldfish(*eval_argv(p.finished / "model", p.prepared, p.work / "ev", "--nonmembers", p.work / "nm")), "nm"
    )


@case("12")
def an_unknown_key_names_the_valid_ones(p: Probe) -> None:
    one_error(goldfish(*train_argv(p.prepared, p.work / "run"), "optim.lrr=0.1"), "optim.lrr", "valid keys")


@case("12")
def a_jsonl_with_a_duplicate_id_is_one_line(p: Probe) -> None:
    docs = _jsonl(p, [{"id": "a", "text": "the river city " * 5}, {"id": "a", "text": "the stone light " * 5}])
    r = goldfish(*eval_argv(p.finished / "model", docs, p.work / "ev"))
    if r.rc != 0:
        one_error(r, "a")


@case("12")
def eval_out_that_is_the_model_folder_is_refused(p: Probe) -> None:
    run = p.run()
    with Unchanged(run):
        one_error(goldfish(*eval_argv(run / "model", p.prepared, run / "model")), str(run / "model"))


@case("12")
def train_out_that_is_its_own_data_folder_is_refused(p: Probe) -> None:
    prep = p.copy(p.prepared, "prep")
    with Unchanged(prep):
        one_error(goldfish(*train_argv(prep, prep)), "prepared data")


@case("12")
def experiment_out_that_is_a_prepared_folder_is_refused(p: Probe) -> None:
    prep = p.copy(p.prepared, "prep")
    with Unchanged(prep):
        one_error(goldfish("experiment", _micro(p), f"out={prep}", "--no-progress"), "prepared data")


@case("12")
def two_trains_into_one_folder_one_is_refused(p: Probe) -> None:
    out = p.work / "run"
    children = [start_goldfish(*train_argv(p.prepared, out, schedule__max_steps=20)) for _ in range(2)]
    results = [c.wait() for c in children]
    codes = sorted(r.rc for r in results)
    if codes not in ([0, 0], [0, 2]):
        fail(f"exit codes {codes}")
    if codes == [0, 2]:
        one_error(next(r for r in results if r.rc == 2), "being written by another goldfish process")
    ok(goldfish(*train_argv(p.prepared, out, schedule__max_steps=20)))


@case("12")
def a_finished_run_is_left_alone_by_a_rerun(p: Probe) -> None:
    run = p.work / "run"
    ok(goldfish(*train_argv(p.prepared, run)))
    before = {k: v for k, v in tree(run).items() if not k.endswith("summary.json")}
    ok(goldfish(*train_argv(p.prepared, run)))
    after = {k: v for k, v in tree(run).items() if not k.endswith("summary.json")}
    if after != before:
        fail(f"changed: {sorted(set(before.items()) ^ set(after.items()))[:3]}")


@case("9")
def a_finite_but_endless_schedule_is_one_line(p: Probe) -> None:
    for key, value in (("schedule.epochs", "1e300"), ("schedule.max_tokens", str(2**62))):
        one_error(
            goldfish(*train_argv(p.prepared, p.work / "run", schedule__max_steps="null"), f"{key}={value}"),
            "optimizer steps",
        )
    exists(p.work / "run", False)
