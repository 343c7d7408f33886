"""Faults around model cards (issue 33, family 7, second half): `goldfish eval --update-card` must never write the
numbers of one set of weights into the card of another -- not when `goldfish train --overwrite` replaces the model
while the evaluation runs, not when the card in the folder describes other weights."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from huggingface_hub import ModelCard
from train_helpers import make_prepared, overrides_of, tiny_config

from goldfish.cli import main
from goldfish.errors import UserError
from goldfish.modelcard import NO_EVAL, WEIGHTS, add_eval_results, eval_results, weights_id
from goldfish.model_source import weights_stamp

EVAL = ["data.prefix_lens=[4]", "data.suffix_len=4", "progress=false", "report=false"]


@pytest.fixture
def trained(tmp_path):
    torch.set_num_threads(1)
    data = make_prepared(tmp_path / "data")
    cfg = tiny_config(data, tmp_path / "run", schedule={"max_steps": 2}, loss={"type": "goldfish"})
    assert main(["train", *overrides_of(cfg)]) == 0
    return cfg, data, tmp_path / "run"


def test_update_card_during_an_overwrite_train_keeps_the_old_numbers_out(trained, tmp_path, capsys, monkeypatch):
    """The evaluation reads the old weights; while it runs, `train --overwrite` replaces the run (new weights, new
    card). Its numbers belong to the old weights: the new card stays unevaluated, with one error line."""
    import goldfish.eval.run as run_module

    cfg, data, run = trained
    old = weights_stamp(run)
    evaluate = run_module.evaluate_windows

    def overwrite_then_evaluate(*args, **kwargs):
        retrain = {**cfg, "seed": 1}  # other weights
        assert main(["train", *overrides_of(retrain), "--overwrite"]) == 0
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(run_module, "evaluate_windows", overwrite_then_evaluate)
    capsys.readouterr()
    rc = main(["eval", "--model", str(run), "--data", str(data), "--out", str(tmp_path / "ev"), "--update-card", *EVAL])
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error:")]
    assert rc == 2 and len(errors) == 1 and "is not the one evaluated: its weights changed" in errors[0]
    new = weights_stamp(run)
    assert new != old
    card = ModelCard.load(run / "model" / "README.md")
    assert not card.data.eval_results and NO_EVAL in card.text  # the new model's card: nothing of the old weights
    assert card.data.to_dict()[WEIGHTS] == weights_id(new)
    results = json.loads((tmp_path / "ev" / "results.json").read_text())  # the evaluation itself is kept
    assert results["model"]["weights"] == old


def test_a_card_describing_other_weights_is_refused(trained, tmp_path):
    """A folder whose card records other weights (a card copied from another model) gets no numbers from these."""
    cfg, data, run = trained
    assert main(["eval", "--model", str(run), "--data", str(data), "--out", str(tmp_path / "ev"), *EVAL]) == 0
    results = json.loads((tmp_path / "ev" / "results.json").read_text())
    other = tmp_path / "other"
    assert main(["train", *overrides_of({**cfg, "seed": 2, "out": str(other)})]) == 0
    shutil.copy(other / "model" / "README.md", run / "model" / "README.md")  # the card of other weights
    before = (run / "model" / "README.md").read_bytes()
    with pytest.raises(UserError, match="is not the one evaluated"):
        add_eval_results(run / "model", eval_results(results), weights=results["model"]["weights"])
    assert (run / "model" / "README.md").read_bytes() == before
    (run / "model" / "README.md").unlink()  # a folder without a card: only the files are compared
    add_eval_results(run / "model", eval_results(results), weights=results["model"]["weights"])
    assert ModelCard.load(run / "model" / "README.md").data.eval_results
