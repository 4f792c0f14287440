"""Level checks: failures present from the first step, judged in units that hold at any scale.

Failure mode: a run broken from its start — every response cut at the length cap, a policy that
samples one token or pure noise, a KL term that does nothing, a reward that never separates good
from bad, gradients that never reach the weights, one response for every prompt. Every other
detector compares the run with its own history, so a failure present from step 1 *is* the history
and stays invisible (issue 10: ``rollout.max_new_tokens=3`` truncated every response and the doctor
said nothing). These checks compare each step with fixed levels instead and need no history.
Non-finite values are the ``nonfinite`` detector's job: it judges each step alone, from step 1.

Signal: one ``key`` per check.
``truncation`` — ``response/truncated_frac`` (responses cut at the cap without EOS), or the mean
length ``response/length_mean`` against the cap: ``rollout/max_new_tokens`` as the trainer logs it,
else ``length_cap`` from this detector's config (imported runs).
``entropy_zero`` — ``policy/entropy`` near 0 nats per token: the policy samples one token (greedy
collapse, a temperature near 0).
``entropy_uniform`` — ``policy/entropy`` near log(V), the entropy of a uniform distribution over
the vocabulary: the policy samples noise (random or wrong weights, a mismatched tokenizer, a huge
temperature). log(V) is ``policy/entropy_uniform`` as the trainer logs it, else log(``vocab_size``)
from the config; unknown → not judged.
``kl_zero_start`` — the KL to the reference per token (``kl/token_mean``; else ``kl/mean``, per
sequence: a stricter bound) is 0 while ``kl/coef`` > 0 and the policy has moved: an earlier step
had ``policy/approx_kl`` ≠ 0, ``update/ratio/actor`` > 0, or ``grad/norm/actor`` > 0 with
``optim/lr/actor`` > 0 (or not logged).
At step 1 the KL is 0 by construction (actor = reference), and real run 005 starts with lr 0, so
its KL is legitimately 0 at steps 1–2. Judged only while the KL has never been above the zero
bound: a KL that falls to 0 later is ``kl_zero``'s. Not judged when β is 0 (no reference model:
TRL GRPO's default, verl without a KL term; the KL detectors say "no reference") or not logged.
``no_signal`` — zero reward variance: ``reward/std`` = 0 (without a std, ``reward/max`` =
``reward/min``, as verl logs its score), or ``reward/frac_zero_std_groups`` ≈ 1 (every GRPO group
with identical rewards): no advantage, nothing to learn.
``no_update`` — ``grad/norm/actor`` exactly 0 while there is a learning signal (``reward/std`` > 0
and, when logged, not every group identical; without ``reward/std``, fewer than 99 % of the groups
identical): the gradient never reaches the weights (real run
021, ms-swift multi-node GRPO: grad_norm 0 with reward_std 0.13). Judged only where the logging
interval is one step (consecutive steps, or a first logged step ≤ 1): trainers that log every k
steps average the reward statistics over the k steps but report the last optimizer step's gradient
norm, so a zero there is normal (healthy-labelled TRL runs 002 and 004, logged every 5 steps, have
up to 4 logged steps in a row with grad_norm 0 and reward_std > 0).
``constant_responses`` — the step's samples: the share of the most common response (whitespace
stripped) among at least ``min_samples`` (4): one answer for every prompt.

Default thresholds: a check turns on after ``confirm`` = 3 steps in a row at its level and off
after 3 steps in a row without (one odd step neither starts nor ends a finding). A complete log
shorter than that (``doctor`` on a few lines pasted from an issue) is judged whole at its end
(``finish``): a check whose level held on every one of its 1–2 steps is reported as one confirmed
step would be, orange at most (the log shows the state, not its persistence).
``truncation`` yellow when ≥ ``trunc_frac`` = 0.5 of the responses are truncated or the mean
length is ≥ ``cap_frac`` = 0.95 × the cap: the healthy-labelled real run 002 (GSM8K, Qwen3.5-9B)
has 35 logged steps in a row with ≥ 50 % truncated and 20 with ≥ 95 %, its mean length pinned at
the 512 cap, and still learns (its accuracy reward is earned before the cut), so the level alone
cannot justify orange. Orange when nearly every answer (≥ ``all_frac`` = 0.9, or a mean length
≥ 0.99 × the cap) has been cut on every step since the first one: the run has hardly produced a
whole answer, a failure present from the start that makes it useless (issue 26; 0.9 and not 1.0:
in a batch of 32 one answer that ends exactly at the cap is 3 %, so "every answer" must not hinge
on it; the healthy-labelled 002 falls to 87.5 % at its second logged step). ``entropy_zero`` yellow below ``entropy_low`` = 0.01
nats per token, orange below ``entropy_zero`` = 0.001 (healthy-labelled real runs stay ≥ 0.036,
run 004; the recorded healthy tiny-world runs ≥ 0.057). ``entropy_uniform`` orange at ≥ ``uniform_frac`` = 0.9 ×
log(V) (the largest real-run entropy, 6.36 nats in the failed run 001 with V ≈ 248k, is 0.51 of
uniform). ``kl_zero_start`` orange when |KL| ≤ ``kl_eps`` = 1e-6 nats per token and, when logged,
``kl/token_max`` ≤ ``kl_eps_max`` = 1e-4 (actor = reference in the tiny world gives 6e-8 per token,
a token maximum of 5e-6; the first logged KL of a healthy run is ≥ 7e-6, real run 024) — orange,
not red, because logs printed with 3 decimals (verl) read a small KL as 0.000. ``no_signal``
yellow when ``reward/std`` ≤ ``std_eps`` = 1e-9 or ``reward/frac_zero_std_groups`` ≥
``zero_std_groups`` = 0.99, orange after ``persist`` = 10 steps in a row, or at once when it has
held since the first step (no learning signal from the start: the run cannot learn) (healthy-labelled real
runs have at most 1 such logged step in a row, 002 and 004; run 005, one or two groups per step,
6; the sparse-reward run 016 19, on 84 of its 100 steps). ``no_update`` orange at the first
step, red after 3 in a row (a zero gradient with a learning signal does not happen by chance when
each logged step is one optimizer step). ``constant_responses`` orange when the most common
response is ≥ ``constant_share`` = 0.9 of the step's samples. Healthy tiny-world runs stay far
from every level (truncated ≤ 6 %, entropy ≥ 0.057 nats, identical groups ≤ 0.875, top response
≤ 28 %). Real runs (benchmarks/real_runs.py lists every finding): truncation yellow on 001-003 and
024, no_signal on 003, 005, 016 (orange @32) and 017, entropy_zero orange on 011 (1-token answers),
no_update orange on 021; no healthy-labelled run gets an orange, red or black levels finding.
Practical significance: each check is a level in its own units — fractions of the batch and of the
cap, exact zeros, nats near 0 or near log(V) — so it holds at any scale and needs no z-score. The
one red is ``no_update``: a gradient norm of exactly 0 with a learning signal on 3 one-step logged
steps in a row (persistence). Orange where the state makes the run useless: every answer cut since
step 1, entropy < 0.001 nats or ≥ 0.9 log(V), KL exactly 0 with β > 0, no reward variance for 10
steps or since step 1, one response for ≥ 90%; yellow where healthy runs sit.
Scale assumptions: none beyond the units above — fractions of the batch, fractions of the
configured cap and of log(V), exact zeros, and nats for "near zero" entropy (a deterministic
policy has 0 nats at any vocabulary size). The steps of a check are consecutive logged steps.

False positives: a deliberately low cap on a task with long answers (``truncation``: yellow, by
design); a very small GRPO batch whose groups often agree by chance (``no_signal``: yellow until
10 steps in a row); logs printed with few decimals, where a tiny KL or gradient norm reads 0
(``kl_zero_start``, ``no_update``); a policy that moves so slowly that its KL stays below 1e-6 per
token for 3 steps; tasks whose correct answer is one fixed string (``constant_responses``).

Fix: truncation — raise ``rollout.max_new_tokens`` or teach the model to stop (EOS in the SFT
data, the stop token passed to generation); entropy near zero — raise the sampling temperature,
check the logits are not scaled twice; near uniform — check the model path, the tokenizer and the
temperature; KL zero — check the reference model is loaded and the KL is computed from its
log-probs; no signal — make the reward denser or the task easier, sample more responses per
prompt; no update — check that gradients are reduced across ranks and that the optimizer holds
the trainable parameters; constant responses — read the samples, check the prompts reach the
model and sampling is on. Each finding's evidence names its failure-library entry (``pattern``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rlcockpit.config import Config, check, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.detectors._levels_state import (
    Level,
    no_variance,
    positive,
    share_zh,
    signal_text,
    since,
    since_zh,
    spread,
    top_share,
)
from rlcockpit.diagnostics.registry import register
from rlcockpit.records import SampleRecord

_KL_NAMES = ("kl/token_mean", "kl/mean")  # per token first: the zero bound is per token


@dataclass(frozen=True)
class LevelsConfig(Config):
    confirm: int = option(3, help="Consecutive steps a level must hold before it is reported.",
                          range=(1, 1000))
    trunc_frac: float = option(0.5, help="Share of responses cut at the cap that counts as most.",
                               range=(0.0, 1.0))
    cap_frac: float = option(0.95, help="Mean response length at least this × the cap counts as "
                             "pinned at the cap.", range=(0.0, 1.0))
    all_frac: float = option(0.9, help="Share of truncated responses that counts as (nearly) "
                             "every answer cut; from the first step on, that makes truncation "
                             "orange.", range=(0.0, 1.0))
    length_cap: int = option(0, help="The configured max new tokens, for runs that do not log "
                             "rollout/max_new_tokens (imported runs); 0 = unknown.",
                             range=(0, None))
    vocab_size: int = option(0, help="The actor's vocabulary size, for runs that do not log "
                             "policy/entropy_uniform (imported runs); 0 = unknown.",
                             range=(0, None))
    entropy_low: float = option(0.01, help="Yellow below this entropy (nats per token).",
                                range=(0.0, 1e3))
    entropy_zero: float = option(1e-3, help="Orange below this entropy (nats per token).",
                                 range=(0.0, 1e3))
    uniform_frac: float = option(0.9, help="Orange when the entropy is at least this × log(V).",
                                 range=(0.0, 1.0))
    kl_eps: float = option(1e-6, help="|KL| per token at most this counts as zero (float noise: "
                           "1e-8 to 1e-7 per token when actor = reference).", range=(0.0, 1.0))
    kl_eps_max: float = option(1e-4, help="... and kl/token_max, when logged, at most this.",
                               range=(0.0, 1.0))
    std_eps: float = option(1e-9, help="reward/std at most this counts as zero variance.",
                            range=(0.0, 1e6))
    zero_std_groups: float = option(0.99, help="reward/frac_zero_std_groups at least this counts "
                                    "as every group identical.", range=(0.0, 1.0))
    persist: int = option(10, help="Consecutive steps without learning signal that make the "
                          "no_signal finding orange.", range=(1, 100000))
    constant_share: float = option(0.9, help="Share of the step's samples with the most common "
                                   "response that counts as constant.", range=(0.0, 1.0))
    min_samples: int = option(4, help="Fewest samples in a step to judge constant responses.",
                              range=(2, None))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.entropy_low >= self.entropy_zero, "entropy_low", self.entropy_low,
              f"must be >= entropy_zero={self.entropy_zero}")
        check(self.persist >= self.confirm, "persist", self.persist,
              f"must be >= confirm={self.confirm}")


@register
class Levels(Detector):
    name = "levels"
    family = "levels"
    reads = ("response/truncated_frac", "response/length_mean", "rollout/max_new_tokens",
             "policy/entropy", "policy/entropy_uniform", *_KL_NAMES, "kl/token_max", "kl/coef",
             "policy/approx_kl", "update/ratio/actor", "grad/norm/actor", "optim/lr/actor",
             "reward/std", "reward/frac_zero_std_groups", "reward/max", "reward/min")
    reads_samples = True
    patterns = ()  # per check in the evidence ("pattern"): a finding carries one detector's list
    signal = "levels"
    Config = LevelsConfig

    def __init__(self, config: LevelsConfig | None = None) -> None:
        super().__init__(config)
        self._levels: dict[str, Level] = {}
        self._last: dict[str, Condition] = {}  # each check's condition at the last step it held
        self._moved = False  # an earlier step updated the policy
        self._kl_seen = False  # the KL has been above kl_eps at some step
        self._prev_step: int | None = None
        self._first_step: int | None = None
        self._short: list[StepView] | None = []  # the steps so far, while fewer than `confirm`

    def update(self, view: StepView) -> list[Condition] | object:
        if not any(view.get(n) is not None for n in self.reads) and not view.samples:
            return SKIPPED
        if self._first_step is None:
            self._first_step = view.step
        if self._short is not None:
            self._short = self._short + [view] if len(self._short) + 1 < self.config.confirm \
                else None
        stride_one = self._stride_one(view.step)
        found = [self._truncation(view), self._entropy_zero(view), self._entropy_uniform(view),
                 self._kl_zero(view), self._no_signal(view), self._no_update(view, stride_one),
                 self._constant(view.samples, view.step)]
        self._note_update(view)
        return [c for c in found if c is not None]

    def finish(self) -> list[Condition] | None:
        """A complete log shorter than ``confirm`` steps (a few lines pasted from an issue): the
        checks whose level held on every one of its steps, judged as if one step confirmed them.
        Orange at most — one or two steps show the state, not its persistence."""
        if not self._short:
            return None
        shadow = Levels(replace(self.config, confirm=1, persist=max(1, self.config.persist)))
        found: list[Condition] = []
        for view in self._short:
            result = shadow.update(view)
            found = list(result) if isinstance(result, list) else []
        whole = len(self._short)
        out = []
        for cond in found:
            level = shadow._levels.get(cond.key)
            if level is None or level.run != whole:
                continue
            tail = f" — every step of this {whole}-step log"
            out.append(replace(
                cond, severity="orange" if cond.severity in ("red", "black") else cond.severity,
                message=cond.message + tail, message_zh=cond.message_zh + f"（整段日志共 {whole} 步均如此）",
                evidence={**cond.evidence, "short_log_steps": whole}))
        return out

    # ------------------------------------------------------------------ checks

    def _truncation(self, view: StepView) -> Condition | None:
        cfg = self.config
        frac = view.finite("response/truncated_frac")
        length = view.finite("response/length_mean")
        cap = positive(view.finite("rollout/max_new_tokens")) or positive(cfg.length_cap)
        pinned = cap is not None and length is not None and length >= cfg.cap_frac * cap
        level = self._level("truncation", (frac is not None and frac >= cfg.trunc_frac) or pinned,
                            view.step)
        every = (frac is not None and frac >= cfg.all_frac) or (
            cap is not None and length is not None and length >= 0.99 * cap)
        whole = self._level("truncation/all", every, view.step)
        if not self._report(level):
            return self._last.get("truncation") if level.on else None
        # every answer cut since the first step: the run has never produced a whole answer
        useless = whole.on and self._from_start(whole)
        share = f"{frac:.0%} of responses" if frac is not None else "the responses"
        at_cap = (f" (mean length {length:.3g} = {length / cap:.0%} of the cap {cap:.0f} tokens)"
                  if cap is not None and length is not None else "")
        at_cap_zh = (f"（平均长度 {length:.3g}，为上限 {cap:.0f} 的 {length / cap:.0%}）"
                     if cap is not None and length is not None else "")
        evidence = self._evidence(level, "truncation", "truncation_rise", truncated_frac=frac,
                                  length_mean=length, length_cap=cap, threshold=cfg.trunc_frac,
                                  cap_frac=cfg.cap_frac)
        evidence["from_start"] = useless
        tail = (": no answer has been whole since the run began — nothing it learns is a finished "
                "answer" if useless else ": answers are cut off")
        return self._keep(Condition(
            "orange" if useless else "yellow",
            f"{share} hit the length cap without EOS{since(level)}{at_cap}{tail}", evidence,
            key="truncation",
            message_zh=f"{since_zh(level)}{share_zh(frac)}回复触达长度上限且无 EOS{at_cap_zh}："
                       "回答被截断"))

    def _entropy_zero(self, view: StepView) -> Condition | None:
        cfg = self.config
        entropy = view.finite("policy/entropy")
        level = self._level("entropy_zero", entropy is not None and entropy < cfg.entropy_low,
                            view.step)
        severe = self._level("entropy_zero/orange",
                             entropy is not None and entropy < cfg.entropy_zero, view.step)
        if not self._report(level):
            return self._last.get("entropy_zero") if level.on else None
        severity = "orange" if severe.on else "yellow"
        evidence = self._evidence(level, "entropy", "entropy_collapse", entropy=entropy,
                                  threshold=cfg.entropy_zero if severe.on else cfg.entropy_low)
        return self._keep(Condition(
            severity, f"policy entropy is {entropy:.2g} nats per token{since(level)}: the "
            "policy samples almost one token (collapsed sampling)", evidence, key="entropy_zero",
            message_zh=f"{since_zh(level)}策略熵仅 {entropy:.2g} nats/token：采样几乎退化为单一 token"))

    def _entropy_uniform(self, view: StepView) -> Condition | None:
        cfg = self.config
        entropy = view.finite("policy/entropy")
        uniform = positive(view.finite("policy/entropy_uniform")) or (
            math.log(cfg.vocab_size) if cfg.vocab_size > 1 else None)
        noisy = entropy is not None and uniform is not None and entropy >= cfg.uniform_frac * uniform
        level = self._level("entropy_uniform", noisy, view.step)
        if not self._report(level):
            return self._last.get("entropy_uniform") if level.on else None
        ratio = entropy / uniform
        evidence = self._evidence(level, "entropy", "entropy_blowup", entropy=entropy,
                                  entropy_uniform=uniform, ratio=ratio,
                                  threshold=cfg.uniform_frac)
        return self._keep(Condition(
            "orange", f"policy entropy is {entropy:.3g} nats per token, {ratio:.0%} of a uniform "
            f"distribution ({uniform:.3g}){since(level)}: the policy samples noise", evidence,
            key="entropy_uniform",
            message_zh=f"{since_zh(level)}策略熵为 {entropy:.3g} nats/token，达到均匀分布"
                       f"（{uniform:.3g}）的 {ratio:.0%}：策略在输出噪声"))

    def _kl_zero(self, view: StepView) -> Condition | None:
        cfg = self.config
        name = next((n for n in _KL_NAMES if view.get(n) is not None), None)
        kl = view.finite(name) if name else None
        beta = view.finite("kl/coef")
        if kl is not None and abs(kl) > cfg.kl_eps:
            self._kl_seen = True  # from here on a KL that falls to 0 is kl_zero's
        peak = view.finite("kl/token_max")
        zero = (kl is not None and abs(kl) <= cfg.kl_eps and not self._kl_seen and self._moved
                and (peak is None or peak <= cfg.kl_eps_max) and beta is not None and beta > 0)
        level = self._level("kl_zero_start", zero, view.step)
        if not self._report(level):
            return self._last.get("kl_zero_start") if level.on and not self._kl_seen else None
        evidence = self._evidence(level, "KL", "kl_zero_ref_synced", kl=kl, metric=name,
                                  token_max=peak, kl_coef=beta, threshold=cfg.kl_eps)
        return self._keep(Condition(
            "orange", f"KL to the reference is exactly 0{since(level)} although β = {beta:.3g} "
            "and the policy has been updated: the KL term does nothing (reference = actor, or "
            "the KL is not computed)", evidence, key="kl_zero_start",
            message_zh=f"β = {beta:.3g} 且策略已更新，但{since_zh(level)} KL 恰为 0："
                       "KL 项不起作用（参考模型即 Actor，或 KL 未被计算）"))

    def _no_signal(self, view: StepView) -> Condition | None:
        cfg = self.config
        std = spread(view)
        groups = view.finite("reward/frac_zero_std_groups")
        level = self._level("no_signal", no_variance(std, groups, cfg), view.step)
        if not self._report(level):
            return self._last.get("no_signal") if level.on else None
        from_start = self._from_start(level)
        severity = "orange" if level.run >= cfg.persist or from_start else "yellow"
        flat = std is not None and std <= cfg.std_eps
        measure = "std" if view.finite("reward/std") is not None else "max - min"
        what = (f"every sample got the same reward ({measure} {std:.2g})" if flat
                else f"{groups:.0%} of the prompt groups have identical rewards")
        what_zh = ("所有样本的奖励相同" if flat
                   else f"{groups:.0%} 的提示组内奖励完全相同")
        evidence = self._evidence(level, "reward std", "reward_variance_collapse",
                                  reward_std=std, frac_zero_std_groups=groups,
                                  run=level.run, persist=cfg.persist, from_start=from_start,
                                  threshold=cfg.zero_std_groups)
        return self._keep(Condition(
            severity, f"no learning signal{since(level)}: {what}", evidence, key="no_signal",
            message_zh=f"{since_zh(level)}没有学习信号：{what_zh}（奖励方差为 0）"))

    def _no_update(self, view: StepView, stride_one: bool) -> Condition | None:
        cfg = self.config
        grad = view.finite("grad/norm/actor")
        std = spread(view)
        groups = view.finite("reward/frac_zero_std_groups")
        # a learning signal: rewards that differ in the batch, or (a trainer that logs only the
        # share of identical groups, ms-swift) some groups whose rewards differ
        signal = not no_variance(std, groups, cfg) and (std is not None or groups is not None)
        level = self._level("no_update", stride_one and signal and grad == 0.0, view.step,
                            confirm=1)
        if not self._report(level):
            return self._last.get("no_update") if level.on else None
        severity = "red" if level.run >= cfg.confirm else "orange"
        evidence = self._evidence(level, "gradient norm", "grad_vanishing", grad_norm=grad,
                                  reward_std=std, frac_zero_std_groups=groups, run=level.run)
        return self._keep(Condition(
            severity, f"the actor's gradient norm is exactly 0{since(level)} although the "
            f"rewards differ ({signal_text(std, groups)}): no update reaches the weights", evidence,
            key="no_update",
            message_zh=f"奖励存在差异（{signal_text(std, groups)}），但{since_zh(level)} Actor 梯度范数恰为 0："
                       "权重没有被更新"))

    def _constant(self, samples: Sequence[SampleRecord], step: int) -> Condition | None:
        cfg = self.config
        share, text = top_share([s.response for s in samples])
        judged = len(samples) >= cfg.min_samples
        level = self._level("constant_responses", judged and share >= cfg.constant_share, step)
        if not self._report(level):
            return self._last.get("constant_responses") if level.on else None
        shown = text if len(text) <= 60 else text[:57] + "..."
        evidence = self._evidence(level, "responses", "template_takeover", share=share,
                                  response=text[:200], samples=len(samples),
                                  threshold=cfg.constant_share)
        return self._keep(Condition(
            "orange", f"{share:.0%} of the step's {len(samples)} responses are the same text "
            f"({shown!r}){since(level)}: one answer for every prompt", evidence,
            key="constant_responses",
            message_zh=f"{since_zh(level)}{share:.0%} 的回复完全相同（{shown!r}）：所有提示得到同一个回答"))

    # ------------------------------------------------------------------ state

    def _level(self, key: str, holds: bool, step: int, confirm: int | None = None) -> Level:
        level = self._levels.setdefault(key, Level(confirm or self.config.confirm))
        level.update(bool(holds), step)
        return level

    @staticmethod
    def _report(level: Level) -> bool:
        """Whether to build a fresh condition: the check is on and its level holds this step (on a
        step inside the hysteresis where it does not, the last condition stands)."""
        return level.on and level.run > 0

    def _keep(self, condition: Condition) -> Condition:
        self._last[condition.key] = condition
        return condition

    def _evidence(self, level: Level, signal: str, pattern: str, **values: object
                  ) -> dict[str, object]:
        return {**values, "steps": level.held, "confirm": level.confirm, "signal": signal,
                "onset_step": level.onset, "pattern": pattern}

    def _from_start(self, level: Level) -> bool:
        """Whether the level has held since the first step this detector saw (a failure present
        from the start, never broken by a step without it)."""
        return level.onset is not None and level.onset == self._first_step and \
            level.held == level.run

    def _stride_one(self, step: int) -> bool:
        """Whether this step's metrics describe one optimizer step (the logging interval is 1)."""
        prev, self._prev_step = self._prev_step, step
        return step <= 1 if prev is None else step - prev == 1

    def _note_update(self, view: StepView) -> None:
        """Remember whether this step updated the policy (the KL of later steps must then be > 0)."""
        approx = view.finite("policy/approx_kl")
        ratio = view.finite("update/ratio/actor")
        grad = view.finite("grad/norm/actor")
        lr = view.finite("optim/lr/actor")
        self._moved = self._moved or bool(
            (approx is not None and approx != 0.0) or (ratio is not None and ratio > 0)
            or (grad is not None and grad > 0 and (lr is None or lr > 0)))
