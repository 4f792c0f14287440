"""Rank heartbeat lost: one data-parallel rank stopped sending heartbeats (issue 13; 001 Q25 for
the single-process case).

Failure mode: a rank is dead (killed by the OOM killer, a crashed node, a lost container) or
frozen (a hung kernel, a deadlocked data loader, a stopped process). The next collective then
blocks every other rank until the backend's timeout (minutes to half an hour); the run looks hung
and ``stall``'s heartbeat only says that no step arrives, not which rank is gone.
Signal: ``dist/heartbeat_age_s/rank/<r>`` — seconds since rank <r>'s last heartbeat, as rank 0's
monitor sees it when it logs the step — against a limit of max(``floor_s``, ``step_multiple`` ×
the median step time of the last ``window`` steps). The step time is the slowest rank's
``dist/step_s/rank/<r>``, or the wall time between logged steps when that is missing. Between
steps (the group blocked in a collective logs none), :meth:`RankHeartbeat.tick` reads the ages
from a monitor the trainer attaches with :meth:`RankHeartbeat.attach_monitor`, so the finding
names the missing rank while the others wait.
Default thresholds: age > max(30 s, 5 × the median step time) → red (key ``rank/<r>``): a person
has to look (restart the group from the last checkpoint). Healthy ages are below one heartbeat
period plus one step.
Practical significance: red when a rank's heartbeat is older than max(30 s, 5 × the median step
time): the rank has missed about five steps, and the effect persists — the group blocks at its next
collective until the backend's timeout, so a person has to look. No z-score: the limit follows the
run's own step time, with the 30 s floor for fast steps.
Scale assumptions: the limit follows the run's own step time (5 steps), with 30 s as a floor so
that fast steps and a slow heartbeat period do not alarm; raise ``floor_s`` when the trainer
beats rarely.
False positives: a rank busy in one very long phase whose heartbeat thread is starved (a GIL held
by a long C call); a paused run (the trainer resets its heartbeat clock on pause); clock jumps on
the host.
Fix: find the rank's process (``torchrun`` logs, ``dmesg`` for the OOM killer, the node's health);
restart the whole group from the last checkpoint (``rlcockpit train --resume latest``); a
shorter collective timeout (``torch.distributed.init_process_group(timeout=...)``) makes a lost
rank fail the group fast instead of hanging it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rlcockpit.config import Config, option
from rlcockpit.diagnostics.base import SKIPPED, Condition, Detector, StepView
from rlcockpit.diagnostics.detectors._ranks import per_rank, ranks_logged
from rlcockpit.diagnostics.registry import register
from rlcockpit.diagnostics.windows import Window, median

Ages = Callable[[], Mapping[int, float]]


@dataclass(frozen=True)
class RankHeartbeatConfig(Config):
    floor_s: float = option(30.0, help="Red when a rank's heartbeat is older than this many "
                            "seconds ...", range=(0.0, 1e9))
    step_multiple: float = option(5.0, help="... and older than this × the median step time.",
                                  range=(0.0, 1e6))
    window: int = option(20, help="Steps whose median step time scales the limit.",
                         range=(1, 100000))


@register
class RankHeartbeat(Detector):
    name = "rank_heartbeat"
    family = "distributed"
    reads = ("dist/heartbeat_age_s/", "dist/step_s/")
    patterns = ("heartbeat_lost",)
    signal = "rank heartbeat"
    Config = RankHeartbeatConfig

    @classmethod
    def able(cls, names: frozenset[str], samples: bool) -> bool:
        return ranks_logged(names, "heartbeat_age_s") >= 1

    def __init__(self, config: RankHeartbeatConfig | None = None) -> None:
        super().__init__(config)
        self._steps = Window(self.config.window)  # step durations, seconds
        self._last_wall: float | None = None
        self._monitor: Ages | None = None

    def attach_monitor(self, ages: Ages) -> None:
        """Let :meth:`tick` read the ranks' heartbeat ages between steps: ``ages()`` returns
        ``{rank: seconds since its last heartbeat}`` now (the trainer's rank-0 monitor)."""
        self._monitor = ages

    def update(self, view: StepView) -> list[Condition] | object:
        self._learn_step_time(view)
        ages = per_rank(view, "heartbeat_age_s")
        if not ages:
            return SKIPPED
        return self._judge(ages, view.step)

    def tick(self, wall_time: float, last_step_wall: float | None) -> list[Condition] | None:
        if self._monitor is None:
            return None
        try:
            ages = {int(r): float(a) for r, a in self._monitor().items()}
        except (TypeError, ValueError, RuntimeError):  # a monitor that went away: no verdict
            return None
        return self._judge(ages, None) or None

    def limit(self) -> float:
        """Seconds without a heartbeat after which a rank is lost."""
        cfg = self.config
        typical = median(self._steps.values) if len(self._steps) else 0.0
        return max(cfg.floor_s, cfg.step_multiple * typical)

    def _learn_step_time(self, view: StepView) -> None:
        steps = per_rank(view, "step_s")
        if steps:
            self._steps.push(max(steps.values()), view.step)
        elif view.wall_time and self._last_wall is not None and view.wall_time > self._last_wall:
            self._steps.push(view.wall_time - self._last_wall, view.step)
        self._last_wall = view.wall_time or self._last_wall

    def _judge(self, ages: Mapping[int, float], step: int | None) -> list[Condition]:
        limit = self.limit()
        typical = median(self._steps.values) if len(self._steps) else None
        found = []
        for rank, age in sorted(ages.items()):
            if not age > limit:  # NaN never alarms
                continue
            evidence = {"rank": rank, "heartbeat_age_s": age, "limit_s": limit,
                        "median_step_s": typical, "floor_s": self.config.floor_s,
                        "signal": "rank heartbeat"}
            if step is not None:
                evidence["onset_step"] = step
            found.append(Condition(
                "red", f"rank {rank} stopped sending heartbeats: the last one is {age:.0f} s old "
                f"(limit {limit:.0f} s); the group will hang at its next collective", evidence,
                key=f"rank/{rank}",
                message_zh=f"rank {rank} 已停止发送心跳：最后一次心跳在 {age:.0f} 秒前"
                           f"（上限 {limit:.0f} 秒）；进程组将在下一次集合通信处卡住"))
        return found
