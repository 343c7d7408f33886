"""Chunked cross-entropy: the same per-token losses and gradients as the full-logits path, without the logits.

The reference is an independent computation: ``F.cross_entropy`` on the whole (B*T, V) logits of ``lm_head(hidden)``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tolerances import U_BF16, rounding, scaled

from goldfish import GoldfishConfig, goldfish_loss
from goldfish.loss import chunked_token_losses

# rounded terms: a logit sums H = 16 products, a cross-entropy V = 101 exponentials; the head's weight gradient sums
# the B·T = 111 tokens, the hidden states' gradient the V classes (the chunked path rounds in another order: another
# batch shape for the matmul, sums per chunk)
TOKEN_TERMS = 16 + 101
GRAD_TERMS = TOKEN_TERMS + 111


def _inputs(B=3, T=37, H=16, V=101, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, H, generator=g, requires_grad=True)
    head = nn.Linear(H, V, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(V, H, generator=g) * 0.3)
    labels = torch.randint(0, V, (B, T), generator=g)
    labels[1, 25:] = -100  # padding
    return hidden, head, labels


def _grads(loss, hidden, head):
    loss.backward()
    grads = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad = None
    head.weight.grad = None
    return grads


@pytest.mark.parametrize("chunk", [1, 16, 111, 4096])  # 111 = B*T: one chunk; 16 leaves a ragged last chunk
def test_chunked_token_losses_equal_full_cross_entropy(chunk):
    hidden, head, labels = _inputs()
    weights = torch.rand(labels.shape, generator=torch.Generator().manual_seed(9))  # any per-token weighting
    full = F.cross_entropy(head(hidden).reshape(-1, 101), labels.reshape(-1), ignore_index=-100, reduction="none").view(
        labels.shape
    )
    g_full = _grads((full * weights).sum(), hidden, head)
    chunked = chunked_token_losses(hidden, head, labels, chunk_tokens=chunk)
    g_chunked = _grads((chunked * weights).sum(), hidden, head)
    assert chunked.dtype == torch.float32 and chunked.shape == labels.shape
    assert torch.all(chunked[1, 25:] == 0)
    torch.testing.assert_close(chunked, full.detach(), rtol=0, atol=scaled(full.detach(), TOKEN_TERMS))
    for a, b in zip(g_chunked, g_full):
        torch.testing.assert_close(a, b, rtol=0, atol=scaled(b, GRAD_TERMS))


def test_goldfish_loss_from_hidden_equals_logits_path_with_kept_and_dropped_statistics():
    hidden, head, labels = _inputs(seed=1)
    cfg = GoldfishConfig(k=3, h=4)
    ref = goldfish_loss(head(hidden), labels, cfg)
    g_ref = _grads(ref.loss, hidden, head)
    out = goldfish_loss(hidden, labels, cfg, head=head, chunk_tokens=10)
    g_out = _grads(out.loss, hidden, head)
    assert int(out.dropped_count) == int(ref.dropped_count) > 0
    assert int(out.kept_count) == int(ref.kept_count)
    # a mean over the kept (dropped) targets of cross-entropies
    torch.testing.assert_close(out.loss, ref.loss, rtol=rounding(TOKEN_TERMS + 111), atol=0)
    torch.testing.assert_close(out.dropped_loss, ref.dropped_loss, rtol=rounding(TOKEN_TERMS + 111), atol=0)
    for a, b in zip(g_out, g_ref):
        torch.testing.assert_close(a, b, rtol=0, atol=scaled(b, GRAD_TERMS))


def test_chunked_under_bf16_autocast_matches_the_autocast_logits_path():
    """bf16 training: the head runs in bf16 under autocast in both paths, CE in fp32 in both. The gradients differ by
    bf16 rounding (the weight gradient is summed over chunks in fp32 instead of in one bf16 matmul), so both are
    compared with the fp32 gradients: chunking must stay within the same bf16 bound."""
    hidden, head, labels = _inputs(seed=2)
    with torch.no_grad():
        logit_scale = float(head(hidden).abs().max())
    g_fp32 = _grads(goldfish_loss(head(hidden), labels).loss, hidden, head)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = goldfish_loss(head(hidden), labels)
        out = goldfish_loss(hidden, labels, head=head, chunk_tokens=32)
    # the logits are rounded to bf16 after an fp32 sum: two sums in other orders may round one bf16 step (2^-7
    # relative) apart, and a cross-entropy moves by at most twice its logits' change; then fp32 rounding
    torch.testing.assert_close(out.loss, ref.loss, rtol=rounding(TOKEN_TERMS + 111), atol=2 * 2 * U_BF16 * logit_scale)
    g_ref = _grads(ref.loss, hidden, head)
    g_out = _grads(out.loss, hidden, head)
    # a gradient goes through the forward head matmul and one backward matmul, each rounding both operands to bf16:
    # 4 roundings of 2^-8 relative on every product, a norm-wise error of at most 4·2^-8 = 1.6 % (the fp32 reference
    # and the fp32 sums add ~1e-5)
    bound = 4 * U_BF16 + rounding(GRAD_TERMS)
    for chunked, full, exact in zip(g_out, g_ref, g_fp32):
        err_full = float((full - exact).norm() / exact.norm())
        err_chunked = float((chunked - exact).norm() / exact.norm())
        assert err_full <= bound and err_chunked <= bound, (err_chunked, err_full, bound)


def _saved_bytes(fn) -> int:
    """Bytes of the tensors autograd keeps from forward to backward while ``fn()`` runs."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def test_chunked_path_never_keeps_the_logits_for_backward():
    B, T, H, V = 2, 256, 32, 4000
    hidden, head, labels = _inputs(B, T, H, V, seed=3)
    logits_fp32 = B * T * V * 4
    full = _saved_bytes(lambda: goldfish_loss(head(hidden), labels))
    chunked = _saved_bytes(lambda: goldfish_loss(hidden, labels, head=head, chunk_tokens=64))
    assert full >= logits_fp32  # the full path keeps (at least) fp32 log-probabilities of every token
    assert chunked < logits_fp32 / 8  # hidden states, targets, chunk inputs: no (N, V) tensor


def test_chunk_size_must_be_a_non_negative_integer():
    from goldfish.errors import ConfigError
    from goldfish.train_config import LossConfig

    assert LossConfig(ce_chunk_tokens=0).ce_chunk_tokens == 0
    with pytest.raises(ConfigError, match="ce_chunk_tokens=-1 must be an integer >= 0"):
        LossConfig(ce_chunk_tokens=-1)
