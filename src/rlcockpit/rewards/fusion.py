"""Dynamic fusion weights (seed 000 §3.1): ``final = alpha * rm + beta * rule`` where alpha and beta
are predicted every step by a small LSTM from the last 10 steps of three signals -- the mean
reward-model uncertainty, the rule-trigger rate and the policy entropy. The seed's example: when
the entropy fell sharply the LSTM raised beta from 0.2 to 0.6 and the rules took over.

How it is trained (the seed does not say): by supervised regression on simulated 10-step
histories whose target follows the behaviour the seed describes, :func:`teacher_beta`:

* beta rests at 0.2 (alpha 0.8) on a calm run;
* it rises towards 0.6 as the entropy falls (relative slope; a 3%-per-step fall is the full move),
  as the rules fire more often, and as the reward model grows unsure;
* alpha = 1 - beta (a softmax over two outputs, so the fusion never scales the reward as a whole).

The LSTM is not the teacher in disguise: it reads the raw sequence and learns the mapping; the
tests check it tracks the teacher on held-out histories, that its output moves with each input,
and that it depends on the order of the steps (a falling entropy is not a rising one).
Its weights ship next to the reward model (``fusion.safetensors``), trained by ``rlcockpit world rm``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

BETA_REST, BETA_MAX = 0.2, 0.6  # seed 000 §3.1: beta 0.2 -> 0.6 when the entropy collapsed
FEATURES = ("uncertainty", "rule_rate", "entropy")
FUSION_FILE = "fusion.safetensors"


def features(window: np.ndarray) -> np.ndarray:
    """[T, 3] raw (uncertainty, rule rate, entropy) -> LSTM inputs: uncertainty, rule rate and the
    entropy relative to the window's first step (``H_t / H_0 - 1``), so the level of entropy a
    model happens to have does not matter, its movement does."""
    w = np.asarray(window, dtype=np.float64)
    h0 = w[0, 2] if abs(w[0, 2]) > 1e-6 else 1.0
    return np.stack([w[:, 0], w[:, 1], w[:, 2] / h0 - 1.0], axis=-1)


def teacher_beta(window: np.ndarray) -> float:
    """The target beta of a [T, 3] history (see the module docstring)."""
    f = features(window)
    t = len(f)
    k = max(1, min(3, t // 3))
    slope = (f[-k:, 2].mean() - f[:k, 2].mean()) / max(1, t - k)  # relative entropy change per step
    s_entropy = float(np.clip(-slope / 0.03, 0.0, 1.0))
    s_rule = float(np.clip((f[-3:, 1].mean() - 0.2) / 0.5, 0.0, 1.0))
    s_unc = float(np.clip((f[-3:, 0].mean() - 0.1) / 0.2, 0.0, 1.0))
    s = 1.0 - (1.0 - s_entropy) * (1.0 - 0.5 * s_rule) * (1.0 - 0.5 * s_unc)
    return BETA_REST + (BETA_MAX - BETA_REST) * s


def simulate_histories(n: int, steps: int = 10, seed: int = 0) -> np.ndarray:
    """``n`` random [steps, 3] histories: entropy trending up, flat or collapsing at random rates,
    rule rate and uncertainty drifting, all with noise."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, steps, 3))
    t = np.arange(steps)
    for i in range(n):
        h0 = rng.uniform(0.3, 3.0)
        rel_slope = rng.choice([rng.uniform(-0.06, -0.005), rng.uniform(-0.005, 0.02)])
        out[i, :, 2] = np.maximum(0.01, h0 * (1 + rel_slope * t + rng.normal(0, 0.01, steps)))
        r0, dr = rng.uniform(0, 0.8), rng.uniform(-0.04, 0.06)
        out[i, :, 1] = np.clip(r0 + dr * t + rng.normal(0, 0.03, steps), 0, 1)
        u0, du = rng.uniform(0.0, 0.35), rng.uniform(-0.015, 0.02)
        out[i, :, 0] = np.clip(u0 + du * t + rng.normal(0, 0.01, steps), 0, 1)
    return out


def _lstm_class() -> type:
    import torch

    class FusionLSTM(torch.nn.Module):
        """[B, T, 3] features -> [B, 2] (alpha, beta), a softmax so alpha + beta = 1."""

        def __init__(self, hidden: int = 16) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(len(FEATURES), hidden, batch_first=True)
            self.out = torch.nn.Linear(hidden, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h, _ = self.lstm(x)
            return torch.softmax(self.out(h[:, -1]), dim=-1)

    return FusionLSTM


def build_fusion_lstm(hidden: int = 16, seed: int = 0) -> Any:
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _lstm_class()(hidden)


def train_fusion_lstm(*, n: int = 4000, steps: int = 10, epochs: int = 60, seed: int = 0,
                      hidden: int = 16) -> tuple[Any, dict[str, float]]:
    """Fit the LSTM's beta to :func:`teacher_beta` on simulated histories; returns the model and
    its held-out mean absolute error (``val_mae``) next to a constant predictor's (``const_mae``)."""
    import torch

    hist = simulate_histories(n, steps, seed)
    x = torch.as_tensor(np.stack([features(h) for h in hist]), dtype=torch.float32)
    y = torch.as_tensor([teacher_beta(h) for h in hist], dtype=torch.float32)
    n_val = n // 5
    model = build_fusion_lstm(hidden, seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        perm = torch.randperm(n - n_val, generator=gen) + n_val
        for start in range(0, len(perm), 128):
            idx = perm[start:start + 128]
            loss = torch.mean((model(x[idx])[:, 1] - y[idx]) ** 2)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        pred = model(x[:n_val])[:, 1]
    val_mae = float((pred - y[:n_val]).abs().mean())
    const_mae = float((y[n_val:].mean() - y[:n_val]).abs().mean())
    return model.eval(), {"val_mae": val_mae, "const_mae": const_mae}


def save_fusion(model: Any, out: Path) -> Path:
    from safetensors.torch import save_file

    path = Path(out) / FUSION_FILE
    hidden = model.lstm.hidden_size
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path),
              metadata={"hidden": str(hidden)})
    return path


def load_fusion(path: Path) -> Any:
    from safetensors import safe_open
    from safetensors.torch import load_file

    file = Path(path) / FUSION_FILE
    with safe_open(str(file), framework="pt") as fh:
        hidden = int(fh.metadata()["hidden"])
    model = build_fusion_lstm(hidden)
    model.load_state_dict(load_file(str(file)))
    return model.eval()


class FusionWeights:
    """Per-step (alpha, beta): fixed, or the LSTM over the last ``window`` observed steps.

    ``observe(uncertainty, rule_rate, entropy)`` once per training step (the trainer's DIAGNOSE
    calls it through the reward function); before any step is observed the weights are the
    resting ones (0.8, 0.2); a shorter history than the window is padded in front with its first
    step. Steps with a non-finite signal are skipped.
    """

    def __init__(self, lstm: Any | None, window: int = 10, fixed: tuple[float, float] = (1.0, 0.0)) -> None:
        self.lstm = lstm
        self.fixed = fixed
        self.history: deque[tuple[float, float, float]] = deque(maxlen=window)

    def observe(self, uncertainty: float, rule_rate: float, entropy: float) -> None:
        row = (float(uncertainty), float(rule_rate), float(entropy))
        if all(math.isfinite(v) for v in row):
            self.history.append(row)

    def reset(self) -> None:
        self.history.clear()

    def state_dict(self) -> dict[str, Any]:
        """The observed history (a checkpoint keeps it, so a resumed run's fusion goes on)."""
        return {"history": [list(row) for row in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history.clear()
        for row in state.get("history", ()):
            self.observe(*row)

    def current(self) -> tuple[float, float]:
        if self.lstm is None:
            return self.fixed
        if not self.history:
            return 1.0 - BETA_REST, BETA_REST
        rows = list(self.history)
        # fewer steps than the window: the first one repeated in front ("no movement seen yet"),
        # so the LSTM always reads the window length it was trained on
        return predict(self.lstm, [rows[0]] * (self.history.maxlen - len(rows)) + rows)


def predict(lstm: Any, window: Sequence[Sequence[float]]) -> tuple[float, float]:
    """(alpha, beta) of the LSTM for one [T, 3] raw history."""
    import torch

    x = torch.as_tensor(features(np.asarray(window, dtype=np.float64))[None], dtype=torch.float32)
    with torch.no_grad():
        alpha, beta = lstm(x)[0].tolist()
    return alpha, beta


__all__ = ["BETA_MAX", "BETA_REST", "FEATURES", "FusionWeights", "build_fusion_lstm", "features",
           "load_fusion", "predict", "save_fusion", "simulate_histories", "teacher_beta",
           "train_fusion_lstm"]
