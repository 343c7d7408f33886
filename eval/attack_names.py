"""The names of the membership attacks: one light table (no torch, no numpy) of every attack's name, score keys and
needs, read by the scoring code and by the experiment config alike.

An attack is declared here once, as an :class:`AttackSpec` in ``ATTACK_SPECS`` (the order of the membership table),
and implemented in :mod:`goldfish.eval.membership` by a function decorated with ``@register_attack(name)``, which
takes its needs and keys from this spec and refuses a name not declared here. The experiment config
(``goldfish.experiment.config``) accepts any key a declared attack scores as an experiment's headline (``mia_attack``)
without importing the scoring stack, so the two never drift: every declared attack is a headline with no other edit.

``CELL_ATTACKS`` names the scores every experiment cell's ``attacks.json`` holds (from the per-token log-probs of
eval's one pass: ``goldfish.eval.attacks``); they need no membership task.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

# every experiment cell's attacks.json: LOSS, the calibrated attack and the two hash-aware ones (a Goldfish arm's)
CELL_ATTACKS = ("loss", "reference", "kept_loss", "kept_reference")


def ratio_key(prefix: str, ratio: float) -> str:
    """Score name for a Min-K ratio, e.g. ``("min_k", 0.2) -> "min_k_20"``."""
    return f"{prefix}_{int(round(ratio * 100))}"


@dataclasses.dataclass(frozen=True)
class AttackSpec:
    """A membership attack's name and what it scores.

    ``needs``: the optional inputs of ``membership.score_documents`` it runs with (``tokenizer``,
    ``reference_model``, ``recall_prefix``, ``dc_pdd_counts``); ``fixed_keys``: its score names (default: its name);
    ``ratio_keys``: prefixes of the scores it writes once per Min-K ratio (``min_k`` -> ``min_k_20`` for 0.2);
    ``token_scores``: it reads the target pass's per-token log-probs."""

    name: str
    needs: tuple[str, ...] = ()
    fixed_keys: tuple[str, ...] = ()
    ratio_keys: tuple[str, ...] = ()
    token_scores: bool = False

    def keys(self, ratios: Sequence[float]) -> list[str]:
        """The names of its scores for these Min-K ratios, in the order it writes them."""
        if self.ratio_keys:
            return [ratio_key(p, r) for r in ratios for p in self.ratio_keys]
        return list(self.fixed_keys or (self.name,))

    def scores(self, key: str) -> bool:
        """Whether ``key`` names one of its scores for some ratio (``min_k_pp_5`` is ``min_k``'s)."""
        if key in (self.fixed_keys or (() if self.ratio_keys else (self.name,))):
            return True
        for prefix in self.ratio_keys:
            percent = key[len(prefix) + 1 :] if key.startswith(prefix + "_") else ""
            if percent.isascii() and percent.isdigit():
                return True
        return False


ATTACK_SPECS: dict[str, AttackSpec] = {}  # name -> spec, in the order the membership table lists them


def declare_attack(spec: AttackSpec) -> AttackSpec:
    """Add ``spec`` to ``ATTACK_SPECS`` (its implementation then registers under its name in ``membership``)."""
    ATTACK_SPECS[spec.name] = spec
    return spec


for _spec in (
    AttackSpec("loss"),
    AttackSpec("min_k", ratio_keys=("min_k", "min_k_pp")),
    AttackSpec("zlib", needs=("tokenizer",), fixed_keys=("zlib_mimir", "zlib_ratio")),
    AttackSpec("lowercase", needs=("tokenizer",)),
    AttackSpec("reference", needs=("reference_model",)),
    AttackSpec("recall", needs=("recall_prefix",)),
    AttackSpec("dc_pdd", needs=("dc_pdd_counts",), token_scores=True),
):
    declare_attack(_spec)


def attack_of(key: str) -> AttackSpec | None:
    """The declared attack that scores ``key`` (``zlib_ratio`` -> ``zlib``), or None."""
    return next((spec for spec in ATTACK_SPECS.values() if spec.scores(key)), None)


def score_key_examples() -> list[str]:
    """Every declared attack's score names, a Min-K ratio's as ``min_k_<percent>``, for messages and help texts."""
    return [
        key for spec in ATTACK_SPECS.values() for key in ([f"{p}_<percent>" for p in spec.ratio_keys] or spec.keys(()))
    ]
