"""trainer.losses, trainer.advantage and trainer.controllers: losses equal naive per-token loops (padding never leaks,
not even into gradients); controllers follow their formulas step by step, clamp, and round-trip
through state_dict."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest
import torch

from rlcockpit.errors import ConfigError
from rlcockpit.trainer.advantage import RunningMeanStd, ValueNormalizer, token_rewards
from rlcockpit.trainer.controllers import AdaptiveClipEps, AdaptiveKLController, FixedKLController
from rlcockpit.trainer.losses import entropy_bonus, kl_loss, kl_pull_share, policy_loss, value_loss

SEEDS = [0, 1, 2]
TOL = 1e-5


def make_mask(seed: int, b: int = 6, t: int = 7) -> tuple[torch.Tensor, torch.Generator]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, t + 1, (b,), generator=gen)
    lengths[0], lengths[1], lengths[2] = 0, 1, t
    mask = (torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)).double()
    return mask, gen


def rand_like_mask(mask, gen, scale=1.0, pad=math.nan):
    x = torch.randn(mask.shape, generator=gen, dtype=torch.float64) * scale
    return torch.where(mask.bool(), x, torch.full_like(x, pad))


def cells(mask):
    return [(i, j) for i in range(mask.shape[0]) for j in range(mask.shape[1]) if mask[i, j]]


def close(a, b, tol=TOL):
    a = float(a.detach()) if isinstance(a, torch.Tensor) else float(a)
    return abs(a - float(b)) <= tol * max(1.0, abs(float(b)))


# --- losses ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("clip_eps", [0.1, 0.2])
def test_policy_loss_equals_naive_loop(seed, clip_eps):
    mask, gen = make_mask(seed)
    old = rand_like_mask(mask, gen)
    new = (old + 0.3 * torch.randn(mask.shape, generator=gen, dtype=torch.float64)).detach()
    new.requires_grad_(True)
    adv = rand_like_mask(mask, gen)
    loss, stats = policy_loss(new, old, adv, mask, clip_eps)
    terms, ratios = [], []
    new_d = new.detach()
    for i, j in cells(mask):
        r = math.exp(float(new_d[i, j]) - float(old[i, j]))
        a = float(adv[i, j])
        clipped = min(max(r, 1 - clip_eps), 1 + clip_eps)
        terms.append(max(-a * r, -a * clipped))
        ratios.append(r)
    assert close(loss, statistics.fmean(terms))
    assert close(stats["clip_frac"], sum(abs(r - 1) > clip_eps for r in ratios) / len(ratios))
    assert close(stats["ratio_mean"], statistics.fmean(ratios))
    assert close(stats["ratio_max"], max(ratios))
    assert close(stats["approx_kl"], statistics.fmean(r - 1 - math.log(r) for r in ratios))
    assert set(stats) == {"clip_frac", "ratio_mean", "ratio_max", "approx_kl"}
    assert all(isinstance(v, float) for v in stats.values())
    loss.backward()
    assert torch.isfinite(new.grad).all()
    assert new.grad[~mask.bool()].abs().sum() == 0


def test_policy_loss_gradient_stops_outside_the_clip_range():
    """PPO's point: a token whose ratio already moved past 1 + eps in the advantage's direction
    gets no further push (seed 003 §4.2)."""
    old = torch.zeros(1, 3, dtype=torch.float64)
    new = torch.tensor([[math.log(1.5), math.log(1.05), math.log(0.5)]],
                       dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64)
    loss, stats = policy_loss(new, old, adv, torch.ones(1, 3), clip_eps=0.2)
    loss.backward()
    assert float(new.grad[0, 0]) == 0.0  # r = 1.5 > 1.2 with A > 0: clipped
    assert float(new.grad[0, 1]) < 0 and float(new.grad[0, 2]) < 0  # still pushed up
    assert close(stats["clip_frac"], 2 / 3)


def test_policy_loss_rejects_non_positive_clip_eps():
    with pytest.raises(ValueError, match="clip_eps"):
        policy_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), 0.0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("clip_range", [None, 0.2])
def test_value_loss_equals_naive_loop(seed, clip_range):
    mask, gen = make_mask(seed)
    old_v = rand_like_mask(mask, gen)
    values = (old_v + 0.4 * torch.randn(mask.shape, generator=gen, dtype=torch.float64)).detach()
    values.requires_grad_(True)
    returns = rand_like_mask(mask, gen)
    loss, clip_frac = value_loss(values, old_v, returns, mask, clip_range)
    terms, clipped = [], 0
    values_d = values.detach()
    for i, j in cells(mask):
        v, ov, r = float(values_d[i, j]), float(old_v[i, j]), float(returns[i, j])
        if clip_range is None:
            terms.append((v - r) ** 2)
            continue
        vc = ov + min(max(v - ov, -clip_range), clip_range)
        terms.append(max((v - r) ** 2, (vc - r) ** 2))
        clipped += abs(v - ov) > clip_range
    assert close(loss, 0.5 * statistics.fmean(terms))
    assert close(clip_frac, clipped / len(terms))
    loss.backward()
    assert torch.isfinite(values.grad).all()


def test_value_loss_rejects_non_positive_clip_range():
    with pytest.raises(ValueError, match="clip_range"):
        value_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), 0.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_entropy_bonus_and_kl_loss_equal_naive(seed):
    mask, gen = make_mask(seed)
    entropy = rand_like_mask(mask, gen).abs()
    logp = -rand_like_mask(mask, gen).abs()
    ref = -rand_like_mask(mask, gen).abs()
    assert close(entropy_bonus(entropy, mask), statistics.fmean(float(entropy[c]) for c in cells(mask)))
    want_k3 = statistics.fmean(
        math.exp(float(ref[c]) - float(logp[c])) - (float(ref[c]) - float(logp[c])) - 1
        for c in cells(mask)
    )
    want_k1 = statistics.fmean(float(logp[c]) - float(ref[c]) for c in cells(mask))
    logp.requires_grad_(True)
    loss = kl_loss(logp, ref, mask)
    assert close(loss, want_k3)
    assert close(kl_loss(logp, ref, mask, estimator="k1"), want_k1)
    loss.backward()
    assert torch.isfinite(logp.grad).all() and logp.grad[~mask.bool()].abs().sum() == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_kl_pull_share_equals_naive(seed):
    """beta x mean |d k3 / d log pi| over that + mean |A|, over the valid tokens only."""
    mask, gen = make_mask(seed)
    logp = -rand_like_mask(mask, gen).abs()
    ref = -rand_like_mask(mask, gen).abs()
    adv = rand_like_mask(mask, gen)
    beta = 0.5 + seed
    pull = beta * statistics.fmean(abs(1 - math.exp(float(ref[c]) - float(logp[c]))) for c in cells(mask))
    push = statistics.fmean(abs(float(adv[c])) for c in cells(mask))
    assert close(kl_pull_share(logp, ref, adv, mask, beta), pull / (pull + push))
    assert kl_pull_share(logp, ref, adv, mask, 0.0) == 0.0
    assert kl_pull_share(ref, ref, adv, mask, beta) == 0.0  # at the reference nothing pulls
    assert kl_pull_share(logp, ref, torch.zeros_like(adv), mask, beta) is None  # nothing pushes


def test_losses_on_an_empty_batch_are_zero_not_nan():
    mask = torch.zeros(2, 3)
    x = torch.full((2, 3), math.nan, requires_grad=True)
    loss, stats = policy_loss(x, x, x, mask, 0.2)
    assert loss.item() == 0.0 and stats["clip_frac"] == 0.0 and math.isnan(stats["ratio_max"])
    vloss, _ = value_loss(x, x, x, mask, 0.2)
    assert vloss.item() == 0.0 and kl_loss(x, x, mask).item() == 0.0
    loss.backward()
    assert torch.isfinite(x.grad).all()


# --- token rewards -----------------------------------------------------------------------


def naive_token_rewards(seq, kl, mask, coef):
    out = [[0.0] * mask.shape[1] for _ in range(mask.shape[0])]
    for i in range(mask.shape[0]):
        valid = [j for j in range(mask.shape[1]) if mask[i, j]]
        for j in valid:
            out[i][j] = -coef * float(kl[i, j])
        if valid:
            out[i][valid[-1]] += float(seq[i])
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_token_rewards_equal_naive(seed):
    mask, gen = make_mask(seed)
    kl = rand_like_mask(mask, gen)
    seq = torch.randn(mask.shape[0], generator=gen, dtype=torch.float64)
    out = token_rewards(seq, kl, mask, 0.05)
    want = torch.tensor(naive_token_rewards(seq, kl, mask, 0.05), dtype=torch.float64)
    assert torch.allclose(out, want, atol=TOL)
    assert float(out[0].abs().sum()) == 0.0  # empty row: the reward has nowhere to go
    assert close(out[1, 0], -0.05 * float(kl[1, 0]) + float(seq[1]))  # length-1 response


def test_token_rewards_put_the_reward_on_the_last_response_token_after_a_prompt():
    mask = torch.tensor([[0.0, 0.0, 1.0, 1.0, 0.0]])
    out = token_rewards(torch.tensor([2.0]), torch.zeros(1, 5), mask, 0.1)
    assert out.tolist() == [[0.0, 0.0, 0.0, 2.0, 0.0]]
    with pytest.raises(ValueError, match="2 sequence rewards for 1 rows"):
        token_rewards(torch.tensor([1.0, 2.0]), torch.zeros(1, 5), mask, 0.1)


# --- running statistics ------------------------------------------------------------------


def test_running_mean_std_merges_batches_exactly():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=int(n)) for n in rng.integers(1, 40, size=8)]
    rms = RunningMeanStd()
    for batch in batches:
        rms.update(torch.tensor(batch))
    everything = np.concatenate(batches)
    assert close(rms.mean, everything.mean()) and close(rms.var, everything.var())
    assert rms.count == everything.size
    x = torch.tensor([0.0, 5.0], dtype=torch.float64)
    want = (x - everything.mean()) / (everything.std() + 1e-8)
    assert torch.allclose(rms.normalize(x), want, atol=TOL)
    assert torch.allclose(rms.denormalize(rms.normalize(x)), x, atol=1e-9)
    assert torch.allclose(rms.normalize(torch.tensor([1e6]), clip=5.0), torch.tensor([5.0]))


def test_running_mean_std_ignores_non_finite_and_masked_values():
    rms = RunningMeanStd()
    rms.update(torch.tensor([1.0, math.nan, 3.0, math.inf]))
    rms.update(torch.tensor([[5.0, 99.0]]), mask=torch.tensor([[1.0, 0.0]]))
    rms.update(torch.tensor([]))
    assert rms.count == 3 and close(rms.mean, 3.0) and close(rms.var, np.var([1.0, 3.0, 5.0]))


def test_running_mean_std_state_round_trips_as_plain_json():
    rms = RunningMeanStd()
    rms.update(torch.tensor([1.0, 2.0, 4.0]))
    state = json.loads(json.dumps(rms.state_dict()))
    other = RunningMeanStd()
    other.load_state_dict(state)
    rms.update(torch.tensor([7.0]))
    other.update(torch.tensor([7.0]))
    assert other.state_dict() == rms.state_dict()


def test_value_normalizer_gives_unit_targets_and_inverts():
    mask, gen = make_mask(1)
    returns = rand_like_mask(mask, gen, scale=10.0) + 50.0
    vn = ValueNormalizer()
    vn.update(returns, mask)
    targets = vn.normalize(returns)
    valid = targets[mask.bool()]
    assert close(valid.mean(), 0.0) and close(valid.std(unbiased=False), 1.0, tol=1e-4)
    assert torch.allclose(vn.denormalize(targets)[mask.bool()], returns[mask.bool()], atol=1e-9)
    clone = ValueNormalizer()
    clone.load_state_dict(vn.state_dict())
    assert clone.state_dict() == vn.state_dict()


# --- KL controllers ----------------------------------------------------------------------


def test_adaptive_kl_controller_follows_ziegler_step_by_step():
    ctl = AdaptiveKLController(init_coef=0.1, target=6.0, horizon=10_000)
    coef = 0.1
    for kl, n in [(6.0, 64), (7.2, 64), (100.0, 64), (0.0, 128), (5.0, 32)]:
        error = min(max(kl / 6.0 - 1, -0.2), 0.2)
        coef *= 1 + error * n / 10_000
        assert close(ctl.update(kl, n), coef, tol=1e-12)
    assert close(ctl.coef, coef, tol=1e-12)


def test_adaptive_kl_controller_clamps_and_moves_the_right_way():
    up = AdaptiveKLController(0.1, target=1.0, horizon=100)
    assert close(up.update(1e9, 10), 0.1 * (1 + 0.2 * 10 / 100))  # capped at +20 % per horizon
    down = AdaptiveKLController(0.1, target=1.0, horizon=100)
    assert close(down.update(0.0, 10), 0.1 * (1 - 0.2 * 10 / 100))
    assert down.update(math.nan, 10) == down.coef  # a NaN KL changes nothing


def test_kl_controllers_live_changes_and_state_round_trip():
    ctl = AdaptiveKLController(0.05, target=3.0, horizon=1000)
    ctl.update(4.0, 16)
    ctl.coef, ctl.target = 0.2, 2.0  # a live-parameter change
    assert ctl.coef == 0.2 and ctl.target == 2.0
    clone = AdaptiveKLController(1.0, target=1.0, horizon=1)
    clone.load_state_dict(json.loads(json.dumps(ctl.state_dict())))
    assert clone.update(3.0, 8) == ctl.update(3.0, 8)
    with pytest.raises(ConfigError, match="kl.target"):
        ctl.target = 0.0
    with pytest.raises(ConfigError, match="kl.coef"):
        ctl.coef = -1.0
    fixed = FixedKLController(0.05)
    assert fixed.update(1e6, 100) == 0.05 and fixed.target is None
    fixed.coef = 0.1
    restored = FixedKLController(0.0)
    restored.load_state_dict(fixed.state_dict())
    assert restored.coef == 0.1


# --- adaptive clip epsilon ---------------------------------------------------------------


def test_adaptive_clip_eps_follows_seed_000_formula_step_by_step():
    ctl = AdaptiveClipEps(base_eps=0.2, min_eps=0.05, max_eps=0.4, interval=2.0)
    entropies = [2.0, 2.1, 2.5, 2.4, 1.0, 0.5, 3.0]
    ma = None
    for h in entropies:
        if ma is None:
            ma, slope = h, 0.0
        else:
            prev, ma = ma, 0.95 * ma + 0.05 * h
            slope = (ma - prev) / 2.0
        want = min(max(0.2 * (1 + 2 * math.tanh(10 * slope)), 0.05), 0.4)
        assert close(ctl.update(h), want, tol=1e-12)
        assert close(ctl.eps, want, tol=1e-12) and close(ctl.slope, slope, tol=1e-12)


def test_adaptive_clip_eps_widens_on_rising_entropy_and_narrows_on_collapse():
    ctl = AdaptiveClipEps(0.2, 0.05, 0.3)
    assert ctl.update(2.0) == 0.2
    assert ctl.update(40.0) == 0.3  # clamped at max_eps
    collapse = AdaptiveClipEps(0.2, 0.05, 0.3)
    collapse.update(2.0)
    assert 0.05 <= collapse.update(0.0) < 0.2
    assert collapse.update(math.nan) == collapse.eps  # NaN entropy changes nothing
    floor = AdaptiveClipEps(0.2, 0.15, 0.3)
    floor.update(5.0)
    assert floor.update(-100.0) == 0.15  # clamped at min_eps


def test_adaptive_clip_eps_base_is_live_and_state_round_trips():
    ctl = AdaptiveClipEps(0.2, 0.05, 0.4)
    for h in (2.0, 2.2, 2.1):
        ctl.update(h)
    ctl.base_eps = 0.1  # takes effect at once with the last slope
    assert close(ctl.eps, min(max(0.1 * (1 + 2 * math.tanh(10 * ctl.slope)), 0.05), 0.4))
    clone = AdaptiveClipEps(0.3, 0.01, 0.9)
    clone.load_state_dict(json.loads(json.dumps(ctl.state_dict())))
    for h in (1.9, 2.5, 0.3):
        assert clone.update(h) == ctl.update(h)
    with pytest.raises(ConfigError, match="clip.base_eps"):
        ctl.base_eps = 0.5
    with pytest.raises(ConfigError, match="clip.max_eps"):
        AdaptiveClipEps(0.2, 0.3, 0.1)
