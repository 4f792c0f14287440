"""Gradient norms: explosion, vanishing, and one layer group far above the others (001 Q22,
000 §4.3).

Failure mode: *explosion* — one batch produces a huge gradient that kicks the policy out of its
trust region (KL jump, language collapse, NaN); *vanishing* — the gradients go to ~0 and nothing is
learned; *layer dominance* — one layer group (typically the embeddings, after a reward-scale jump,
000 §4.3) receives gradients far above the rest.
Signal: ``grad/norm/actor`` and ``grad/norm/critic`` (pre-clipping norms) against their rolling
median over ``window`` steps; ``grad/norm/layer/<name>``: the largest group norm over the median
group norm.
Default thresholds: explosion when the norm is > 10× its rolling median and > 1.5× the largest
norm of the window (a norm the run already reached recently is not an explosion: sparse rewards
make most GRPO steps' gradients ~0 and the others 20× larger, real run 016; the first exploding
step of the recorded lr_spike / critic_lr_spike runs is 2.0× / 16× the window's largest), after
8 steps (key "explosion/<actor|critic>"). Yellow when gradient clipping cut it
(``grad/clip/<net>`` logged and below it) and the update ratio stayed within 3× its median: the
clip did its job (a healthy tiny GRPO run, calibration seed 0: a norm of 156 at step 116, clipped
to 1.0, the update ratio unchanged at 0.0013); vanishing when it stays below 1e-3 × its early
median (first 10 steps) for 5 steps → yellow (key "vanishing/<…>"); dominance when max/median
over layer groups > 10 for 3 steps → orange (key "layer"); loss explosion when |``policy/loss``|
is ≥ ``loss_ratio`` (10)× its typical magnitude and > 2× the largest |loss| of the window (key
"loss"; real run 014: 0.2 → 1e4–1.3e8 from step ~410; healthy real runs stay within 5× their
median).
Practical significance: "large" is measured against the run's *typical magnitude* —
the 0.9 quantile of |value| over the window (:func:`~rlcockpit.diagnostics.windows.typical_magnitude`)
— never a z-score or a ratio to a near-zero median: a history with fewer than ``min_steps``
non-zero values is no evidence (a LoRA GRPO loss that is exactly 0 on half its steps). Red needs a
consequence that is bad in its own units: a norm or loss ≥ ``severe_ratio`` (100)× its typical
magnitude — for the loss also |loss| ≥ ``loss_abs`` (1, the natural unit of an advantage-weighted
loss) — or an explosion that holds ``persist_steps`` (3) steps in a row; one that holds
``orange_steps`` (2) is orange, and so is one ≥ 100× whose loss is below 1; a single step 10–100×
the usual size is yellow — a spike the run may recover from, and gradient clipping bounds the
update (real runs 005, 008, 011, 013, 014, 016: one norm or loss 11–160× its median, back to normal
the next step); a loss below ``loss_floor`` (0.1) is never an
explosion (real run 024: −0.03 against a typical 1e-4 is noise in the loss's own units).
Scale assumptions: none in absolute units — gradient norms depend on the model, the loss and the
reward scale (real runs: medians 1e-4 on run 011 to 21 on run 008); ``explode_abs`` /
``vanish_abs`` set absolute bounds if you know yours (0 = none, the default). An exactly zero
norm with a learning signal is the ``levels`` detector's.
False positives: the very first updates (warm-up); a frozen sub-network legitimately has zero
gradient (exclude it from logging).
Fix: explosion — lower the learning rate, enable or tighten gradient clipping, find the batch
(extreme rewards or advantages); vanishing — check the loss is connected (detached tensors), the
learning rate and β; dominance — clip the embeddings separately, normalise the reward scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Streak, Window, median, typical_magnitude

_NETS = ("actor", "critic")


@dataclass(frozen=True)
class GradientsConfig(Config):
    window: int = option(30, help="Steps of gradient norm forming the rolling median.",
                         range=(3, 10000))
    min_steps: int = option(8, help="Steps before judging an explosion against the median.",
                            range=(1, 10000))
    explode_ratio: float = option(10.0, help="An explosion when the norm exceeds this × rolling median.",
                                  range=(1.0, 1e9))
    explode_over_max: float = option(1.5, help="... and exceeds this × the window's largest norm.",
                                     range=(1.0, 1e9))
    explode_abs: float = option(0.0, help="Red when the norm exceeds this (0 = no absolute bound).",
                                range=(0.0, 1e12))
    vanish_abs: float = option(0.0, help="Vanishing when the norm stays below this (0 = none) ...",
                               range=(0.0, 1e6))
    vanish_ratio: float = option(1e-3, help="... or below this × its early median (first "
                                 "baseline_steps steps) ...", range=(0.0, 1.0))
    vanish_steps: int = option(5, help="... for this many consecutive steps.", range=(1, 10000))
    baseline_steps: int = option(10, help="Early steps whose median is the vanishing baseline.",
                                 range=(1, 10000))
    layer_ratio: float = option(10.0, help="Orange when max/median over layer groups exceeds "
                                "this ...", range=(1.0, 1e9))
    layer_steps: int = option(3, help="... for this many consecutive steps.", range=(1, 10000))
    absorbed_ratio: float = option(3.0, help="An explosion cut by gradient clipping "
                                   "(grad/clip/<net>) whose update ratio stayed within this × its "
                                   "median is a yellow spike, not red.", range=(1.0, 1e9))
    severe_ratio: float = option(100.0, help="An explosion (gradient norm or loss) is red when it "
                                 "is at least this × the typical magnitude (the 0.9 quantile of "
                                 "|value| over the window) or holds persist_steps; else orange.",
                                 range=(1.0, 1e12))
    persist_steps: int = option(3, help="... or when the explosion holds this many steps in a row.",
                                range=(1, 10000))
    orange_steps: int = option(2, help="An explosion below severe_ratio is yellow on one step (a "
                               "spike the run may recover from), orange once it holds this many "
                               "steps in a row.", range=(1, 10000))
    loss_ratio: float = option(10.0, help="Loss explosion: |policy/loss| at least this × its "
                               "typical magnitude over the window ...", range=(1.0, 1e12))
    loss_over_max: float = option(2.0, help="... and above this × the window's largest |loss|.",
                                  range=(1.0, 1e9))
    loss_abs: float = option(1.0, help="A loss explosion is red only at |loss| of at least this "
                             "(a policy loss is advantage-weighted: ~1 is its natural unit when the "
                             "advantages are normalised); smaller ones are orange at most.",
                             range=(0.0, 1e12))
    loss_floor: float = option(0.1, help="No loss explosion below this |loss|: a few hundredths "
                               "of an advantage-weighted loss is noise in its own units, whatever "
                               "its ratio to a history near 0.", range=(0.0, 1e12))


@register
class Gradients(Detector):
    name = "gradients"
    family = "gradients"
    reads = ("grad/norm/actor", "grad/norm/critic", "grad/norm/layer/", "policy/loss",
             "grad/clip/actor", "grad/clip/critic", "update/ratio/actor", "update/ratio/critic")
    patterns = ("grad_explosion", "grad_vanishing", "embedding_grad_dominance")
    signal = "grad norm"
    Config = GradientsConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return bool({"grad/norm/actor", "grad/norm/critic", "policy/loss"} & names) \
            or any(n.startswith("grad/norm/layer/") for n in names)

    def __init__(self, config: GradientsConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._norms = {net: Window(cfg.window) for net in _NETS}
        self._vanish = {net: Streak() for net in _NETS}
        self._blowup = {net: Streak() for net in _NETS}
        self._early: dict[str, list[float]] = {net: [] for net in _NETS}
        self._layer = Streak()
        self._loss = Window(cfg.window)  # log10 |policy/loss| of the non-zero values
        self._loss_held = Streak()
        self._updates = {net: Window(cfg.window) for net in _NETS}  # update/ratio/<net>

    def update(self, view: StepView) -> list[Condition] | object:
        layers = view.matching("grad/norm/layer/")
        if all(view.get(f"grad/norm/{net}") is None for net in _NETS) and not layers \
                and view.get("policy/loss") is None:
            return SKIPPED
        found: list[Condition | None] = []
        for net in _NETS:
            value = view.finite(f"grad/norm/{net}")
            if value is not None:
                found += [self._explosion(net, value, view),
                          self._vanishing(net, value, view.step)]
                held = self._blowup[net].count
                if held == 0 or held >= self.config.window:
                    # the reference stays the norms before an explosion while it holds (so a
                    # blow-up that persists is judged against the run's usual size), and takes
                    # the new level once it has held a whole window
                    self._norms[net].push(value, view.step)
        for net in _NETS:  # after the judgement: the update ratios of the steps before
            self._updates[net].push(view.finite(f"update/ratio/{net}"), view.step)
        found.append(self._dominance(layers, view.step))
        found.append(self._loss_explosion(view.finite("policy/loss"), view.step))
        return [c for c in found if c is not None]

    def _loss_explosion(self, loss: float | None, step: int) -> Condition | None:
        """|policy/loss| far above its typical magnitude (key "loss")."""
        cfg = self.config
        if loss is None:
            return None
        window = self._loss
        found = None
        typical = typical_magnitude(window.values, min_nonzero=cfg.min_steps) \
            if len(window) >= cfg.min_steps else None
        size = abs(loss)
        if typical is not None:  # None: too few non-zero steps to know the loss's size
            top = float(np.max(np.abs(window.values)))
            ratio = size / typical
            exploded = ratio >= cfg.loss_ratio and size > cfg.loss_over_max * top \
                and size >= cfg.loss_floor
            held = self._loss_held.update(exploded, step)
            if exploded:
                severity = _tier(held, cfg, large=ratio >= cfg.severe_ratio,
                                 bad=ratio >= cfg.severe_ratio and size >= cfg.loss_abs)
                evidence = {"loss": loss, "typical_abs": typical, "ratio_to_typical": ratio,
                            "window_max_abs": top, "threshold_ratio": cfg.loss_ratio,
                            "severe_ratio": cfg.severe_ratio, "loss_abs": cfg.loss_abs,
                            "steps": held, "signal": "loss", "onset_step": self._loss_held.onset,
                            "magnitude": size}
                found = Condition(severity,
                                  f"policy loss exploded to {loss:.3g} ({ratio:.0f}× its typical "
                                  f"magnitude {typical:.3g}, {size / top:.1f}× the largest of the "
                                  f"last {len(window)} steps"
                                  + (f"; {held} steps in a row)" if held > 1 else ")"),
                                  evidence, key="loss",
                                  message_zh=f"策略损失爆炸至 {loss:.3g}（为其典型量级 {typical:.3g} 的 "
                                             f"{ratio:.0f} 倍）")
        window.push(size, step)
        return found

    def _explosion(self, net: str, value: float, view: StepView) -> Condition | None:
        cfg, step = self.config, view.step
        window = self._norms[net]
        known = len(window) >= cfg.min_steps
        med = median(window.values) if known else None
        top = float(np.max(window.values)) if known else None
        typical = typical_magnitude(window.values, min_nonzero=cfg.min_steps) if known else None
        by_ratio = typical is not None and med is not None and med > 0 \
            and value > cfg.explode_ratio * med and value > cfg.explode_over_max * top
        absolute = bool(cfg.explode_abs and value > cfg.explode_abs)
        held = self._blowup[net].update(by_ratio or absolute, step)
        if not by_ratio and not absolute:
            return None
        ratio = value / med if med else None
        large = typical is not None and value >= cfg.severe_ratio * typical
        severity = "red" if absolute else _tier(held, cfg, large=large, bad=large)
        evidence = {"grad_norm": value, "rolling_median": med, "window_max": top, "ratio": ratio,
                    "typical_abs": typical, "severe_ratio": cfg.severe_ratio, "steps": held,
                    "threshold_ratio": cfg.explode_ratio, "threshold_abs": cfg.explode_abs,
                    "signal": "grad norm", "onset_step": self._blowup[net].onset,
                    "magnitude": value}
        shown = f" ({ratio:.1f}× its median {med:.3g})" if ratio else ""
        clip, moved = self._absorbed(net, value, view)
        if clip is not None:  # clipped, and the weights moved as usual: a spike, not a blow-up
            evidence.update(clip=clip, update_ratio_vs_median=moved)
            return Condition("yellow", f"{net} gradient norm spiked to {value:.3g}{shown}; "
                             f"clipping to {clip:.3g} kept the update at its usual size",
                             evidence, key=f"explosion/{net}",
                             message_zh=f"{net} 梯度范数突增至 {value:.3g}，已被裁剪到 "
                                        f"{clip:.3g}，参数更新幅度正常")
        return Condition(severity,
                         f"{net} gradient norm exploded to {value:.3g}{shown}"
                         + (f", {held} steps in a row" if held > 1 else ""), evidence,
                         key=f"explosion/{net}",
                         message_zh=f"{net} 梯度范数爆炸至 {value:.3g}")

    def _absorbed(self, net: str, value: float, view: StepView) -> tuple[float | None, float]:
        """(clip, update ratio / its median) when gradient clipping cut this norm and the
        update ratio stayed within ``absorbed_ratio`` × its recent median; (None, ...) else
        (no clip or update ratio logged — imported runs — or the update moved anyway)."""
        clip = view.finite(f"grad/clip/{net}")
        ratio = view.finite(f"update/ratio/{net}")
        history = self._updates[net]
        before = median(history.values) if len(history) >= 3 else None
        if clip is None or clip <= 0 or value <= clip or ratio is None or not before:
            return None, math.nan
        moved = ratio / before
        return (clip, moved) if moved <= self.config.absorbed_ratio else (None, moved)

    def _vanishing(self, net: str, value: float, step: int) -> Condition | None:
        cfg = self.config
        streak, early = self._vanish[net], self._early[net]
        if len(early) < cfg.baseline_steps:
            early.append(value)
        baseline = median(early)
        threshold = max(cfg.vanish_abs, cfg.vanish_ratio * baseline
                        if len(early) >= cfg.baseline_steps else 0.0)
        held = streak.update(value < threshold, step)
        if held < cfg.vanish_steps:
            return None
        evidence = {"grad_norm": value, "threshold": threshold, "early_median": baseline,
                    "steps": held, "signal": "grad norm", "onset_step": streak.onset}
        return Condition("yellow", f"{net} gradient norm {value:.2g} below {threshold:.2g} "
                         f"for {held} steps: gradients vanished", evidence,
                         key=f"vanishing/{net}",
                         message_zh=f"{net} 梯度范数连续 {held} 步低于 {threshold:.2g}：梯度消失")

    def _dominance(self, layers: dict[str, float], step: int) -> Condition | None:
        cfg = self.config
        finite = {k: v for k, v in layers.items() if np.isfinite(v)}
        if len(finite) < 3:
            self._layer.update(False, step)
            return None
        med = median(list(finite.values()))
        top = max(finite, key=finite.get)
        ratio = finite[top] / med if med > 0 else float("inf")
        held = self._layer.update(ratio > cfg.layer_ratio, step)
        if held < cfg.layer_steps:
            return None
        group = top.removeprefix("grad/norm/layer/")
        evidence = {"layer": group, "grad_norm": finite[top], "median_layer_norm": med,
                    "ratio": ratio, "threshold": cfg.layer_ratio, "steps": held,
                    "signal": "layer grad norm", "onset_step": self._layer.onset}
        return Condition("orange", f"layer group {group!r} has gradients {ratio:.0f}× the median "
                         f"group for {held} steps", evidence, key="layer",
                         message_zh=f"层组 {group} 的梯度为其他层中位数的 {ratio:.0f} 倍")


def _tier(held: int, cfg: GradientsConfig, large: bool, bad: bool) -> str:
    """An explosion's tier: red when ``bad`` in its own units (≥ ``severe_ratio``× the typical
    magnitude; a loss also ≥ ``loss_abs``) or held ``persist_steps``; orange when held
    ``orange_steps`` or ``large`` (≥ ``severe_ratio``× but small in absolute units); yellow for
    one step of 10–100× the usual size, which the run may recover from."""
    if bad or held >= cfg.persist_steps:
        return "red"
    if large or held >= cfg.orange_steps:
        return "orange"
    return "yellow"
