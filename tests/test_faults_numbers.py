"""Fault family 9 (issue 33): non-finite and enormous numbers are one line where the config is read.

A float setting refuses NaN and infinities; a count that sizes work or memory has an upper bound checked at config
load (``goldfish.config.check_at_most``), never discovered after the work; a model ``config.json`` that claims more
parameters than its weight files hold is refused from the files' headers before anything is built; and a run whose
weights stop being finite never saves that checkpoint, so it never exports a model or a card.
"""

from __future__ import annotations

import json
import shutil
import time
import tracemalloc

import pytest
import torch
from safetensors.torch import load_file
from test_faults import _corpus, _eval_argv, _prepare_argv, assert_one_error, cli, train_argv

from goldfish.checkpoint import list_checkpoints

from goldfish.config import load_config
from goldfish.errors import ConfigError
from goldfish.train_config import TrainConfig


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """One torch thread, as the rest of the fault suite."""


@pytest.mark.parametrize(
    "override",
    [
        "optim.lr=.inf",
        "optim.lr=.nan",
        "optim.lr=-.inf",
        "optim.lr=1e400",
        "schedule.epochs=.inf",
        "optim.eps=.nan",
        "optim.max_grad_norm=.inf",
        "optim.weight_decay=1e999",
    ],
)
def test_a_non_finite_float_is_refused_at_config_load(override):
    with pytest.raises(ConfigError, match=rf"{override.split('=')[0].split('.')[-1]}=.*not a finite number"):
        load_config(TrainConfig, None, [override])


@pytest.mark.parametrize(
    "command, override, needle",
    [
        ("prepare", f"seq_len={2**62}", "seq_len=4611686018427387904 is beyond 1,048,576"),
        ("prepare", f"tokenizer.vocab_size={2**62}", "vocab_size="),
        ("prepare", f"repetitions=[1,{2**62}]", "repetitions="),
        ("eval", f"membership.n_bootstrap={2**62}", "n_bootstrap="),
        ("eval", f"decoding.beam={2**62}", "beam="),
        ("eval", f"decoding.samples={2**62}", "samples="),
        ("eval", f"canaries.n_candidates={2**62}", "n_candidates="),
    ],
)
def test_an_enormous_count_is_refused_before_any_work(data, tmp_path, capsys, command, override, needle):
    if command == "prepare":
        argv = _prepare_argv(_corpus(tmp_path / "corpus.jsonl", docs=30), tmp_path / "out", override)
    else:
        assert cli(train_argv(data, tmp_path / "run"), capsys)[0] == 0
        argv = _eval_argv(tmp_path / "run" / "model", data, tmp_path / "out", override)
    start = time.perf_counter()
    assert_one_error(*cli(argv, capsys), needle)
    assert time.perf_counter() - start < 60 and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "override",
    [
        "model.hidden_size=4611686018427387904",
        "model.num_layers=1000000000000",
        "model.intermediate_size=1125899906842624",
    ],
)
def test_an_enormous_model_to_build_is_refused_before_it_is_built(data, tmp_path, capsys, override):
    tracemalloc.start()
    assert_one_error(*cli([*train_argv(data, tmp_path / "run"), override], capsys), "parameters")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2**28 and not (tmp_path / "run").exists()  # refused from arithmetic, not a failed allocation


@pytest.mark.parametrize(
    "claim",
    [{"num_hidden_layers": 200_000}, {"hidden_size": 2**40}, {"intermediate_size": 2**40}, {"vocab_size": 2**40}],
)
@pytest.mark.parametrize("use", ["eval", "fine_tune", "series_export"])
def test_a_config_json_claiming_more_than_its_weights_is_refused_before_building(data, tmp_path, capsys, claim, use):
    run = tmp_path / "run"
    assert cli(train_argv(data, run), capsys)[0] == 0
    model = shutil.copytree(run / "model", tmp_path / "claims")
    (model / "config.json").write_text(json.dumps({**json.loads((model / "config.json").read_text()), **claim}))
    if use == "eval":
        argv, needle = _eval_argv(model, data, tmp_path / "out"), str(model)
    elif use == "fine_tune":
        argv, needle = train_argv(data, tmp_path / "out", model={"path": str(model)}), str(model)
    else:  # checkpoints are exported with the shape of the run's final model/
        shutil.rmtree(run / "model")
        shutil.move(model, run / "model")
        argv = [
            "eval",
            f"series.checkpoints={run}",
            "--data",
            data,
            "--out",
            tmp_path / "out",
            "data.prefix_lens=[4]",
            "data.suffix_len=4",
            "report=false",
            "progress=false",
        ]
        needle = "describes at least"
    tracemalloc.start()
    start = time.perf_counter()
    line = assert_one_error(*cli(argv, capsys), needle)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "describes at least" in line or "could not load" in line
    assert time.perf_counter() - start < 60 and peak < 2**29


def test_the_size_check_passes_every_shipped_size():
    """The lower bound never exceeds a real model's parameters (else a real model would be refused)."""
    from goldfish.models import llama_config, parameters_at_least
    from goldfish.sizes import SIZES
    from goldfish.train_config import ModelConfig

    for name in SIZES:
        config = llama_config(ModelConfig(name=name), 32000)
        h, layers, inter, vocab = (
            config.hidden_size,
            config.num_hidden_layers,
            config.intermediate_size,
            config.vocab_size,
        )
        kv = config.num_key_value_heads * (h // config.num_attention_heads)
        exact = (
            vocab * h * (1 if config.tie_word_embeddings else 2)
            + layers * (2 * h * h + 2 * h * kv + 3 * h * inter + 2 * h)
            + h
        )
        assert parameters_at_least(config) <= exact, name


@pytest.mark.parametrize(
    "lr, steps, needle", [(1e300, 1, "weights are no longer finite"), (1e30, 3, "training diverged at step 2")]
)
def test_a_run_whose_weights_or_loss_turn_non_finite_exports_no_model_or_card(
    data, tmp_path, capsys, lr, steps, needle
):
    run = tmp_path / "run"
    argv = train_argv(
        data,
        run,
        optim__lr=lr,
        optim__warmup_steps=0,
        optim__max_grad_norm=None,
        schedule={"max_steps": steps, "global_batch_size": 4, "micro_batch_size": 2},
        checkpoint={"every_steps": 1, "keep_last": 0},
    )
    assert_one_error(*cli(argv, capsys), needle)
    assert not (run / "model").exists() and not (run / "summary.json").exists()
    assert_one_error(*cli(argv, capsys), needle)  # a rerun says the same, and still exports nothing
    assert not (run / "model").exists() and not (run / "summary.json").exists()
    for folder in list_checkpoints(run):  # no checkpoint ever holds what the failed step left
        weights = load_file(str(folder / "model_rank00000.safetensors"))
        assert all(bool(torch.isfinite(t).all()) for t in weights.values()), folder


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma_narrow_heads", "qwen2_tied"])
def test_the_lower_bound_holds_for_other_architectures(family):
    """parameters_at_least <= the parameters transformers builds, also where attention is narrower than the width
    (Gemma: heads x head_dim < hidden) or the head is tied."""
    import transformers

    from goldfish.models import count_parameters, parameters_at_least

    configs = {
        "llama": transformers.LlamaConfig(
            vocab_size=300,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=1,
            intermediate_size=96,
        ),
        "gpt2": transformers.GPT2Config(vocab_size=300, n_embd=64, n_layer=2, n_head=4),
        "gemma_narrow_heads": transformers.GemmaConfig(
            vocab_size=300,
            hidden_size=96,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            intermediate_size=64,
        ),
        "qwen2_tied": transformers.Qwen2Config(
            vocab_size=300,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=96,
            tie_word_embeddings=True,
        ),
    }
    config = configs[family]
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert 0 < parameters_at_least(config) <= count_parameters(model)


@pytest.mark.parametrize(
    "override",
    ["schedule.epochs=1e300", "schedule.max_steps=4611686018427387904", "schedule.max_tokens=4611686018427387904"],
)
def test_a_finite_but_endless_schedule_is_one_line_before_training(data, tmp_path, capsys, override):
    """1e300 epochs is a number, not a budget: refused before a step (it used to train until killed)."""
    argv = [*train_argv(data, tmp_path / "run", schedule={"global_batch_size": 4, "micro_batch_size": 2}), override]
    assert_one_error(*cli(argv, capsys), "optimizer steps", "beyond 1e+12")
    assert not (tmp_path / "run").exists()
