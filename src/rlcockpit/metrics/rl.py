"""RL math on torch tensors: masked reductions, logprobs, entropy, KL estimators, GAE, GRPO groups.

Shapes follow the trainer: per-token quantities are ``[B, T]``; ``mask`` is a float or bool tensor
``[B, T]`` with 1 on response tokens and 0 on prompt / padding tokens (responses are right-padded).
Every function here keeps padding out of the result, even when padding holds NaN or inf.

Names follow CleanRL (``logratio``, ``ratio``, ``lastgaelam``). Each function is tested against a
naive Python-loop reference in ``tests/test_metrics_rl.py``. This module imports torch, so
``rlcockpit.metrics`` loads it lazily.
"""

from __future__ import annotations

import math

import numpy as np
import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


def _valid(mask: torch.Tensor) -> torch.Tensor:
    return mask != 0


def _weights(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return mask.to(dtype=x.dtype, device=x.device)


def fill_masked(x: torch.Tensor, mask: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """``x`` with padded positions replaced by ``value``.

    Use before any arithmetic whose gradient must stay clean: ``torch.where`` after a NaN-producing
    op still back-propagates 0 * NaN = NaN, while cleaning the inputs first routes exact zeros.
    """
    return torch.where(_valid(mask), x, torch.full_like(x, value))


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x * mask``; padded positions contribute exactly 0 even if they hold NaN / inf."""
    w = _weights(x, mask)
    clean = torch.where(_valid(mask), x, torch.zeros_like(x)) * w
    return clean.sum() if dim is None else clean.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean over valid positions; 0 where the mask sums to 0 (an empty row has nothing to average)."""
    total = masked_sum(x, mask, dim)
    count = _weights(x, mask).sum() if dim is None else _weights(x, mask).sum(dim=dim)
    safe = torch.where(count > 0, count, torch.ones_like(count))
    return torch.where(count > 0, total / safe, torch.zeros_like(total))


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over all valid positions (scalar).

    With ``unbiased`` the Bessel correction n / (n - 1) is applied. Fewer than two valid values
    (or one with ``unbiased=False`` and none at all) give 0: there is no spread to measure.
    """
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    count = _weights(x, mask).sum()
    if unbiased:
        if count <= 1:
            return torch.zeros_like(var)
        var = var * count / (count - 1)
    return var


def masked_whiten(
    x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over valid positions; padded positions are set to 0.

    ``shift_mean=False`` adds the mean back (scale-only whitening, as TRL does for rewards).
    """
    mean = masked_mean(x, mask)
    var = masked_var(x, mask)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(_valid(mask), whitened, torch.zeros_like(whitened))


def masked_max(x: torch.Tensor, mask: torch.Tensor) -> float:
    """Largest valid value; NaN when nothing is valid."""
    values = x[_valid(mask)]
    return float(values.max()) if values.numel() else math.nan


def masked_quantile(x: torch.Tensor, mask: torch.Tensor, q: float) -> float:
    """Quantile ``q`` in [0, 1] of the valid values (linear interpolation); NaN when none.

    numpy does the sort: ``torch.quantile`` refuses inputs above 2**24 elements.
    """
    values = x[_valid(mask)].detach().double().cpu().numpy()
    return float(np.quantile(values, q)) if values.size else math.nan


def sequence_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-sample sum over valid tokens -> ``[B]`` (e.g. the sequence KL behind ``kl/mean``)."""
    return masked_sum(x, mask, dim=-1)


def sequence_lengths(mask: torch.Tensor) -> torch.Tensor:
    """Number of valid tokens per sample -> ``[B]`` (int64)."""
    return _valid(mask).sum(dim=-1)


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label] -> ``[B, T]``.

    Computed as ``logit[label] - logsumexp(logits)`` so the full ``[B, T, V]`` log-softmax is never
    stored (seed 003 §3.2 gathers after ``log_softmax``; the value is identical). Negative labels
    (e.g. HF's -100 ignore index on padding) give 0.
    """
    safe = labels.clamp(min=0).long()
    picked = logits.gather(dim=-1, index=safe.unsqueeze(-1)).squeeze(-1)
    logp = picked - torch.logsumexp(logits, dim=-1)
    return torch.where(labels >= 0, logp, torch.zeros_like(logp))


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Token entropy H = -sum p log p -> ``[B, T]``, with log p = z - logsumexp(z).

    ``log_softmax`` shifts by the max internally, so large logits do not cancel catastrophically
    (the unshifted logsumexp(z) - sum p z loses ~1e-3 at |z| ~ 1e4 in float32). Tokens with p = 0
    (-inf logits) add exactly 0, also to the gradient: log p is clamped to the dtype's minimum.
    """
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp.clamp(min=torch.finfo(logp.dtype).min)).sum(dim=-1)


def kl_per_token(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k1"
) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi -> ``[B, T]``.

    Schulman, "Approximating KL Divergence" (2020), with logr = ref - logp:
    k1 = -logr (unbiased, can be negative), k2 = logr^2 / 2 (low variance, biased),
    k3 = exp(logr) - 1 - logr (unbiased, always >= 0).
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl estimator {estimator!r} is unknown; choose one of {KL_ESTIMATORS}")
    logr = ref_logprobs - logprobs
    if estimator == "k1":
        return -logr
    if estimator == "k2":
        return 0.5 * logr**2
    return torch.expm1(logr) - logr


def kl_pull_weight(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k1"
) -> torch.Tensor:
    """|d kl_t / d log pi_t| per token -> ``[B, T]``: how hard a KL loss term pulls each token's
    log-probability towards the reference (the advantage pushes it with weight |A_t| rho_t).

    With logr = ref - logp: k1 -> 1, k2 -> |logr|, k3 -> |1 - exp(logr)| (0 where pi = pi_ref).
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl estimator {estimator!r} is unknown; choose one of {KL_ESTIMATORS}")
    logr = ref_logprobs - logprobs
    if estimator == "k1":
        return torch.ones_like(logr)
    if estimator == "k2":
        return logr.abs()
    return torch.expm1(logr).abs()


def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016; seed 003 §3.4) -> (advantages, returns).

    delta_t = r_t + gamma * V_{t+1} - V_t and A_t = delta_t + gamma * lam * A_{t+1}, walking back
    over the valid tokens of each row. The value after the last valid token is 0 (the episode
    ends). Masked positions are skipped (they neither receive nor pass on advantage) and are 0 in
    both outputs. returns = advantages + values is the critic's target.
    """
    if token_rewards.shape != values.shape or values.shape != mask.shape:
        raise ValueError(
            f"gae needs equal shapes; got rewards {tuple(token_rewards.shape)}, "
            f"values {tuple(values.shape)}, mask {tuple(mask.shape)}"
        )
    valid = _valid(mask)
    advantages = torch.zeros_like(values)
    nextvalues = torch.zeros_like(values[:, 0])
    lastgaelam = torch.zeros_like(values[:, 0])
    for t in reversed(range(values.shape[1])):
        delta = token_rewards[:, t] + gamma * nextvalues - values[:, t]
        candidate = delta + gamma * lam * lastgaelam
        lastgaelam = torch.where(valid[:, t], candidate, lastgaelam)
        nextvalues = torch.where(valid[:, t], values[:, t], nextvalues)
        advantages[:, t] = torch.where(valid[:, t], candidate, torch.zeros_like(candidate))
    returns = torch.where(valid, advantages + values, torch.zeros_like(values))
    return advantages, returns


def group_normalize(
    rewards: torch.Tensor, group_size: int, eps: float = 1e-6, scale: bool = True
) -> tuple[torch.Tensor, int]:
    """GRPO advantages: (r - group mean) / (group std + eps) -> (advantages [N], zero_std_groups).

    ``rewards`` holds N = G * group_size sequence rewards, the samples of one prompt contiguous.
    The std is the unbiased sample std (DeepSeekMath GRPO). ``scale=False`` only centres
    (Dr. GRPO). A group whose finite rewards are all equal carries no learning signal: its
    advantages are exactly 0 and it is counted in ``zero_std_groups`` (-> reward/frac_zero_std_groups).
    Non-finite rewards are left out of their group's statistics and get advantage 0.
    """
    flat = torch.as_tensor(rewards).reshape(-1)
    if group_size < 1 or flat.numel() % group_size != 0:
        raise ValueError(
            f"group_normalize: {flat.numel()} rewards do not split into groups of {group_size}; "
            "pass N = prompts * samples_per_prompt rewards with group_size = samples_per_prompt"
        )
    groups = flat.reshape(-1, group_size)
    finite = torch.isfinite(groups)
    w = finite.to(groups.dtype)
    count = w.sum(dim=1, keepdim=True)
    mean = masked_mean(groups, finite, dim=1).unsqueeze(1)
    sq = masked_sum((groups - mean) ** 2, finite, dim=1).unsqueeze(1)
    std = torch.sqrt(sq / (count - 1).clamp(min=1))
    big = torch.finfo(groups.dtype).max
    hi = torch.where(finite, groups, torch.full_like(groups, -big)).amax(dim=1)
    lo = torch.where(finite, groups, torch.full_like(groups, big)).amin(dim=1)
    flat_group = (count.squeeze(1) < 2) | (hi == lo)
    centred = groups - mean
    adv = centred / (std + eps) if scale else centred
    keep = finite & ~flat_group.unsqueeze(1)
    adv = torch.where(keep, adv, torch.zeros_like(adv))
    return adv.reshape(-1), int(flat_group.sum())


def clip_fraction(ratio: torch.Tensor, mask: torch.Tensor, eps: float) -> float:
    """Share of valid tokens whose ratio left [1 - eps, 1 + eps] (``policy/clip_frac``)."""
    clipped = ((ratio - 1.0).abs() > eps).to(ratio.dtype)
    return float(masked_mean(clipped, mask))


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var[R - V] / Var[R] over valid tokens; NaN when Var[R] = 0 (nothing to explain)."""
    var_r = masked_var(returns, mask, unbiased=False)
    if not var_r > 0:
        return math.nan
    var_res = masked_var(returns - values, mask, unbiased=False)
    return float(1.0 - var_res / var_r)


def approx_kl(new_logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> float:
    """KL(old || new) by k3 on the rollout tokens, masked mean (CleanRL's ``approx_kl``).

    With logratio = new - old and ratio = exp(logratio): (ratio - 1) - logratio.
    """
    k3 = kl_per_token(old_logprobs.detach(), new_logprobs.detach(), "k3")
    return float(masked_mean(k3, mask))


def perplexity(logprobs: torch.Tensor, mask: torch.Tensor) -> float:
    """exp(-mean token logprob) over valid tokens (``response/ppl``); NaN when nothing is valid."""
    if not bool(_valid(mask).any()):
        return math.nan
    return float(torch.exp(-masked_mean(logprobs.detach(), mask)))
