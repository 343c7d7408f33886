"""One source for every attack name: ``goldfish.eval.attack_names`` declares each membership attack (its name,
score keys and needs) without torch, ``membership.register_attack`` implements only what is declared there, and the
experiment config takes every declared attack's scores as a headline (``mia_attack``) from that table, so a new
attack is one function plus its spec line, with no other edit."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from goldfish.errors import ConfigError
from goldfish.eval import attack_names, membership
from goldfish.eval.attack_names import ATTACK_SPECS, CELL_ATTACKS, AttackSpec, attack_of
from goldfish.experiment.collect import headline_numbers
from goldfish.experiment.config import ExperimentConfig

from eval_fixtures import TEXTS, tiny_llama, tiny_tokenizer


def test_the_implementations_are_exactly_the_declared_attacks_in_their_order():
    assert list(membership.ATTACKS) == list(ATTACK_SPECS) and {"recall", "dc_pdd"} <= set(ATTACK_SPECS)
    for name, attack in membership.ATTACKS.items():
        spec = ATTACK_SPECS[name]
        assert (attack.needs, attack.token_scores) == (spec.needs, spec.token_scores)
        assert attack.keys([0.1, 0.5]) == spec.keys([0.1, 0.5])


def test_keys_and_the_attack_that_scores_each():
    assert ATTACK_SPECS["min_k"].keys([0.2, 0.05]) == ["min_k_20", "min_k_pp_20", "min_k_5", "min_k_pp_5"]
    assert ATTACK_SPECS["zlib"].keys([0.2]) == ["zlib_mimir", "zlib_ratio"]
    assert ATTACK_SPECS["dc_pdd"].keys([0.2]) == ["dc_pdd"]
    assert attack_of("min_k_pp_5").name == "min_k" and attack_of("min_k_100").name == "min_k"
    assert attack_of("zlib_ratio").name == "zlib" and attack_of("recall").name == "recall"
    for not_a_score in ("zlib", "min_k", "min_k_pp", "min_k_x", "min_k_pp_", "min_k_２０", "kept_loss", ""):
        assert attack_of(not_a_score) is None, not_a_score


def test_an_undeclared_attack_cannot_be_registered():
    with pytest.raises(ValueError, match="not declared.*attack_names"):
        membership.register_attack("not_declared_anywhere")


@pytest.mark.parametrize("name", list(ATTACK_SPECS))
def test_every_score_of_every_registered_attack_is_a_headline(name):
    for key in ATTACK_SPECS[name].keys([0.2, 0.05]):
        assert ExperimentConfig(mia_attack=key).mia_attack == key
        if key not in CELL_ATTACKS:  # scored by eval's membership task only
            with pytest.raises(ConfigError, match=f"mia_attack={key} is scored by eval's membership task"):
                ExperimentConfig(mia_attack=key, eval={"tasks": ["extraction"]})


def test_a_name_no_attack_scores_is_refused_with_the_choices():
    for key in CELL_ATTACKS:
        assert ExperimentConfig(mia_attack=key, eval={"tasks": ["extraction"]}).mia_attack == key
    with pytest.raises(ConfigError, match="mia_attack='zlib' is not an attack") as err:
        ExperimentConfig(mia_attack="zlib")
    assert "min_k_pp_<percent>" in str(err.value) and "dc_pdd" in str(err.value) and "zlib_ratio" in str(err.value)


def test_a_new_attack_is_one_function_and_its_spec_line_and_is_a_headline_with_no_other_edit(monkeypatch):
    """Registered here as a user would add one: the spec line, the decorated function. The experiment config then
    accepts it as the headline, eval's membership pass scores it and evaluates its AUC, and the cell's headline reads
    it (here the document length, which separates the long members from the short nonmembers: AUC 1)."""
    monkeypatch.setattr(membership, "ATTACKS", dict(membership.ATTACKS))
    with pytest.raises(ConfigError, match="not an attack"):
        ExperimentConfig(mia_attack="length_attack")
    monkeypatch.setitem(ATTACK_SPECS, "length_attack", AttackSpec("length_attack"))  # the registry line

    @membership.register_attack("length_attack")
    def _length(x: membership.AttackInputs) -> dict[str, np.ndarray]:
        return {"length_attack": np.array([len(d) for d in x.docs], dtype=float)}

    assert ExperimentConfig(mia_attack="length_attack").mia_attack == "length_attack"
    tok = tiny_tokenizer()
    model = tiny_llama(len(tok), seed=1)
    members = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    nonmembers = [d[:8] for d in members]
    kw = dict(progress=False, window=64)
    section = membership.membership_section(
        membership.score_documents(model, members, **kw),
        membership.score_documents(model, nonmembers, **kw),
        n_bootstrap=20,
    )
    headline = headline_numbers("length_attack", section["attacks"])  # as a cell's summary reads eval's section
    assert headline["mia_attack"] == "length_attack" and headline["mia_auc"] == 1.0
    assert headline["mia_roc"]["auc"] == 1.0


def test_the_table_imports_nothing_but_the_standard_library():
    """The table stays light: no torch, numpy or scoring module of its own (``goldfish.eval``'s package root loads
    torch through its config, so what the module itself imports is what keeps it light)."""
    tree = ast.parse(Path(attack_names.__file__).read_text(encoding="utf-8"))
    imported = {
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    assert imported and imported <= {"__future__", "dataclasses", "typing"}, imported
