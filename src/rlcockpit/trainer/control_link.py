"""The trainer's end of the control plane (docs/control.md): tickets in, applied changes out.

At every phase boundary (HOTFIX, and while paused) :class:`ControlLink` takes the run's approved
tickets from the store and carries them out in the trainer's thread:

- a parameter change: evaluate the fixed validation prompts (fixed sampling seed), checkpoint,
  mark the ticket ``applied`` (compare-and-set in the store, audited), then hand the change to
  ``LiveControl`` (applied in the same HOTFIX). ``effect_steps`` later the validation prompts are
  evaluated again and the effect (KS test of the two reward samples, mean / variance change, KL and
  entropy windows) is recorded: the ticket becomes ``evaluated``;
- a command: pause, resume, stop, checkpoint now, rollback to a checkpoint (after the step commit).

Exactly once across crashes: the ticket is marked applied *before* the model sees the change, and
every checkpoint lists the tickets its state contains. On ``--resume`` a ticket the store calls
applied but the checkpoint lacks is re-applied at its boundary step (audited as a replay), never
marked again. The live parameters (values, types, ranges) are published to the store at start and
after every change; the diagnostics policy's actions become tickets (requested by the detector,
approved by the policy): the trainer wraps the diagnostics' executor with :meth:`ControlLink.ticketed`
in INIT.

The link acts on the trainer only through its port (:class:`rlcockpit.trainer.port.TrainerPort`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from rlcockpit.control import Channel, ControlConfig
from rlcockpit.control.effect import reward_effect, window_effect
from rlcockpit.errors import ConfigError, StoreError
from rlcockpit.records import TicketRecord
from rlcockpit.store.base import ControlStore
from rlcockpit.trainer.diagnosis import ActionContext, Executor
from rlcockpit.trainer.live import LIVE_SPECS, LiveControl, validate_changes
from rlcockpit.trainer.port import TrainerPort

log = logging.getLogger("rlcockpit.trainer.control")
HISTORY_KEYS = ("kl/mean", "policy/entropy", "reward/mean")
PAUSE_COMMANDS = ("pause", "resume", "stop")


def live_specs(live: LiveControl) -> dict[str, dict[str, Any]]:
    """The allow-list a run publishes: type, this run's range, help and metric of each parameter."""
    out = {}
    for name, spec in LIVE_SPECS.items():
        lo, hi = live.bounds(name)
        out[name] = {"type": "int" if spec.type is int else "float", "lo": lo, "hi": hi, "help": spec.help,
                     "metric": spec.metric}
    return out


class ControlLink:
    def __init__(self, store: ControlStore | Callable[[], ControlStore], cfg: ControlConfig) -> None:
        # a callable opens the store at attach(), after INIT's fail-fast checks: a bad reward
        # function must not leave a store file behind
        self.store = store
        self.cfg = cfg
        self.trainer: TrainerPort | None = None  # set by attach
        self.channel: Channel | None = None
        self.applied: list[int] = []  # ticket ids contained in the current state (saved in checkpoints)
        self.resumed = False
        self.history: dict[int, dict[str, float]] = {}
        self.awaiting: list[TicketRecord] = []
        self.replays: list[TicketRecord] = []
        self.acting_ticket: int | None = None  # the ticket being carried out (a rollback names it)
        self._published: tuple[dict, dict] | None = None
        self._sources: list[str] = []
        self._next_poll = 0.0

    # ------------------------------------------------------------------ state (checkpoints)

    def state_dict(self) -> dict[str, Any]:
        return {"applied": list(self.applied)}

    def restored(self, state: Mapping[str, Any] | None) -> None:
        """A checkpoint was loaded (at start-up with --resume, or by an in-process rollback)."""
        self.applied = [int(i) for i in (state or {}).get("applied", [])]
        self.resumed = True
        if self.channel is not None:  # a rollback: what the restored state lacks is undone
            undone = self.channel.replays(self.applied)
            self.channel.mark_rolled_back(undone, by=self.acting_ticket or 0)
            gone = {t.ticket_id for t in undone}
            self.awaiting = [t for t in self.awaiting if t.ticket_id not in gone]
            self._sources.append("rollback")

    # ------------------------------------------------------------------ start-up

    def attach(self, trainer: TrainerPort, run_id: str) -> None:
        """After the run is open: publish the live parameters, plan replays."""
        self.trainer = trainer
        if not isinstance(self.store, ControlStore):
            self.store = self.store()
        self.channel = Channel(self.store, run_id)
        self.awaiting = self.channel.awaiting_effect()
        if self.resumed:
            self.replays = self.channel.replays(self.applied)
            due = [t for t in self.replays if (t.boundary_step or 0) <= trainer.step]
            self._replay(due, trainer.step)
        self._publish(trainer.step, "resume" if self.resumed else "start")

    def observe(self, step: int, metrics: Mapping[str, float]) -> None:
        """A step observer (the trainer registers it): the KL / entropy / reward windows of the effects."""
        self.history[step] = {k: float(metrics[k]) for k in HISTORY_KEYS if k in metrics}
        keep = 4 * self.cfg.effect_steps + 8
        for old in [s for s in self.history if s <= step - keep]:
            del self.history[old]

    # ------------------------------------------------------------------ the boundary

    def before_hotfix(self, step: int) -> None:
        """Measure due effects, replay due tickets, take approved tickets (rollbacks wait for the commit)."""
        self._soft("taking tickets", self._before, step)

    def after_hotfix(self, step: int) -> None:
        """After the step's commit: rollbacks, then publish the live parameters if they changed."""
        self._soft("rollbacks and publishing", self._after, step)

    def while_paused(self, step: int) -> None:
        """Called by the pause loop: take resume / stop / other tickets (not rollbacks) every poll interval."""
        now = time.monotonic()
        if now >= self._next_poll:
            self._next_poll = now + self.cfg.poll_interval_s
            self._soft("taking tickets while paused", self._paused, step)

    def _soft(self, what: str, fn: Any, step: int) -> None:
        """Fail soft on the store (locked past its timeout, disk full): training goes on, the tickets
        stay in the store and are taken at a later boundary."""
        try:
            fn(step)
        except StoreError as exc:
            log.warning("control at step %d: %s failed (%s); tickets stay queued in the store", step, what, exc)

    @staticmethod
    def _soft_store(fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except StoreError as exc:
            log.warning("control: %s failed: %s", getattr(fn, "__name__", fn), exc)

    def _before(self, step: int) -> None:
        baseline = self._evaluate_due(step)
        self._replay([t for t in self.replays if (t.boundary_step or 0) <= step], step)
        for ticket in self.channel.approved():
            if not (ticket.kind == "command" and ticket.target == "rollback"):
                baseline = self._carry_out(ticket, step, baseline)

    def _after(self, step: int) -> None:
        for ticket in self.channel.approved():
            if ticket.kind == "command" and ticket.target == "rollback":
                self._rollback(ticket, step)
        self._publish(self.trainer.step, ",".join(self._sources) or "live")

    def _paused(self, step: int) -> None:
        for ticket in self.channel.approved():
            if not (ticket.kind == "command" and ticket.target == "rollback"):
                self._carry_out(ticket, step, None)
        self._publish(step, ",".join(self._sources) or "live")

    def close(self, status: str, step: int) -> None:
        """The run ends: measure what is still waiting (with the steps there were), and fail the
        approved tickets it will never reach. Not for a failed run (it may be resumed)."""
        if self.channel is None or status not in ("finished", "stopped"):
            return
        try:
            self._evaluate_due(step, force=True)
            for ticket in self.channel.approved():
                self.channel.mark_failed(ticket, f"the run was {status} at step {step} before applying it")
        except Exception as exc:  # fail soft: the run's own result matters more
            log.warning("closing the control link failed: %s", exc)

    # ------------------------------------------------------------------ tickets

    def _carry_out(self, ticket: TicketRecord, step: int, baseline: list[float] | None) -> list[float] | None:
        self.acting_ticket = ticket.ticket_id
        try:
            if ticket.kind == "param":
                return self._apply_param(ticket, step, baseline)
            self._command(ticket, step)
        except StoreError:
            raise  # the store, not the ticket: taken again at a later boundary (see _soft)
        except Exception as exc:  # fail soft: the ticket fails, training goes on
            log.warning("ticket %s (%s %s) failed: %s", ticket.ticket_id, ticket.kind, ticket.target, exc)
            self.channel.mark_failed(ticket, f"{type(exc).__name__}: {exc}")
        finally:
            self.acting_ticket = None
        return baseline

    def _apply_param(self, ticket: TicketRecord, step: int, baseline: list[float] | None) -> list[float] | None:
        t, name = self.trainer, ticket.target
        try:
            changes = validate_changes({name: ticket.value}, {name: t.live.bounds(name)} if name in LIVE_SPECS else {})
        except ConfigError as exc:
            self.channel.mark_failed(ticket, exc.message)
            return baseline
        if baseline is None:
            baseline = self._validation_rewards(step)
        path = t.checkpoint(step, "ticket")  # the state right before the change: the rollback point
        before = {"rewards": baseline} if baseline is not None else {}
        done = self.channel.mark_applied(ticket, boundary_step=step, checkpoint=path,
                                         previous=getattr(t.live.params, name), effect={"before": before})
        if done is None:  # cancelled in the meantime: nothing changes
            return baseline
        self.applied.append(ticket.ticket_id)  # before the model sees it: a crash now is replayed on resume
        t.live.request(changes, reason=ticket.reason, requested_by=f"ticket:{ticket.ticket_id}")
        t.apply_now(step)  # at once, so the next ticket's checkpoint holds this change and its id together
        self.awaiting.append(done)
        self._sources.append(f"ticket:{ticket.ticket_id}")
        return baseline

    def _command(self, ticket: TicketRecord, step: int) -> None:
        t, who = self.trainer, f"ticket:{ticket.ticket_id}"
        if ticket.target in PAUSE_COMMANDS:
            if self.channel.mark_applied(ticket, boundary_step=step, checkpoint=None) is not None:
                getattr(t.live, ticket.target)(reason=ticket.reason, requested_by=who)
                t.apply_now(step)
        elif ticket.target == "checkpoint":
            path = t.checkpoint(step, "on_demand")
            self.channel.mark_applied(ticket, boundary_step=step, checkpoint=path)
        else:
            self.channel.mark_failed(ticket, f"unknown command {ticket.target!r}")

    def _rollback(self, ticket: TicketRecord, step: int) -> None:
        from pathlib import Path

        path = Path(str((ticket.value or {}).get("checkpoint", "")))
        if not (path / "trainer_state.pt").is_file():
            self.channel.mark_failed(ticket, f"checkpoint {path} is not on disk (pruned or moved)")
            return
        if self.channel.mark_applied(ticket, boundary_step=step, checkpoint=str(path)) is None:
            return
        self.acting_ticket = ticket.ticket_id
        try:
            self.trainer.rollback_to(path)
        finally:
            self.acting_ticket = None

    def _replay(self, tickets: list[TicketRecord], step: int) -> None:
        for ticket in tickets:  # audited first: a store failure leaves it to a later boundary, never twice
            self.channel.note("ticket_replayed", ticket, {"target": ticket.target, "value": ticket.value,
                                                          "boundary_step": ticket.boundary_step, "at_step": step})
            self.replays = [t for t in self.replays if t.ticket_id != ticket.ticket_id]
            self.applied.append(ticket.ticket_id)
            self.trainer.live.request({ticket.target: ticket.value}, reason=f"replay after resume: {ticket.reason}",
                                      requested_by=f"ticket:{ticket.ticket_id}")
            self._sources.append(f"ticket:{ticket.ticket_id}")
        if tickets:
            self.trainer.apply_now(step)  # at once: a checkpoint taken next holds the change with its id

    # ------------------------------------------------------------------ effect measurement

    def _evaluate_due(self, step: int, force: bool = False) -> list[float] | None:
        """Record the effect of every applied ticket whose ``effect_steps`` have passed (``force``: all
        of them, at the end of the run); returns the validation rewards of this boundary (reused as
        the baseline of a ticket applied now)."""
        due = [t for t in self.awaiting if force or (t.boundary_step or 0) + self.cfg.effect_steps <= step]
        if not due:
            return None
        after = self._validation_rewards(step)
        for ticket in due:
            before = ((ticket.effect or {}).get("before") or {}).get("rewards")
            self.channel.record_effect(ticket, self._effect(ticket, before, after, step))
        self.awaiting = [t for t in self.awaiting if t not in due]
        return after

    def _effect(self, ticket: TicketRecord, before: list[float] | None, after: list[float] | None,
                step: int) -> dict[str, Any]:
        from rlcockpit.metrics.ks import ks_2samp

        effect: dict[str, Any] = {"effect_steps": step - (ticket.boundary_step or 0), "evaluated_step": step}
        if before and after:
            effect.update(reward_effect(before, after, ks_2samp))
            effect["rewards_before"], effect["rewards_after"] = before, after
        effect["windows"] = window_effect(self.history, ticket.boundary_step or 0, self.cfg.effect_steps)
        return effect

    def _validation_rewards(self, step: int) -> list[float] | None:
        return self.trainer.validation_rewards(step) if self.cfg.effect_eval else None

    # ------------------------------------------------------------------ publishing and automatic actions

    def _publish(self, step: int, source: str) -> None:
        values, specs = self.trainer.live.params.as_dict(), live_specs(self.trainer.live)
        if self._published == (values, specs):
            return
        self.channel.publish(step, values, specs, source)
        self._published = (values, specs)
        self._sources = []

    def ticketed(self, executor: Executor) -> Executor:
        """Wrap the diagnostics executor: each action (but alerts) becomes a policy-approved ticket.
        A safety action never waits for the store: if the ticket cannot be written it runs anyway."""

        def run(action: Any, ctx: ActionContext) -> Mapping[str, Any]:
            if action.name == "alert":
                return executor(action, ctx)
            try:
                ticket = self.channel.automatic(action.detector, action.name, {
                    "severity": action.severity, "incident": action.incident, "finding_step": action.step},
                    reason=f"{action.severity} finding of {action.detector}: {action.finding.message}")
            except StoreError as exc:
                log.warning("control: no ticket for the %s action of %s (%s); running it anyway",
                            action.name, action.detector, exc)
                return {**dict(executor(action, ctx) or {}), "ticket_error": exc.message}
            self.acting_ticket = ticket.ticket_id
            try:
                result = dict(executor(action, ctx) or {})
            except Exception as exc:
                self._soft_store(self.channel.mark_failed, ticket, f"{type(exc).__name__}: {exc}")
                raise
            finally:
                self.acting_ticket = None
            self._soft_store(self.channel.mark_applied, ticket, boundary_step=ctx.step,
                             checkpoint=result.get("checkpoint"))
            return {**result, "ticket_id": ticket.ticket_id}

        return run
