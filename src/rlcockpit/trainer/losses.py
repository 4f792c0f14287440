"""PPO / GRPO loss terms: pure functions of tensors, masked over response tokens.

Seed 003 §4.2 (clipped surrogate), §4.3 (value loss, entropy bonus); CleanRL ``ppo.py`` names
(``logratio``, ``ratio``, ``pg_loss1/2``, ``v_loss_unclipped/clipped``). Each term is tested
against a naive per-token loop in ``tests/test_losses_advantages.py``.

Inputs are cleaned on padded positions first (:func:`fill_masked`) so neither the loss nor its
gradient can pick up NaN / inf from padding.
"""

from __future__ import annotations

import torch

from rlcockpit.metrics.rl import (
    approx_kl,
    clip_fraction,
    fill_masked,
    kl_per_token,
    kl_pull_weight,
    masked_max,
    masked_mean,
)


def policy_loss(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate: masked mean of max(-A * r, -A * clip(r, 1 - eps, 1 + eps)).

    Returns the loss (differentiable w.r.t. ``new_logprobs``) and float stats:
    ``clip_frac``, ``ratio_mean``, ``ratio_max`` (over valid tokens) and ``approx_kl`` (k3,
    old vs new).
    """
    if clip_eps <= 0:
        raise ValueError(f"clip_eps={clip_eps!r} must be > 0 (typical: 0.1-0.2, seed 003 §2.3)")
    new_logprobs = fill_masked(new_logprobs, mask)
    old_logprobs = fill_masked(old_logprobs.detach(), mask)
    advantages = fill_masked(advantages.detach(), mask)
    logratio = new_logprobs - old_logprobs
    ratio = torch.exp(logratio)
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    loss = masked_mean(torch.max(pg_loss1, pg_loss2), mask)
    ratio_d = ratio.detach()
    stats = {
        "clip_frac": clip_fraction(ratio_d, mask, clip_eps),
        "ratio_mean": float(masked_mean(ratio_d, mask)),
        "ratio_max": masked_max(ratio_d, mask),
        "approx_kl": approx_kl(new_logprobs, old_logprobs, mask),
    }
    return loss, stats


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float | None,
) -> tuple[torch.Tensor, float]:
    """0.5 * masked mean of max((v - R)^2, (v_old + clip(v - v_old, -c, c) - R)^2).

    ``clip_range=None`` gives the plain 0.5 * MSE. The float is ``value/clip_frac``: the share of
    valid tokens where |v - v_old| > c (0 without clipping).
    """
    values = fill_masked(values, mask)
    returns = fill_masked(returns.detach(), mask)
    v_loss_unclipped = (values - returns) ** 2
    if clip_range is None:
        return 0.5 * masked_mean(v_loss_unclipped, mask), 0.0
    if clip_range <= 0:
        raise ValueError(f"clip_range={clip_range!r} must be > 0, or None to disable clipping")
    old = fill_masked(old_values.detach(), mask)
    v_clipped = old + torch.clamp(values - old, -clip_range, clip_range)
    v_loss_clipped = (v_clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(v_loss_unclipped, v_loss_clipped), mask)
    clipped = ((values.detach() - old).abs() > clip_range).to(values.dtype)
    return loss, float(masked_mean(clipped, mask))


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked mean token entropy; the trainer subtracts ent_coef times this (seed 003 §4.3)."""
    return masked_mean(entropy, mask)


def kl_loss(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """GRPO's KL-to-reference loss term: masked mean of the per-token estimator (k3 by default,
    DeepSeekMath eq. 4); differentiable w.r.t. ``logprobs``."""
    logprobs = fill_masked(logprobs, mask)
    ref_logprobs = fill_masked(ref_logprobs.detach(), mask)
    return masked_mean(kl_per_token(logprobs, ref_logprobs, estimator), mask)


def kl_pull_share(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
    kl_coef: float, estimator: str = "k3",
) -> float | None:
    """The KL loss term's share of the per-token gradient weight on log pi (0-1): beta x the mean
    |d kl_t / d log pi_t| over beta x that + the mean |A_t| (the surrogate's weight at ratio 1).
    Near 0 in a healthy GRPO step; above 0.5 the pull back to the reference outweighs what the
    advantages ask for, and the policy cannot move (DeepSeekMath eq. 4's beta too large). None when
    every advantage is 0 (GRPO groups with identical rewards): nothing pushes, no share to state."""
    logprobs = fill_masked(logprobs.detach(), mask)
    ref_logprobs = fill_masked(ref_logprobs.detach(), mask)
    pull = kl_coef * float(masked_mean(kl_pull_weight(logprobs, ref_logprobs, estimator), mask))
    push = float(masked_mean(fill_masked(advantages.detach(), mask).abs(), mask))
    if push <= 0:
        return None
    return pull / (pull + push)
