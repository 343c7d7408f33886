"""Secret-Sharer canaries (Carlini et al. 2019, "The Secret Sharer"): random token sequences inserted into the
training stream, whose exposure (``goldfish.eval.canaries``) measures memorisation on a continuous scale.

Canary *c* is ``tokens`` ids drawn uniformly, with replacement, from the *alphabet*: every id of the tokenizer that
is not a special token (:func:`canary_alphabet`). Its first ``tokens - secret_tokens`` ids are its prefix (the
"format" of the paper, here random too, so every canary has its own context), the last ``secret_tokens`` its
secret; the randomness space of a secret is ``R = alphabet^secret_tokens``. Canary *c* gets
``repetitions[c % len(repetitions)]`` copies in the training rows (the members' strata when not set), each kept
whole in a row like a member, and appears in the prepared folder's ``canaries/`` split. Its ids are drawn from
their own random stream (``[seed, 3]``), so adding canaries changes neither the members nor the background, and a
background-only control (``train_members: false``) gets the same canaries without training on them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..config import check, option, raise_problems

CANARY_STREAM = 3  # numpy seed stream [seed, 3]: members use the permutation of `seed`, the order [seed, 1]


@dataclasses.dataclass
class CanaryConfig:
    """Random canaries inserted into training (the ``canaries:`` section of a recipe)."""

    count: int = option(0, "number of canaries (random token sequences); 0 = none")
    tokens: int = option(24, "length of a canary in tokens: its random prefix followed by its secret")
    secret_tokens: int = option(
        8,
        "the last N tokens of a canary are its secret, whose rank-based exposure "
        "log2|R| - log2 rank is measured (R = alphabet^N)",
    )
    repetitions: list[int] | None = option(
        None,
        "copies per canary in the training rows, assigned round-robin "
        "(null = the members' repetitions: the same strata)",
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        check(self.count >= 0, problems, f"canaries.count={self.count} must be >= 0")
        check(self.secret_tokens >= 1, problems, f"canaries.secret_tokens={self.secret_tokens} must be >= 1")
        check(
            self.tokens > self.secret_tokens,
            problems,
            f"canaries.tokens={self.tokens} must exceed secret_tokens={self.secret_tokens} (a canary needs a "
            "prefix of at least one token before its secret)",
        )
        check(
            self.repetitions is None or (len(self.repetitions) >= 1 and all(r >= 1 for r in self.repetitions)),
            problems,
            f"canaries.repetitions={self.repetitions} must be a non-empty list of counts >= 1 (or null)",
        )
        raise_problems(problems)

    @property
    def prefix_tokens(self) -> int:
        return self.tokens - self.secret_tokens


def canary_alphabet(tokenizer) -> np.ndarray:
    """(A,) int64 sorted ids a canary token is drawn from: every id of ``tokenizer`` but its special tokens."""
    special = set(int(i) for i in tokenizer.all_special_ids)
    return np.asarray([i for i in range(len(tokenizer)) if i not in special], dtype=np.int64)


def make_canaries(
    cfg: CanaryConfig, alphabet: np.ndarray, repetitions: list[int], seed: int
) -> tuple[np.ndarray, list[int]]:
    """``(ids (count, tokens) int64, copies per canary)``: the canaries of ``cfg`` drawn from ``alphabet``.

    ``repetitions``: the members' strata, used when ``cfg.repetitions`` is null.
    """
    rng = np.random.default_rng([seed, CANARY_STREAM])
    ids = rng.choice(alphabet, size=(cfg.count, cfg.tokens), replace=True)  # (C, tokens)
    reps = cfg.repetitions or repetitions
    return ids.astype(np.int64), [int(reps[c % len(reps)]) for c in range(cfg.count)]
