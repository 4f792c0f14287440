"""rlcockpit.metrics.rl: every fast function equals a naive Python-loop reference on random,
right-padded batches (all-masked rows, length-1 responses, NaN in the padding), plus edge cases."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from rlcockpit.metrics import rl

SEEDS = [0, 1, 2, 3]
TOL = 1e-5


def make_batch(seed: int, b: int = 6, t: int = 7, dtype=torch.float64):
    """Random per-token tensor and a right-padded mask with an empty row and a length-1 row.
    Padding holds NaN so any leak shows up in the result."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, t + 1, (b,), generator=gen)
    lengths[0], lengths[1], lengths[2] = 0, 1, t
    mask = (torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)).to(dtype)
    x = torch.randn(b, t, generator=gen, dtype=dtype)
    x = torch.where(mask.bool(), x, torch.full_like(x, math.nan))
    return x, mask, gen


def valid_values(x, mask, row=None):
    rows = range(x.shape[0]) if row is None else [row]
    return [float(x[i, j]) for i in rows for j in range(x.shape[1]) if mask[i, j] != 0]


def close(a, b, tol=TOL):
    a = a.detach() if isinstance(a, torch.Tensor) else a
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(b)))


# --- masked reductions --------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_masked_sum_and_mean_equal_naive_loops(seed):
    x, mask, _ = make_batch(seed)
    vals = valid_values(x, mask)
    assert close(rl.masked_sum(x, mask), sum(vals))
    assert close(rl.masked_mean(x, mask), sum(vals) / len(vals))
    row_means = rl.masked_mean(x, mask, dim=1)
    row_sums = rl.sequence_sum(x, mask)
    for i in range(x.shape[0]):
        row = valid_values(x, mask, i)
        assert close(row_sums[i], sum(row))
        assert close(row_means[i], sum(row) / len(row) if row else 0.0)
    assert rl.sequence_lengths(mask).tolist() == [int(m.sum()) for m in mask]


def test_masked_mean_is_zero_when_nothing_is_valid():
    x = torch.full((2, 3), math.nan)
    mask = torch.zeros(2, 3)
    assert float(rl.masked_mean(x, mask)) == 0.0
    assert rl.masked_mean(x, mask, dim=1).tolist() == [0.0, 0.0]
    assert float(rl.masked_var(x, mask)) == 0.0


@pytest.mark.parametrize("seed", SEEDS)
def test_masked_var_equals_statistics_module(seed):
    x, mask, _ = make_batch(seed)
    vals = valid_values(x, mask)
    assert close(rl.masked_var(x, mask, unbiased=True), statistics.variance(vals))
    assert close(rl.masked_var(x, mask, unbiased=False), statistics.pvariance(vals))


def test_masked_var_of_a_single_value_is_zero():
    x = torch.tensor([[3.0, math.inf]])
    mask = torch.tensor([[1.0, 0.0]])
    assert float(rl.masked_var(x, mask)) == 0.0
    assert float(rl.masked_var(x, mask, unbiased=False)) == 0.0


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shift_mean", [True, False])
def test_masked_whiten_equals_naive(seed, shift_mean):
    x, mask, _ = make_batch(seed)
    vals = valid_values(x, mask)
    mean, var = statistics.fmean(vals), statistics.variance(vals)
    out = rl.masked_whiten(x, mask, shift_mean=shift_mean)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if mask[i, j]:
                want = (float(x[i, j]) - mean) / math.sqrt(var + 1e-8)
                assert close(out[i, j], want + (0.0 if shift_mean else mean))
            else:
                assert float(out[i, j]) == 0.0
    if shift_mean:
        assert close(rl.masked_mean(out, mask), 0.0)
        assert close(rl.masked_var(out, mask), 1.0, tol=1e-4)


def test_masked_max_and_quantile_match_python():
    x, mask, _ = make_batch(5)
    vals = sorted(valid_values(x, mask))
    assert close(rl.masked_max(x, mask), max(vals))
    assert close(rl.masked_quantile(x, mask, 0.5), statistics.median(vals))
    # quantile 0.99 with linear interpolation between order statistics
    pos = 0.99 * (len(vals) - 1)
    lo = math.floor(pos)
    want = vals[lo] + (vals[min(lo + 1, len(vals) - 1)] - vals[lo]) * (pos - lo)
    assert close(rl.masked_quantile(x, mask, 0.99), want)
    empty = torch.zeros_like(mask)
    assert math.isnan(rl.masked_max(x, empty)) and math.isnan(rl.masked_quantile(x, empty, 0.5))


def test_bool_and_float_masks_agree():
    x, mask, _ = make_batch(7)
    assert torch.equal(rl.masked_mean(x, mask), rl.masked_mean(x, mask.bool()))
    assert torch.equal(rl.masked_whiten(x, mask), rl.masked_whiten(x, mask.bool()))


def test_fill_masked_keeps_gradients_clean():
    x = torch.tensor([[0.5, math.nan]], requires_grad=True)
    mask = torch.tensor([[1.0, 0.0]])
    rl.masked_mean(torch.exp(rl.fill_masked(x, mask)), mask).backward()
    assert torch.isfinite(x.grad).all() and float(x.grad[0, 1]) == 0.0


# --- logprobs, entropy, KL ---------------------------------------------------------------


def naive_log_softmax(row):
    top = max(row)
    lse = top + math.log(sum(math.exp(v - top) for v in row))
    return [v - lse for v in row]


@pytest.mark.parametrize("seed", SEEDS)
def test_logprobs_and_entropy_equal_naive(seed):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 4, 11, generator=gen, dtype=torch.float64) * 3
    labels = torch.randint(0, 11, (3, 4), generator=gen)
    lp = rl.logprobs_from_logits(logits, labels)
    ent = rl.entropy_from_logits(logits)
    for b in range(3):
        for t in range(4):
            logp = naive_log_softmax(logits[b, t].tolist())
            assert close(lp[b, t], logp[int(labels[b, t])])
            assert close(ent[b, t], -sum(math.exp(v) * v for v in logp))


def test_logprobs_match_torch_log_softmax_gather_in_float32():
    gen = torch.Generator().manual_seed(11)
    logits = torch.randn(2, 5, 50, generator=gen)
    labels = torch.randint(0, 50, (2, 5), generator=gen)
    want = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(rl.logprobs_from_logits(logits, labels), want, atol=TOL)


def test_logprobs_ignore_index_gives_zero():
    logits = torch.randn(1, 3, 5)
    labels = torch.tensor([[1, -100, 2]])
    lp = rl.logprobs_from_logits(logits, labels)
    assert float(lp[0, 1]) == 0.0 and float(lp[0, 0]) < 0


def test_entropy_is_stable_for_huge_logits():
    logits = torch.tensor([[[1e4, 1e4, -1e4, 0.0]]])
    ent = rl.entropy_from_logits(logits)
    assert torch.isfinite(ent).all()
    assert close(ent[0, 0], math.log(2.0))
    uniform = rl.entropy_from_logits(torch.zeros(1, 1, 8))
    assert close(uniform[0, 0], math.log(8.0))


@pytest.mark.parametrize("seed", SEEDS)
def test_kl_estimators_equal_their_formulas(seed):
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.rand(4, 5, generator=gen, dtype=torch.float64) * 3
    ref = -torch.rand(4, 5, generator=gen, dtype=torch.float64) * 3
    k1, k2, k3 = (rl.kl_per_token(logp, ref, e) for e in ("k1", "k2", "k3"))
    for b in range(4):
        for t in range(5):
            lp, rp = float(logp[b, t]), float(ref[b, t])
            assert close(k1[b, t], lp - rp)
            assert close(k2[b, t], 0.5 * (lp - rp) ** 2)
            assert close(k3[b, t], math.exp(rp - lp) - (rp - lp) - 1)
    assert (k3 >= 0).all() and (k2 >= 0).all()


def test_k1_and_k3_are_unbiased_estimates_of_the_true_kl():
    """E_{x~p}[k(x)] = KL(p || q) exactly for k1 and k3 (Schulman 2020), computed over the vocab."""
    gen = torch.Generator().manual_seed(3)
    logp = torch.log_softmax(torch.randn(9, generator=gen, dtype=torch.float64), -1)
    logq = torch.log_softmax(torch.randn(9, generator=gen, dtype=torch.float64), -1)
    p = logp.exp()
    true_kl = float((p * (logp - logq)).sum())
    for estimator in ("k1", "k3"):
        per_token = rl.kl_per_token(logp.unsqueeze(0), logq.unsqueeze(0), estimator)[0]
        assert close((p * per_token).sum(), true_kl, tol=1e-9)


def test_unknown_kl_estimator_is_rejected():
    with pytest.raises(ValueError, match="k4"):
        rl.kl_per_token(torch.zeros(1, 1), torch.zeros(1, 1), "k4")
    with pytest.raises(ValueError, match="k4"):
        rl.kl_pull_weight(torch.zeros(1, 1), torch.zeros(1, 1), "k4")


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
@pytest.mark.parametrize("seed", range(3))
def test_kl_pull_weight_is_the_estimators_gradient_magnitude(estimator, seed):
    """The closed form equals |d kl_t / d log pi_t| by autograd, token by token; 0 at pi = pi_ref
    for k2 and k3 (nothing to pull back), 1 everywhere for k1."""
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(3, 5, generator=gen, dtype=torch.float64) * 4).requires_grad_(True)
    ref = -torch.rand(3, 5, generator=gen, dtype=torch.float64) * 4
    rl.kl_per_token(logp, ref, estimator).sum().backward()
    assert torch.allclose(rl.kl_pull_weight(logp.detach(), ref, estimator), logp.grad.abs(), atol=1e-12)
    same = rl.kl_pull_weight(ref, ref, estimator)
    assert torch.equal(same, torch.ones_like(ref) if estimator == "k1" else torch.zeros_like(ref))


# --- GAE ---------------------------------------------------------------------------------


def naive_gae(rewards, values, gamma, lam):
    """Seed 003 §3.4 loop on one response (list of valid tokens); value after the end is 0."""
    n = len(rewards)
    adv = [0.0] * n
    lastgaelam = 0.0
    for t in reversed(range(n)):
        next_value = values[t + 1] if t + 1 < n else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        lastgaelam = delta + gamma * lam * lastgaelam
        adv[t] = lastgaelam
    return adv, [a + v for a, v in zip(adv, values, strict=True)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 0.95), (0.99, 0.9), (1.0, 1.0), (0.9, 0.0)])
def test_gae_equals_naive_loop(seed, gamma, lam):
    values, mask, gen = make_batch(seed)
    rewards = torch.randn(values.shape, generator=gen, dtype=values.dtype)
    adv, ret = rl.gae(rewards, values, mask, gamma, lam)
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    for i in range(values.shape[0]):
        n = int(mask[i].sum())
        want_adv, want_ret = naive_gae(rewards[i, :n].tolist(), values[i, :n].tolist(), gamma, lam)
        assert all(close(a, w) for a, w in zip(adv[i, :n].tolist(), want_adv, strict=True))
        assert all(close(r, w) for r, w in zip(ret[i, :n].tolist(), want_ret, strict=True))
        assert adv[i, n:].abs().sum() == 0 and ret[i, n:].abs().sum() == 0


def test_gae_with_gamma_lam_one_is_return_to_go_minus_value():
    rewards = torch.tensor([[0.0, 0.0, 1.0, 9.0]])
    values = torch.tensor([[0.2, 0.4, 0.6, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    adv, ret = rl.gae(rewards, values, mask, 1.0, 1.0)
    assert torch.allclose(adv, torch.tensor([[0.8, 0.6, 0.4, 0.0]]))
    assert torch.allclose(ret, torch.tensor([[1.0, 1.0, 1.0, 0.0]]))


def test_gae_skips_prompt_positions_before_the_response():
    """A mask with prompt zeros on the left gives the same advantages as the response alone."""
    gen = torch.Generator().manual_seed(4)
    rewards = torch.randn(1, 6, generator=gen, dtype=torch.float64)
    values = torch.randn(1, 6, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[0.0, 0.0, 1.0, 1.0, 1.0, 0.0]])
    adv, _ = rl.gae(rewards, values, mask, 1.0, 0.95)
    want, _ = naive_gae(rewards[0, 2:5].tolist(), values[0, 2:5].tolist(), 1.0, 0.95)
    assert torch.allclose(adv[0, 2:5], torch.tensor(want, dtype=torch.float64))
    assert adv[0, :2].abs().sum() == 0


def test_gae_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="equal shapes"):
        rl.gae(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3), 1.0, 0.95)


# --- GRPO groups -------------------------------------------------------------------------


def naive_group_normalize(rewards, group_size, eps, scale):
    out, zero = [], 0
    for g in range(0, len(rewards), group_size):
        group = rewards[g : g + group_size]
        if len(set(group)) == 1:
            zero += 1
            out += [0.0] * group_size
            continue
        mean, std = statistics.fmean(group), statistics.stdev(group)
        out += [(r - mean) / (std + eps) if scale else r - mean for r in group]
    return out, zero


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scale", [True, False])
def test_group_normalize_equals_naive(seed, scale):
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 3, (24,), generator=gen).double()  # ties -> some zero-std groups
    rewards[:4] = 1.0  # first group has zero std for sure
    adv, zero = rl.group_normalize(rewards, 4, scale=scale)
    want, want_zero = naive_group_normalize(rewards.tolist(), 4, 1e-6, scale)
    assert zero == want_zero >= 1
    assert all(close(a, w) for a, w in zip(adv.tolist(), want, strict=True))


def test_group_normalize_zero_std_groups_and_shape_errors():
    adv, zero = rl.group_normalize(torch.tensor([1.0, 1.0, 0.0, 2.0]), 2)
    assert zero == 1 and adv[:2].tolist() == [0.0, 0.0]
    assert close(adv[2], -1 / (math.sqrt(2) + 1e-6)) and close(adv[3], 1 / (math.sqrt(2) + 1e-6))
    with pytest.raises(ValueError, match="groups of 4"):
        rl.group_normalize(torch.zeros(6), 4)
    adv, zero = rl.group_normalize(torch.tensor([0.3, 0.7, 0.9]), 1)
    assert zero == 3 and adv.abs().sum() == 0


def test_group_normalize_leaves_non_finite_rewards_out():
    rewards = torch.tensor([1.0, math.nan, 3.0, 5.0, math.inf, 2.0, 2.0, 7.0])
    adv, zero = rl.group_normalize(rewards, 4)
    want, _ = naive_group_normalize([1.0, 3.0, 5.0], 3, 1e-6, True)
    assert torch.isfinite(adv).all()
    assert float(adv[1]) == 0.0 and float(adv[4]) == 0.0
    assert all(close(a, w) for a, w in zip([adv[0], adv[2], adv[3]], want, strict=True))
    assert zero == 0


# --- PPO diagnostics ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_clip_fraction_and_approx_kl_equal_naive(seed):
    new, mask, gen = make_batch(seed)
    old = new + 0.3 * torch.randn(new.shape, generator=gen, dtype=new.dtype)
    ratio = torch.exp(new - old)
    eps = 0.2
    pairs = [(float(new[i, j]), float(old[i, j])) for i in range(new.shape[0])
             for j in range(new.shape[1]) if mask[i, j]]
    want_clip = sum(abs(math.exp(n - o) - 1) > eps for n, o in pairs) / len(pairs)
    want_kl = sum((math.exp(n - o) - 1) - (n - o) for n, o in pairs) / len(pairs)
    assert close(rl.clip_fraction(ratio, mask, eps), want_clip)
    assert close(rl.approx_kl(new, old, mask), want_kl)
    assert rl.approx_kl(new, new, mask) == 0.0
    assert rl.clip_fraction(ratio, torch.zeros_like(mask), eps) == 0.0


@pytest.mark.parametrize("seed", SEEDS)
def test_explained_variance_equals_naive(seed):
    returns, mask, gen = make_batch(seed)
    values = returns + 0.5 * torch.randn(returns.shape, generator=gen, dtype=returns.dtype)
    r = valid_values(returns, mask)
    v = valid_values(values, mask)
    want = 1 - statistics.pvariance([a - b for a, b in zip(r, v, strict=True)]) / statistics.pvariance(r)
    assert close(rl.explained_variance(values, returns, mask), want)
    assert close(rl.explained_variance(returns, returns, mask), 1.0)
    flat = torch.full_like(returns, statistics.fmean(r))
    assert close(rl.explained_variance(flat, returns, mask), 0.0)


def test_explained_variance_is_nan_without_return_variance():
    returns = torch.tensor([[2.0, 2.0, math.nan]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert math.isnan(rl.explained_variance(torch.zeros(1, 3), returns, mask))
    assert math.isnan(rl.explained_variance(torch.zeros(1, 3), returns, torch.zeros(1, 3)))


def test_perplexity_is_exp_of_negative_mean_logprob():
    logprobs = torch.tensor([[-1.0, -3.0, math.nan]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert close(rl.perplexity(logprobs, mask), math.exp(2.0))
    assert math.isnan(rl.perplexity(logprobs, torch.zeros(1, 3)))


def test_float32_inputs_stay_within_tolerance_of_float64():
    x, mask, gen = make_batch(9, dtype=torch.float32)
    rewards = torch.randn(x.shape, generator=gen)
    adv32, _ = rl.gae(rewards, x, mask, 1.0, 0.95)
    adv64, _ = rl.gae(rewards.double(), x.double(), mask.double(), 1.0, 0.95)
    assert torch.allclose(adv32.double(), adv64, atol=TOL)


def test_entropy_ignores_minus_inf_logits_and_keeps_gradients_finite():
    logits = torch.tensor([[[2.0, -math.inf, 0.5]]], requires_grad=True)
    ent = rl.entropy_from_logits(logits)
    want = rl.entropy_from_logits(torch.tensor([[[2.0, 0.5]]]))
    assert close(ent[0, 0], want[0, 0])
    ent.sum().backward()
    assert torch.isfinite(logits.grad).all()
