"""Numeric tolerances derived from floating-point arithmetic, for tests that compare two computations of one value.

Model (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., 2002, §2.2 and §3.1): every operation
returns its exact result times (1 + d) with |d| <= u, the unit roundoff (``U32`` = 2^-24 in fp32, ``U64`` = 2^-53 in
float64). A value that accumulates n rounded terms (a sum, a dot product, a chain of them through a network) is within
u·n of the exact value, relative to the scale of its terms. That worst case needs every rounding to go the same way;
with roundings that are independent and of mean zero, the error is below u·λ·√n except with probability at most
2n·exp(-λ²/2) (Higham & Mary, "A new approach to probabilistic rounding error analysis", SIAM J. Sci. Comput. 41,
2019, Thm 2.4); λ = 6 makes that n·3e-8. Two computations that round in different orders (another kernel or
instruction set, another split of a batch) are each that close to the exact value, so they differ by at most twice
that: :func:`rounding`. Each test states its n and the scale; a tolerance is never a constant measured on one machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

U32 = 2.0**-24  # fp32 unit roundoff
U64 = 2.0**-53  # float64 unit roundoff
U_BF16 = 2.0**-8  # bfloat16 unit roundoff: 8 significant bits
LAMBDA = 6.0  # probabilistic bound: exceeded with probability <= 2n·exp(-18) = n·3e-8 per value


def rounding(n: int, u: float = U32) -> float:
    """Relative difference allowed between two evaluations of a value that accumulates ``n`` rounded terms in other
    orders: ``2·u·min(n, λ√n)`` (the worst case for short sums, the probabilistic bound for long ones)."""
    return 2 * u * min(n, LAMBDA * math.sqrt(n))


def scaled(expected, n: int, u: float = U32) -> float:
    """Absolute tolerance for an array of values that each accumulate ``n`` rounded terms: :func:`rounding` relative
    to the array's scale, its largest magnitude (an element near 0 by cancellation keeps its terms' rounding)."""
    return rounding(n, u) * float(abs(expected).max())


def line_fit(x) -> float:
    """Relative difference allowed between two float64 least-squares lines through points at ``x`` (say ours and
    numpy's or scipy's): each solution is within cond(A)²·rounding(2n) of the exact one, A the n x 2 design matrix
    [x, 1] (Higham 2002, §20.1: the squared condition number enters when the residual is not zero)."""
    import numpy as np

    design = np.stack([np.asarray(x, dtype=np.float64), np.ones(len(x))], axis=1)
    return float(np.linalg.cond(design)) ** 2 * rounding(2 * len(x), U64)


def llama_terms(hidden: int, intermediate: int, layers: int, head_dim: int, seq: int, vocab: int) -> int:
    """Rounded terms along one token's forward path through a Llama causal LM to its log-probabilities (the backward
    pass reduces over the same dimensions, so a gradient carries twice as many).

    Per decoder layer: RMSNorm over ``hidden``, q/k/v projections (``hidden``), q·k (``head_dim``), softmax and
    weighted sum of values (``seq`` each), o projection (``hidden``), RMSNorm (``hidden``), gate/up projections
    (``hidden``), down projection (``intermediate``). After the layers: final RMSNorm and output head (``hidden`` each)
    and the log-softmax's sum of exponentials (``vocab``)."""
    per_layer = 5 * hidden + head_dim + 2 * seq + intermediate
    return layers * per_layer + 2 * hidden + vocab


def adamw_drift(
    lrs: Sequence[float],
    grad_error: float,
    eps: float,
    betas: Sequence[float],
    norm_error: float = 0.0,
    weight_scale: float = 1.0,
) -> float:
    """Largest weight difference between two AdamW runs from the same weights whose gradients differ by at most
    ``grad_error`` per component at each step (learning rates ``lrs``, one per step), and whose gradient-clipping
    factors differ by at most ``norm_error`` relative.

    Step t moves a weight by lr_t·r with r = m/(√v + ε), m and v the bias-corrected averages of the gradients g_i
    and their squares with weights a_i and b_i (each summing to 1). A gradient change of at most δ moves m by <= δ
    and √v (a weighted 2-norm) by <= δ, so r moves by <= δ/ε + |m|/(√v+ε)·δ/ε <= (1 + C_t)·δ/ε, where
    |m| <= C_t·√v with C_t = √(Σ a_i²/b_i) (Cauchy-Schwarz). A relative change ρ of the clipping factor scales
    m and √v alike and moves r by <= 2·C_t·ρ. Decoupled weight decay multiplies both runs' weights by the same
    (1 - lr·λ) <= 1 and only shrinks a difference. Each step also rounds the new weight once in each run:
    2·u·``weight_scale`` per step. First order: it leaves out the gradient difference that the weights' own
    difference causes at later steps (Hessian × difference), a small fraction of the rounding term over a few steps
    with lr·(1 + C)/ε ≲ 2.

    The 1/ε factor is why a test that compares weights after AdamW must set ε well above the gradient's rounding
    error: at the default ε = 1e-8 a component whose gradient is about ε (a weight that hardly matters) turns a
    rounding difference of 3e-11 into a weight difference of lr·0.001 (measured in tests/test_train_loop.py)."""
    beta1, beta2 = betas
    drift = 0.0
    for t, lr in enumerate(lrs, start=1):
        a = [(1 - beta1) * beta1 ** (t - i) / (1 - beta1**t) for i in range(1, t + 1)]
        b = [(1 - beta2) * beta2 ** (t - i) / (1 - beta2**t) for i in range(1, t + 1)]
        c = math.sqrt(sum(x * x / y for x, y in zip(a, b)))
        drift += lr * ((1 + c) * grad_error / eps + 2 * c * norm_error) + 2 * U32 * weight_scale
    return drift


def proportion_se(p: float, n: int) -> float:
    """Standard error of a proportion estimated from ``n`` independent trials of probability ``p``:
    √(p(1 - p)/n). A statistical band in a test is a stated number of these (3 leaves a two-sided chance of
    0.27 % by the normal approximation, 4 of 6e-5), computed from the n the test draws, never guessed."""
    return math.sqrt(p * (1 - p) / n)


def decimals(value: float, places: int) -> float:
    """Absolute difference allowed between ``value`` and ``round(value, places)`` as written and read back (a model
    card's numbers): half a unit of the last decimal kept, plus the float64 rounding of that decimal and of the
    half unit itself."""
    return 0.5 * 10.0**-places * (1 + 2 * U64) + U64 * abs(value)
