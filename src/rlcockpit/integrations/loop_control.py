"""Control for any loop (docs/integrations.md): approved tickets and commands, taken by a
hand-written training loop (or a TRL callback) at its own step boundary.

    run = rlcockpit.init(..., live_params={"lr": LiveParam(1e-3, lo=1e-5, hi=1e-1)})
    for step in range(steps):
        ...                                   # one training step, logged with run.log / log_samples
        run.commit(step)
        for change in run.pending_changes(step):   # the boundary after `step`
            if change.name == "lr":
                set_lr(optimizer, change.value)
                change.applied()
            else:
                change.failed(f"this loop cannot change {change.name}")
        if run.stop_requested:
            break

What the loop sees: parameter changes (``change.kind == "param"``) and the commands it must carry
out itself (``checkpoint``, ``rollback``). Pause, resume and stop are handled here: a pause blocks
inside ``pending_changes`` (polling the store) until a resume or stop is approved; a stop sets
``run.stop_requested``.

Like our trainer (``trainer/control_link.py``) a ticket is marked ``applied`` in the store *before*
the loop sees it (compare-and-set: a ticket cancelled in the meantime is never handed over);
``change.failed(reason)`` turns it into ``failed``, and a change the loop neither applied nor failed
is failed at the next boundary. The effect of an applied parameter change is measured
``effect_steps`` later: KS test of the per-sample training rewards of the ``effect_steps`` steps
before vs after the boundary (the logged ``reward/mean`` of those steps when no samples are
logged), and the KL / entropy / reward windows.

A boundary asks the store for approved tickets when its tickets signal changed since the last
question that found none (a SQLite store: one ``stat`` of ``<store>-tickets``, which every process
appends to after a ticket change), and at least every ``QUIET_POLL_S`` regardless.

Fail soft: a store error is logged and the tickets stay queued for a later boundary.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rlcockpit.control import Channel, ControlConfig
from rlcockpit.control.effect import WINDOW_METRICS, reward_effect, window_effect
from rlcockpit.errors import ConfigError
from rlcockpit.records import AuditEntry, TicketRecord

log = logging.getLogger("rlcockpit.integrations.loop_control")
LOOP_COMMANDS = ("checkpoint", "rollback")  # carried out by the loop itself
MAX_REWARDS_PER_STEP = 512  # bounds the memory the effect measurement holds per step
MAX_WINDOW_REWARDS = 4096  # and the size of the reward lists kept in a ticket's effect
QUIET_POLL_S = 1.0  # the store is asked for approved tickets at least this often, signal or not
UNACKNOWLEDGED = "the training loop neither applied nor failed it (call change.applied() or change.failed(reason))"


@dataclass(frozen=True)
class LiveParam:
    """A knob a loop lets operators change at run time: its current value and allowed range."""

    value: float | int
    lo: float
    hi: float
    help: str = ""
    metric: str = ""  # the catalog metric that shows it, e.g. optim/lr/actor (tickets may name it)

    def __post_init__(self) -> None:
        for field in ("value", "lo", "hi"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"live parameter {field}={v!r} must be a finite number",
                                  details={"key": field})
        if not self.lo <= self.value <= self.hi:
            raise ConfigError(f"live parameter value {self.value!r} is outside its range [{self.lo}, {self.hi}]; "
                              "widen lo / hi or change the value", details={"key": "value"})

    @property
    def type(self) -> str:
        return "int" if isinstance(self.value, int) else "float"

    def spec(self) -> dict[str, Any]:
        return {"type": self.type, "lo": self.lo, "hi": self.hi, "help": self.help, "metric": self.metric}


def live_params_of(params: Mapping[str, Any] | None) -> dict[str, LiveParam]:
    """``{name: LiveParam | (value, lo, hi)}`` -> ``{name: LiveParam}``; ConfigError with the fix."""
    out: dict[str, LiveParam] = {}
    for name, p in dict(params or {}).items():
        if not isinstance(name, str) or not name or not name.replace("_", "").isalnum():
            raise ConfigError(f"live parameter name {name!r} must be letters, digits and underscores "
                              "(e.g. lr, kl_coef)", details={"key": str(name)})
        if isinstance(p, (tuple, list)) and len(p) == 3:
            p = LiveParam(*p)
        if not isinstance(p, LiveParam):
            raise ConfigError(f"live parameter {name!r}: give LiveParam(value, lo=, hi=) or (value, lo, hi), "
                              f"got {p!r}", details={"key": name})
        out[name] = p
    return out


class Change:
    """One approved ticket handed to the loop: acknowledge it with :meth:`applied` or :meth:`failed`."""

    def __init__(self, link: LoopControl, ticket: TicketRecord, step: int) -> None:
        self._link, self.ticket, self.step = link, ticket, step
        self.state = "pending"

    kind = property(lambda self: self.ticket.kind)  # "param" or "command"
    name = property(lambda self: self.ticket.target)  # the parameter, or the command
    value = property(lambda self: self.ticket.value)
    previous = property(lambda self: self.ticket.previous)
    ticket_id = property(lambda self: self.ticket.ticket_id)
    reason = property(lambda self: self.ticket.reason)
    requested_by = property(lambda self: self.ticket.requested_by)

    def applied(self, *, checkpoint: str | None = None) -> None:
        """The loop carried the change out (``checkpoint``: the state saved with it, if any)."""
        self._link.acknowledge(self, checkpoint)

    def failed(self, reason: str) -> None:
        """The loop could not carry the change out; the ticket becomes ``failed`` with ``reason``."""
        self._link.fail(self, str(reason or "failed"))

    def __repr__(self) -> str:
        return f"Change({self.kind} {self.name}={self.value!r}, ticket {self.ticket_id}, {self.state})"


class LoopControl:
    """The control link of a :class:`~rlcockpit.telemetry.Run` driven by someone else's loop."""

    def __init__(self, run: Any, store: Any, params: Mapping[str, LiveParam], cfg: ControlConfig) -> None:
        self.run, self.store, self.cfg = run, store, cfg
        self.params = dict(params)
        self.values: dict[str, Any] = {n: p.value for n, p in self.params.items()}
        self.channel = Channel(store, run.run_id)
        self.paused = self.stop_requested = False
        self._metrics: dict[int, dict[str, float]] = {}
        self._rewards: dict[int, list[float]] = {}
        self._awaiting: list[TicketRecord] = []
        self._outstanding: list[Change] = []
        self._step = int(run.info.last_step or 0)
        self._published: dict[str, Any] | None = None
        self._tickets_version = getattr(store, "tickets_version", None)  # the store's tickets signal, if any
        self._quiet_version: Any = None  # the signal when the store last had no approved ticket
        self._asked_at = 0.0

    def start(self) -> None:
        """Publish the live parameters (setup: a store error raises)."""
        self._publish(self._step, "start")

    # ------------------------------------------------------------------ what the run observes

    def observe(self, step: int, metrics: Mapping[str, Any]) -> None:
        row = self._metrics.setdefault(int(step), {})
        for name in WINDOW_METRICS:
            v = metrics.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                row[name] = float(v)

    def observe_samples(self, step: int, samples: list[Any]) -> None:
        rewards = self._rewards.setdefault(int(step), [])
        for s in samples[:MAX_REWARDS_PER_STEP - len(rewards)]:
            r = s.get("reward") if isinstance(s, Mapping) else getattr(s, "reward", None)
            if isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r):
                rewards.append(float(r))

    # ------------------------------------------------------------------ the boundary

    def pending(self, step: int) -> Iterator[Change]:
        """The approved tickets at the boundary after ``step``; blocks while paused."""
        self._step = step = int(step)
        self._soft("settling the last boundary", self._settle, step)
        yield from self._take(step)
        if self.paused:
            self.run.hand_over()  # what the loop holds in run.deferred() reaches the store while it waits
        while self.paused and not self.stop_requested and not self.run.closed:
            time.sleep(self.cfg.poll_interval_s)
            yield from self._take(step)
        self._soft("publishing the live parameters", self._publish, step, "live")
        self._prune(step)

    def _approved(self) -> list[TicketRecord]:
        """The run's approved tickets. The store's tickets signal (``tickets_version``: one ``stat``)
        saves the query while no ticket changed since a query that found none — at most
        ``QUIET_POLL_S``: the store is still asked that often, for a writer that does not signal."""
        version = self._tickets_version() if self._tickets_version is not None else None
        now = time.monotonic()
        if version is not None and version == self._quiet_version and now - self._asked_at < QUIET_POLL_S:
            return []
        tickets = self._soft("reading approved tickets", self.channel.approved)
        self._quiet_version = version if tickets == [] else None  # found some, or failed: ask again next time
        self._asked_at = now
        return tickets or []

    def _take(self, step: int) -> Iterator[Change]:
        tickets = self._approved()
        for ticket in sorted(tickets, key=lambda t: t.ticket_id):  # in the order they were requested
            if self.stop_requested:
                return
            change = self._soft(f"taking ticket {ticket.ticket_id}", self._hand_over, ticket, step)
            if change is None:
                continue
            self._outstanding.append(change)
            yield change
            if change.state == "pending":
                self.fail(change, UNACKNOWLEDGED)

    def _hand_over(self, ticket: TicketRecord, step: int) -> Change | None:
        """Mark the ticket applied (compare-and-set) and return it for the loop, or carry out pause /
        resume / stop here (None). A parameter this run does not publish fails at once."""
        if ticket.kind == "param" and ticket.target not in self.params:
            self.channel.mark_failed(ticket, f"{ticket.target!r} is not a live parameter of this loop")
            return None
        if ticket.kind == "command" and ticket.target not in (*LOOP_COMMANDS, "pause", "resume", "stop"):
            self.channel.mark_failed(ticket, f"unknown command {ticket.target!r}")
            return None
        before = self._window_rewards(step - self.cfg.effect_steps, step) if ticket.kind == "param" else None
        done = self.channel.mark_applied(
            ticket, boundary_step=step, checkpoint=None,
            previous=self.values.get(ticket.target) if ticket.kind == "param" else None,
            effect={"before": {"rewards": before[1], "source": before[0]}} if before else None)
        if done is None:  # cancelled in the meantime: nothing changes
            return None
        if ticket.kind == "command" and ticket.target not in LOOP_COMMANDS:
            self._command(done, step)
            return None
        return Change(self, done, step)

    def _command(self, ticket: TicketRecord, step: int) -> None:
        if ticket.target == "pause":
            self.paused, kind = True, "paused"
        elif ticket.target == "resume":
            self.paused, kind = False, "resumed"
        else:
            self.stop_requested, kind = True, "stop_requested"
        self.run.event(step, kind, {"reason": ticket.reason, "requested_by": f"ticket:{ticket.ticket_id}"})
        if kind == "paused":
            log.warning("run %s paused at step %d by ticket %d; waiting for resume or stop", self.run.run_id,
                        step, ticket.ticket_id)

    # ------------------------------------------------------------------ acknowledgements

    def acknowledge(self, change: Change, checkpoint: str | None) -> None:
        if change.state != "pending":
            return
        change.state = "applied"
        t = change.ticket
        if checkpoint:
            self.run.checkpoint(change.step, checkpoint, "ticket" if t.kind == "param" else "on_demand")
            entry = AuditEntry(actor=self.channel.actor, action="ticket_checkpoint", run_id=self.run.run_id,
                               details={"checkpoint": str(checkpoint), "boundary_step": change.step})
            self._soft("recording the checkpoint", self.store.transition, t.ticket_id, ("applied",),
                       {"checkpoint": str(checkpoint)}, entry)
        if t.kind == "param":
            before = self.values.get(t.target)
            self.values[t.target] = t.value
            self.run.event(change.step, "live_params_applied", {
                "request_id": f"ticket:{t.ticket_id}", "step": change.step, "reason": t.reason,
                "requested_by": f"ticket:{t.ticket_id}", "before": {t.target: before}, "after": {t.target: t.value}})
            self._awaiting.append(t)
            self._soft("publishing the live parameters", self._publish, change.step, f"ticket:{t.ticket_id}")
        self._outstanding = [c for c in self._outstanding if c is not change]

    def fail(self, change: Change, reason: str) -> None:
        if change.state != "pending":
            return
        change.state = "failed"
        self._soft(f"failing ticket {change.ticket_id}", self.channel.mark_failed, change.ticket, reason,
                   from_statuses=("applied",))
        self._outstanding = [c for c in self._outstanding if c is not change]

    # ------------------------------------------------------------------ effects and the end

    def _settle(self, step: int, force: bool = False) -> None:
        for change in list(self._outstanding):
            self.fail(change, UNACKNOWLEDGED)
        due = [t for t in self._awaiting if force or (t.boundary_step or 0) + self.cfg.effect_steps <= step]
        for ticket in due:
            self.channel.record_effect(ticket, self._effect(ticket, step))
        self._awaiting = [t for t in self._awaiting if t not in due]

    def _effect(self, ticket: TicketRecord, step: int) -> dict[str, Any]:
        from rlcockpit.metrics.ks import ks_2samp

        boundary, n = ticket.boundary_step or 0, self.cfg.effect_steps
        effect: dict[str, Any] = {"effect_steps": step - boundary, "evaluated_step": step}
        before = (ticket.effect or {}).get("before") or {}
        source, after = self._window_rewards(boundary, min(step, boundary + n), before.get("source"))
        if before.get("rewards") and after:
            effect.update(reward_effect(before["rewards"], after, ks_2samp))
            effect.update(rewards_before=before["rewards"], rewards_after=after, reward_source=source)
        effect["windows"] = window_effect(self._metrics, boundary, n)
        return effect

    def _window_rewards(self, lo: int, hi: int, source: str | None = None) -> tuple[str, list[float]] | None:
        """Rewards of the steps in (lo, hi]: every logged sample's, else each step's reward/mean."""
        if source != "reward/mean":
            samples = [r for s, rs in self._rewards.items() if lo < s <= hi for r in rs]
            if samples or source == "samples":
                return ("samples", samples[-MAX_WINDOW_REWARDS:]) if samples else None
        means = [m["reward/mean"] for s, m in self._metrics.items() if lo < s <= hi and "reward/mean" in m]
        return ("reward/mean", means) if means else None

    def close(self, status: str) -> None:
        """The run ends: settle, measure what still waits (with the steps there were) and, for a
        finished or stopped run, fail the approved tickets it will never reach."""
        self._soft("settling the last boundary", self._settle, self._step, True)
        if status in ("finished", "stopped"):
            for ticket in self._soft("reading approved tickets", self.channel.approved) or []:
                self._soft("failing a ticket", self.channel.mark_failed, ticket,
                           f"the run was {status} at step {self._step} before applying it")
        self.store.close()

    # ------------------------------------------------------------------ internals

    def _publish(self, step: int, source: str) -> None:
        if self._published == self.values:
            return
        specs = {n: p.spec() for n, p in self.params.items()}
        self.channel.publish(step, self.values, specs, source)
        self._published = dict(self.values)

    def _prune(self, step: int) -> None:
        oldest = min([step - 4 * self.cfg.effect_steps - 8,
                      *((t.boundary_step or 0) - self.cfg.effect_steps for t in self._awaiting)])
        for table in (self._metrics, self._rewards):
            for s in [s for s in table if s <= oldest]:
                del table[s]

    def _soft(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Fail soft: training goes on; the tickets stay in the store for a later boundary."""
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            log.warning("control of run %s at step %d: %s failed (%s: %s)", self.run.run_id, self._step, what,
                        type(exc).__name__, exc)
            return None


def attach(run: Any, store: Any, live_params: Mapping[str, Any] | None, cfg: ControlConfig) -> LoopControl:
    """Give ``run`` its control link (``rlcockpit.init(live_params=..., control=...)`` calls this).
    ``store``: the opened store (``open_store(uri)``) whose control tables the server reads."""
    link = LoopControl(run, store.control(), live_params_of(live_params), cfg)
    link.start()
    run.attach_control(link)
    return link
