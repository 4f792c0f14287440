"""The typed config loader: YAML + dotted overrides, errors that name the key, value and range."""

from __future__ import annotations

import dataclasses

import pytest

from rlcockpit.config import Config, check, describe, load_config, option, to_dict
from rlcockpit.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class KL(Config):
    coef: float = option(0.05, help="KL penalty coefficient.", range=(0.0, 10.0))
    estimator: str = option("k1", help="Estimator.", choices=("k1", "k2", "k3"))


@dataclasses.dataclass(frozen=True)
class Rollout(Config):
    n_samples: int = option(1, help="Samples per prompt.", range=(1, 64))
    stop: tuple[str, ...] = option(default_factory=tuple, help="Stop strings.")


@dataclasses.dataclass(frozen=True)
class Top(Config):
    algo: str = option("ppo", help="Algorithm.", choices=("ppo", "grpo"))
    seed: int = option(0, help="Seed.", range=(0, None))
    kl: KL = option(default_factory=KL, help="KL settings.")
    rollout: Rollout = option(default_factory=Rollout, help="Rollout settings.")
    weights: dict[str, float] = option(default_factory=dict, help="Reward weights.")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.algo != "grpo" or self.rollout.n_samples >= 2, "rollout.n_samples",
              self.rollout.n_samples, "GRPO needs at least 2 samples per prompt; set rollout.n_samples=4")


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("seed: 1\nkl:\n  coef: 0.1\nweights: {format: 0.5}\n")
    cfg = load_config(Top, path, ["kl.coef=0.2", "seed=3", "rollout.stop=[END, '##']"])
    assert cfg.seed == 3 and cfg.kl.coef == 0.2 and cfg.kl.estimator == "k1"
    assert cfg.rollout.stop == ("END", "##") and cfg.weights == {"format": 0.5}
    assert to_dict(cfg)["kl"] == {"coef": 0.2, "estimator": "k1"}


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("kl.cof=1", "unknown config key 'kl.cof'; did you mean 'kl.coef'?"),
        ("kl.coef=abc", "kl.coef='abc' has the wrong type; expected a number"),
        ("kl.coef=20", "kl.coef=20.0 is out of range; allowed: [0.0, 10.0]"),
        ("kl.coef=.nan", "kl.coef=nan must be a finite number"),
        ("kl.estimator=k4", "kl.estimator='k4' is not allowed; choose one of: 'k1', 'k2', 'k3'"),
        ("seed=1.5", "seed=1.5 has the wrong type; expected an integer"),
        ("seed=-1", "seed=-1 is out of range; allowed: [0, +inf]"),
        ("kl=3", "kl must be a mapping of sub-keys"),
        ("algo=grpo", "rollout.n_samples=1: GRPO needs at least 2 samples per prompt"),
        ("rollout.n_samples=true", "rollout.n_samples=True has the wrong type"),
        ("noequals", "must look like key.sub=value"),
    ],
)
def test_bad_values_name_key_value_and_range(override, needle):
    with pytest.raises(ConfigError) as info:
        load_config(Top, None, [override])
    assert needle in info.value.message


def test_yaml_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(Top, tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: [1\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(Top, bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_config(Top, listy)


def test_describe_lists_every_leaf_with_help_and_range():
    rows = {key: (tp, default, text) for key, tp, default, text in describe(Top)}
    assert set(rows) == {"algo", "seed", "kl.coef", "kl.estimator", "rollout.n_samples",
                         "rollout.stop", "weights"}
    assert rows["kl.coef"][1] == 0.05 and "Range [0.0, 10.0]" in rows["kl.coef"][2]
    assert "One of: k1, k2, k3" in rows["kl.estimator"][2]
