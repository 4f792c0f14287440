"""The one alias table: other trainers' metric keys -> rlcockpit catalog names (DESIGN.md §4).

Each row says where the foreign key is logged (file / function of the source project) and, when the
foreign quantity is not exactly the catalog quantity, a short note that says how it differs. A key
that has no alias is never dropped: it is kept as ``import/<source>/<original key>`` so it stays
visible and is clearly marked as foreign.

Only aliases whose meaning matches are listed. Look-alikes that measure something else are kept
under ``import/`` on purpose, e.g. TRL PPO's ``objective/entropy`` (a per-sequence sum of
``-logprob``, not the mean token entropy) or verl's ``critic/rewards/mean`` (score minus the
in-reward KL penalty).

Keys are matched as logged and, for loggers that add a prefix, also without it: the Hugging Face
``Trainer`` TensorBoard/W&B callbacks rewrite ``x`` to ``train/x`` and ``eval_x`` to ``eval/x``
(transformers ``integrations.integration_utils.rewrite_logs``); OpenRLHF writes ``train/<k>``
(``openrlhf/trainer/ppo_trainer.py``, ``save_logs_and_checkpoints``).

A trainer no table knows is mapped by its user (``rlcockpit import --map KEY=catalog/name``,
:mod:`rlcockpit.integrations.keymap`); that map wins over this table in :func:`rename_keys`.

``python -m rlcockpit.integrations.aliases`` prints the Markdown table of docs/import_export.md;
``--update docs/import_export.md`` rewrites the generated part of that file.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache

SOURCES = ("trl-grpo", "trl-ppo", "verl", "openrlhf")
NATIVE_SOURCE = "rlcockpit"  # files rlcockpit exported itself: names are kept verbatim
UNKNOWN_SOURCE = "unknown"  # no alias table matched any key
IMPORT_PREFIX = "import/"

# Where each source's keys are logged (module paths of the source projects; versions read).
SOURCE_ORIGINS = {
    "trl-grpo": "TRL 1.16 `trl/trainer/grpo_trainer.py`, logged through transformers `Trainer.log`",
    "trl-ppo": "TRL 1.12 `trl/experimental/ppo/ppo_trainer.py` (`train`), through `Trainer.log`",
    "verl": "verl `verl/trainer/ppo/` and `verl/workers/`, through `verl/utils/tracking.py`",
    "openrlhf": "OpenRLHF `openrlhf/trainer/`, through `ppo_trainer.py` `save_logs_and_checkpoints`",
}
_GRPO_GEN = "`_generate` / `_generate_and_score_completions`"
_GRPO_LOSS = "`_compute_loss`"
_HF = "transformers `Trainer` (`_maybe_log_save_evaluate`)"
_PPO = "`PPOTrainer.train`"
_VERL_DATA = "`metric_utils.py` `compute_data_metrics`"
_VERL_TIME = "`metric_utils.py` `compute_timing_metrics`"
_VERL_ACTOR = "`workers/actor/dp_actor.py` `update_policy`"
_VERL_CRITIC = "`workers/critic/dp_critic.py` `update_critic`"
_VERL_WORKER = "`workers/fsdp_workers.py` `update_actor` / `update_critic`"
_VERL_KL = "`ray_trainer.py` `apply_kl_penalty`"
_ORLHF_ACTOR = "`ray/ppo_actor.py` `training_step`"
_ORLHF_CRITIC = "`ray/ppo_critic.py` `training_step`"
_ORLHF_EXP = "`ppo_utils/experience_maker.py` (experience `info`)"

@dataclass(frozen=True)
class Alias:
    """``key`` (as the source logs it) means the catalog metric ``target``.

    A ``{component}`` placeholder in ``key`` and ``target`` makes a pattern row, e.g. TRL's
    ``rewards/<reward function>/mean`` -> ``reward/<component>/mean``.
    """

    source: str
    key: str
    target: str
    origin: str
    note: str = ""

    @property
    def is_pattern(self) -> bool:
        return "{component}" in self.key


ALIASES: tuple[Alias, ...] = (
    # --- TRL GRPOTrainer -------------------------------------------------------------------
    Alias("trl-grpo", "reward", "reward/mean", _GRPO_GEN, "mean of the weighted sum of reward functions"),
    Alias("trl-grpo", "reward_std", "reward/std", _GRPO_GEN,
          "std over the batch in TRL 1.x; older releases logged the mean within-group std"),
    Alias("trl-grpo", "frac_reward_zero_std", "reward/frac_zero_std_groups", _GRPO_GEN),
    Alias("trl-grpo", "rewards/{component}/mean", "reward/{component}/mean", _GRPO_GEN,
          "one per reward function, named after the function"),
    Alias("trl-grpo", "rewards/{component}", "reward/{component}/mean", _GRPO_GEN,
          "older TRL (0.14-0.15): the same per-function mean, logged without `/mean`"),
    Alias("trl-grpo", "kl", "kl/token_mean", _GRPO_LOSS,
          "k3 estimator vs the reference, mean over completion tokens (older TRL averaged per "
          "sequence first)"),
    Alias("trl-grpo", "entropy", "policy/entropy", _GRPO_LOSS),
    Alias("trl-grpo", "clip_ratio/region_mean", "policy/clip_frac", _GRPO_LOSS,
          "only tokens where the clip is active (ratio out of range on the advantage's side)"),
    Alias("trl-grpo", "clip_ratio", "policy/clip_frac", _GRPO_LOSS, "older TRL and the Liger loss"),
    Alias("trl-grpo", "completions/mean_length", "response/length_mean", _GRPO_GEN),
    Alias("trl-grpo", "completion_length", "response/length_mean", _GRPO_GEN,
          "older TRL (0.14-0.15) name of `completions/mean_length`"),
    Alias("trl-grpo", "completions/max_length", "response/length_max", _GRPO_GEN),
    Alias("trl-grpo", "completions/clipped_ratio", "response/truncated_frac", _GRPO_GEN,
          "share of completions that hit the length limit without EOS"),
    Alias("trl-grpo", "policy_loss", "policy/loss", _GRPO_LOSS, "the loss before the entropy bonus (newer TRL)"),
    Alias("trl-grpo", "loss", "policy/loss", _HF,
          "the total loss (surrogate + beta * KL); GRPO has no critic. Used when `policy_loss` is absent"),
    Alias("trl-grpo", "entropy_coef", "policy/entropy_coef", _GRPO_LOSS),
    Alias("trl-grpo", "grad_norm", "grad/norm/actor", _HF),
    Alias("trl-grpo", "learning_rate", "optim/lr/actor", _HF),
    Alias("trl-grpo", "eval_reward", "eval/reward/mean", _HF),
    # --- TRL PPOTrainer (experimental PPO) ---------------------------------------------------
    Alias("trl-ppo", "objective/kl", "kl/mean", _PPO, "sum of token KL per sequence, averaged"),
    Alias("trl-ppo", "objective/scores", "reward/mean", _PPO, "reward-model score before the KL penalty"),
    Alias("trl-ppo", "policy/entropy_avg", "policy/entropy", _PPO),
    Alias("trl-ppo", "policy/approxkl_avg", "policy/approx_kl", _PPO, "k2 estimator (0.5 * logratio^2)"),
    Alias("trl-ppo", "policy/clipfrac_avg", "policy/clip_frac", _PPO),
    Alias("trl-ppo", "loss/policy_avg", "policy/loss", _PPO),
    Alias("trl-ppo", "loss/value_avg", "value/loss", _PPO),
    Alias("trl-ppo", "val/clipfrac_avg", "value/clip_frac", _PPO),
    Alias("trl-ppo", "val/ratio", "policy/ratio_mean", _PPO),
    Alias("trl-ppo", "lr", "optim/lr/actor", _PPO),
    Alias("trl-ppo", "eps", "perf/samples_per_s", _PPO, "episodes (prompt + completion) per second"),
    # --- verl ----------------------------------------------------------------------------
    Alias("verl", "actor/pg_loss", "policy/loss", _VERL_ACTOR),
    Alias("verl", "actor/entropy", "policy/entropy", _VERL_ACTOR),
    Alias("verl", "actor/entropy_loss", "policy/entropy", _VERL_ACTOR,
          "older verl: despite the name it IS the masked mean token entropy (the actor loss "
          "subtracts entropy_coeff times it); newer verl logs the same value as `actor/entropy`"),
    Alias("verl", "actor/ppo_kl", "policy/approx_kl", _VERL_ACTOR, "k1 estimator (old - new logprob)"),
    Alias("verl", "actor/pg_clipfrac", "policy/clip_frac", _VERL_ACTOR),
    Alias("verl", "actor/grad_norm", "grad/norm/actor", _VERL_ACTOR),
    Alias("verl", "actor/kl_loss", "kl/token_mean", _VERL_ACTOR, "GRPO-style KL loss, aggregated by loss_agg_mode"),
    Alias("verl", "actor/kl_coef", "kl/coef", _VERL_ACTOR, "KL-loss coefficient"),
    Alias("verl", "actor/reward_kl_penalty", "kl/token_mean", _VERL_KL,
          "KL-in-reward variant: token KL averaged per sequence, then over the batch"),
    Alias("verl", "actor/reward_kl_penalty_coeff", "kl/coef", _VERL_KL, "KL-in-reward variant"),
    Alias("verl", "actor/lr", "optim/lr/actor", _VERL_WORKER),
    Alias("verl", "critic/vf_loss", "value/loss", _VERL_CRITIC),
    Alias("verl", "critic/vf_clipfrac", "value/clip_frac", _VERL_CRITIC),
    Alias("verl", "critic/grad_norm", "grad/norm/critic", _VERL_CRITIC),
    Alias("verl", "critic/lr", "optim/lr/critic", _VERL_WORKER),
    Alias("verl", "critic/vf_explained_var", "value/explained_var", _VERL_DATA),
    Alias("verl", "critic/values/mean", "value/mean", _VERL_DATA),
    Alias("verl", "critic/vpred_mean", "value/mean", _VERL_CRITIC,
          "the critic's predictions during the update (mean over minibatches), not at rollout; "
          "used when `critic/values/mean` is absent"),
    Alias("verl", "critic/score/mean", "reward/mean", _VERL_DATA,
          "sequence score before the in-reward KL penalty (`critic/rewards/*` is after it)"),
    Alias("verl", "critic/score/max", "reward/max", _VERL_DATA),
    Alias("verl", "critic/score/min", "reward/min", _VERL_DATA),
    Alias("verl", "critic/advantages/mean", "advantage/mean", _VERL_DATA,
          "after whitening; `critic/advantages/max|min` have no catalog name and stay under import/"),
    Alias("verl", "critic/returns/mean", "returns/mean", _VERL_DATA),
    Alias("verl", "response_length/mean", "response/length_mean", _VERL_DATA),
    Alias("verl", "response_length/max", "response/length_max", _VERL_DATA),
    Alias("verl", "response_length/clip_ratio", "response/truncated_frac", _VERL_DATA),
    Alias("verl", "timing_s/gen", "time/rollout_s", _VERL_TIME),
    Alias("verl", "timing_s/adv", "time/advantage_s", _VERL_TIME),
    Alias("verl", "perf/max_memory_allocated_gb", "sys/gpu_mem_gb", _VERL_WORKER, "peak allocated memory"),
    # --- OpenRLHF ------------------------------------------------------------------------
    Alias("openrlhf", "policy_loss", "policy/loss", _ORLHF_ACTOR),
    Alias("openrlhf", "actor_lr", "optim/lr/actor", _ORLHF_ACTOR),
    Alias("openrlhf", "entropy_loss", "policy/entropy", _ORLHF_ACTOR, "the masked mean entropy, despite its name"),
    Alias("openrlhf", "ppo_clip_ratio", "policy/clip_frac", _ORLHF_ACTOR),
    Alias("openrlhf", "ppo_kl", "policy/approx_kl", _ORLHF_ACTOR),
    Alias("openrlhf", "critic_loss", "value/loss", _ORLHF_CRITIC),
    Alias("openrlhf", "values", "value/mean", _ORLHF_CRITIC),
    Alias("openrlhf", "critic_lr", "optim/lr/critic", _ORLHF_CRITIC),
    Alias("openrlhf", "critic_grad_norm", "grad/norm/critic", _ORLHF_CRITIC),
    Alias("openrlhf", "reward", "reward/mean", _ORLHF_EXP),
    Alias("openrlhf", "return", "returns/mean", _ORLHF_EXP),
    Alias("openrlhf", "response_length", "response/length_mean", _ORLHF_EXP),
    Alias("openrlhf", "kl", "kl/token_mean", _ORLHF_EXP, "per-sequence token mean of the KL vs the reference"),
)


def _check_sources() -> None:
    unknown = ({a.source for a in ALIASES} | set(SOURCE_ORIGINS)) ^ set(SOURCES)
    if unknown:
        raise ValueError(f"alias rows name unknown sources {sorted(unknown)}; known: {SOURCES}")


_check_sources()


@cache
def _exact(source: str) -> dict[str, str]:
    table: dict[str, str] = {}
    for row in ALIASES:
        if row.source == source and not row.is_pattern:
            table.setdefault(row.key, row.target)
    return table


@cache
def _patterns(source: str) -> tuple[tuple[re.Pattern[str], str], ...]:
    out = []
    for row in ALIASES:
        if row.source == source and row.is_pattern:
            head, tail = row.key.split("{component}")
            regex = re.compile(re.escape(head) + r"(?P<component>[^/]+)" + re.escape(tail) + r"\Z")
            out.append((regex, row.target))
    return tuple(out)


def _candidates(key: str) -> list[str]:
    """``key`` as logged, then without a logger's ``train/`` prefix, then ``eval/x`` as ``eval_x``."""
    out = [key]
    if key.startswith("train/"):
        out.append(key[len("train/"):])
    if key.startswith("eval/"):
        out.append("eval_" + key[len("eval/"):])
    return out


def _lookup(key: str, source: str) -> str | None:
    for candidate in _candidates(key):
        target = _exact(source).get(candidate)
        if target is not None:
            return target
        for regex, template in _patterns(source):
            match = regex.match(candidate)
            if match:
                name = template.replace("{component}", match["component"])
                if is_catalog_name(name):
                    return name
    return None


def is_catalog_name(name: str) -> bool:
    """True when ``name`` is a metric of the catalog (templated names included)."""
    from rlcockpit.metrics.catalog import is_catalog_name as _is_catalog_name

    return bool(_is_catalog_name(name))


def to_catalog(key: str, source: str | None = None) -> str | None:
    """The catalog name a foreign ``key`` means, or None when there is no alias.

    ``source`` is one of :data:`SOURCES`; ``None`` searches every source table in that order and
    returns the first match. A key that already is a catalog name is returned unchanged.
    """
    if source is not None and source not in SOURCES:
        raise ValueError(f"unknown alias source {source!r}; choose one of {', '.join(SOURCES)}")
    for name in (source,) if source else SOURCES:
        target = _lookup(key, name)
        if target is not None:
            return target
    return key if is_catalog_name(key) else None


def import_name(key: str, source: str) -> str:
    """The name a foreign key is stored under: its alias, itself when it is a catalog name or an
    earlier import's ``import/...`` name, else ``import/<source>/<key>``."""
    if key.startswith(IMPORT_PREFIX) or source == NATIVE_SOURCE:
        return key
    target = to_catalog(key, source) if source in SOURCES else (key if is_catalog_name(key) else None)
    return target if target is not None else f"{IMPORT_PREFIX}{source}/{key}"


def _priority(key: str, source: str) -> int:
    """Row index of the alias a key uses; earlier rows win when two keys land on one name."""
    candidates = _candidates(key)
    for index, row in enumerate(ALIASES):
        if row.source != source:
            continue
        if row.key in candidates:
            return index
    return len(ALIASES)


def rename_keys(keys: Iterable[str], source: str,
                user_map: Mapping[str, str] | None = None) -> dict[str, str]:
    """foreign key -> stored name for one step's keys.

    ``user_map`` (foreign key as logged -> catalog name, from ``--map``) is the user's word and
    wins over the alias table. When two keys map to the same catalog name (e.g. verl's
    ``actor/kl_loss`` and ``actor/reward_kl_penalty``), the user's key, then the earlier alias row
    wins and the other key is kept under ``import/<source>/<key>``: no value is lost or silently
    replaced."""
    return dict(_rename(frozenset(keys), source, tuple(sorted((user_map or {}).items()))))


@lru_cache(maxsize=1024)  # consecutive steps of a log almost always carry the same keys
def _rename(keys: frozenset[str], source: str, user_map: tuple[tuple[str, str], ...]
            ) -> tuple[tuple[str, str], ...]:
    mapped = dict(user_map)
    out = [(key, mapped[key]) for key in sorted(keys) if key in mapped]
    used = {name for _, name in out}
    rest = (k for k in keys if k not in mapped)
    for key in sorted(rest, key=lambda k: (_priority(k, source), k)):
        name = import_name(key, source)
        if name in used:
            name = f"{IMPORT_PREFIX}{source}/{key}"
        used.add(name)
        out.append((key, name))
    return tuple(out)


def map_keys(values: Mapping[str, float], source: str,
             user_map: Mapping[str, str] | None = None) -> dict[str, float]:
    """One step's foreign metrics under their stored names (see :func:`rename_keys`)."""
    return {name: values[key] for key, name in rename_keys(values, source, user_map).items()}


def detect_source(keys: Iterable[str]) -> str | None:
    """The source whose alias table knows most of ``keys`` (ties: order of :data:`SOURCES`)."""
    keys = list(keys)
    scores = {s: sum(1 for k in keys if _lookup(k, s) is not None) for s in SOURCES}
    best = max(SOURCES, key=lambda s: scores[s])
    return best if scores[best] > 0 else None


def aliases_markdown() -> str:
    """The alias table as Markdown, one section per source (the generated part of the docs)."""
    lines: list[str] = []
    for source in SOURCES:
        lines += [f"### {source}", "", f"Logged by {SOURCE_ORIGINS[source]}.", "",
                  "| foreign key | catalog name | logged in | note |", "| --- | --- | --- | --- |"]
        for row in ALIASES:
            if row.source == source:
                key = row.key.replace("{component}", "<component>")
                target = row.target.replace("{component}", "<component>")
                lines.append(f"| `{key}` | `{target}` | {row.origin} | {row.note} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


DOC_BEGIN = "<!-- BEGIN GENERATED ALIASES (python -m rlcockpit.integrations.aliases) -->"
DOC_END = "<!-- END GENERATED ALIASES -->"


def render_doc(text: str) -> str:
    """``text`` with the part between the generated-aliases markers replaced by the current table."""
    start, end = text.find(DOC_BEGIN), text.find(DOC_END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {DOC_BEGIN!r} and {DOC_END!r} are missing from the document")
    return text[: start + len(DOC_BEGIN)] + "\n" + aliases_markdown() + text[end:]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--update"] and len(argv) == 2:
        with open(argv[1], encoding="utf-8") as fh:
            text = fh.read()
        with open(argv[1], "w", encoding="utf-8") as fh:
            fh.write(render_doc(text))
        return 0
    sys.stdout.write(aliases_markdown())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
