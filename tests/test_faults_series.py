"""Fault family 6 (issue 33): series and reference evaluation never evaluate what they were not given.

* ``series.checkpoints=<run>`` refuses a checkpoint another run wrote (its trainer_state fingerprint differs from the
  run's), exactly as the trainer refuses to resume from it; damaged ``summary.json`` / ``trainer_state.json`` are
  one line.
* A series label names one folder under ``<out>/models/``: ``/``, ``..``, ``.``, an absolute path, an empty name --
  given or taken from a model path -- are refused before anything is written.
* A reference model must read the documents' ids as the same text: a same-size foreign tokenizer (an AUC near 0.5
  that looks like a result) and a smaller vocabulary (an IndexError) are one line.
* Eval's JSONL is tokenised as prepare tokenises: text spelling a special token stays text; ``repetitions`` must be a
  whole number >= 0 (Infinity, NaN, 5,000 digits, -1, 1.5, "3" are one line).
"""

from __future__ import annotations

import json
import random
import shutil

import pytest
from test_faults import _eval_argv, _model_with_tokenizer, _other_bpe, assert_one_error, cli, train_argv

from goldfish.data.prepared import load_prepared


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread, as the rest of the fault suite."""


@pytest.fixture(scope="module")
def bpe_data(tmp_path_factory):
    """Prepared data with a trained BPE of 300 tokens (tokenizer identity matters here, not size)."""
    from goldfish.cli import main
    from train_helpers import REPO

    tmp = tmp_path_factory.mktemp("bpe")
    rng = random.Random(1)
    words = ["the", "of", "river", "city", "king", "war", "north", "people", "was", "built"]
    corpus = tmp / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"text": " ".join(rng.choice(words) for _ in range(80))}) + "\n" for _ in range(40))
    )
    assert (
        main(
            [
                "prepare",
                str(REPO / "data" / "local_jsonl.yaml"),
                f"source.path={corpus}",
                "seq_len=32",
                "doc_tokens=32",
                "min_tokens=16",
                "num_nonmembers=5",
                "repetitions=[1]",
                "tokenizer.name=bpe",
                "tokenizer.vocab_size=300",
                "--out",
                str(tmp / "prep"),
                "--quiet",
            ]
        )
        == 0
    )
    return tmp / "prep"


@pytest.fixture(scope="module")
def bpe_run(bpe_data, tmp_path_factory):
    from goldfish.cli import main

    run = tmp_path_factory.mktemp("bpe_run") / "run"
    assert main([str(a) for a in train_argv(bpe_data, run)]) == 0
    return run


def _series(data, out, *extra):
    return [
        "eval",
        "--data",
        data,
        "--out",
        out,
        "data.prefix_lens=[4]",
        "data.suffix_len=4",
        "report=false",
        "progress=false",
        *extra,
    ]


def test_a_checkpoint_copied_from_another_run_is_refused(data, tmp_path, capsys):
    run, other = tmp_path / "run", tmp_path / "other"
    assert cli(train_argv(data, run), capsys)[0] == 0
    assert cli(train_argv(data, other, optim__lr=0.02), capsys)[0] == 0
    foreign = run / "checkpoints" / "step_000003"
    shutil.copytree(other / "checkpoints" / "step_000002", foreign)
    state = json.loads((foreign / "trainer_state.json").read_text())
    state["step"] = state["progress"]["step"] = 3  # passes for the run's step 3
    (foreign / "trainer_state.json").write_text(json.dumps(state))
    assert_one_error(
        *cli(_series(data, tmp_path / "s", f"series.checkpoints={run}"), capsys), str(foreign), "optim.lr: 0.02 -> 0.01"
    )
    assert not (tmp_path / "s").exists()
    shutil.rmtree(foreign)  # the run's own checkpoints are evaluated
    assert cli(_series(data, tmp_path / "s", f"series.checkpoints={run}", "tasks=[extraction]"), capsys)[0] == 0
    assert sorted(p.name for p in (tmp_path / "s" / "models").iterdir()) == [
        "step_000002",
        "step_000004",
        "step_000006",
    ]


@pytest.mark.parametrize(
    "damage, needle",
    [
        ("summary", "summary.json"),
        ("state_progress", "step_000002"),
        ("state_list", "trainer_state.json"),
        ("state_garbled", "trainer_state"),
    ],
)
def test_damaged_run_files_of_a_series_are_one_line(data, tmp_path, capsys, damage, needle):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    state = run / "checkpoints" / "step_000002" / "trainer_state.json"
    if damage == "summary":
        (run / "summary.json").write_text('{"steps": 6, ')
    elif damage == "state_progress":
        state.write_text(json.dumps({**json.loads(state.read_text()), "progress": "nonsense"}))
    elif damage == "state_list":
        state.write_text("[1, 2]")
    else:
        state.write_bytes(b"\xff\x00{")
    assert_one_error(*cli(_series(data, tmp_path / "s", f"series.checkpoints={run}"), capsys), needle)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "labels, needle",
    [
        ("[x/y, z]", "x/y"),
        ("['..', z]", "'..'"),
        ("[a, '.']", "'.'"),
        ("['/tmp/elsewhere', z]", "/tmp/elsewhere"),
        ("['', z]", "is empty"),
    ],
)
def test_a_series_label_must_be_one_folder_name(data, tmp_path, capsys, labels, needle):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    argv = _series(data, tmp_path / "s", f"series.models=[{run / 'model'},{run / 'model'}]", f"series.labels={labels}")
    assert_one_error(*cli(argv, capsys), needle, "series.labels")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_label_taken_from_a_dotdot_path_is_refused(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    (run / "model" / "sub").mkdir()
    argv = _series(data, tmp_path / "s", f"series.models=[{run / 'model' / 'sub' / '..'},{run / 'model'}]")
    assert_one_error(*cli(argv, capsys), "the label taken from", "'..'")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("reference", ["same_size_foreign_tokenizer", "smaller_vocabulary"])
def test_a_reference_model_that_reads_other_text_is_refused(bpe_data, bpe_run, tmp_path, capsys, reference):
    data_tok = load_prepared(bpe_data).tokenizer
    size = len(data_tok) if reference == "same_size_foreign_tokenizer" else 260
    ref = _model_with_tokenizer(tmp_path / "ref", _other_bpe(size))
    argv = _eval_argv(bpe_run / "model", bpe_data, tmp_path / "ev", f"model.reference={ref}")
    assert_one_error(*cli(argv, capsys), f"{ref}")
    assert not (tmp_path / "ev").exists()


def test_a_reference_model_with_the_datas_tokenizer_is_used(bpe_data, bpe_run, tmp_path, capsys):
    ref = _model_with_tokenizer(tmp_path / "ref", load_prepared(bpe_data).tokenizer)
    assert cli(_eval_argv(bpe_run / "model", bpe_data, tmp_path / "ev", f"model.reference={ref}"), capsys)[0] == 0
    assert "reference" in json.loads((tmp_path / "ev" / "results.json").read_text())["membership"]["attacks"]


def test_special_token_text_in_eval_jsonl_is_tokenised_as_prepare_does(bpe_data):
    """The BPE's end-of-text token spelled out in a document is text (several ids), as prepare keeps it -- not the
    EOS id, which would end generation and shift every later id."""
    from goldfish.data.prepare_targets import _encode
    from goldfish.eval.inputs import tokenize_jsonl

    tok = load_prepared(bpe_data).tokenizer
    special = tok.eos_token
    assert special and tok.convert_tokens_to_ids(special) == tok.eos_token_id
    text = f"the river {special} the city"
    path = bpe_data.parent / "docs.jsonl"
    path.write_text(json.dumps({"id": "a", "text": text}) + "\n")
    ids = list(tokenize_jsonl(path, tok)[0].tokens)
    assert ids == _encode(tok, [text])[0] and tok.eos_token_id not in ids
    assert tok.decode(ids) == text


@pytest.mark.parametrize("value", ["Infinity", "NaN", "-Infinity", "9" * 5000, "-1", "1.5", '"3"', "true", "1e300"])
def test_jsonl_repetitions_must_be_a_whole_number(data, tmp_path, capsys, value):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "a", "text": "w3 w4 w5 w6 w7 w8 w9 w10 w11 w12", "repetitions": ' + value + "}\n")
    line = assert_one_error(*cli(_eval_argv(run / "model", docs, tmp_path / "ev"), capsys), str(docs))
    assert len(line) < 400 and not (tmp_path / "ev").exists()


def test_jsonl_repetitions_written_as_a_float_of_a_whole_number_are_read(data, tmp_path, capsys):
    from goldfish.eval.inputs import tokenize_jsonl

    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "a", "text": "w3 w4 w5", "repetitions": 2.0}\n')
    assert tokenize_jsonl(docs, load_prepared(data).tokenizer)[0].repetitions == 2
