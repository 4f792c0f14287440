"""``rlcockpit demo``: the tiny-world PPO run with a live terminal view and the web cockpit (what
``make demo`` starts).

The cockpit server runs in a background thread of the same process (uvicorn on 127.0.0.1) while
the trainer trains; halfway through, a scripted incident (a fault from :mod:`rlcockpit.faults`,
``lr_spike`` by default) breaks the run so a newcomer sees a failure detected, explained and
snapshotted live. The demo creates two users (``demo-operator``, ``demo-approver``,
:mod:`._support.demo_users`) and prints their sign-in links; when the incident fires, the terminal
prints a guide (:mod:`._support.demo_guide`) to the ticket that undoes it. :func:`run_demo` is a
plain function so other launchers can call it.
"""

from __future__ import annotations

import argparse
from collections import deque
from collections.abc import Sequence
from typing import Any

DEFAULT_STORE = "sqlite:///rlcockpit.db"
DEFAULT_STEPS = 200
DEFAULT_PORT = 8765
DEFAULT_INCIDENT = "lr_spike"
# the demo's severity policy: collect the evidence (batch, snapshot) but never pause, stop or
# roll back, so the newcomer watches the incident unfold instead of a halted run
DEMO_ACTIONS = {"yellow": ["alert"], "orange": ["alert", "save_batch"],
                "red": ["alert", "snapshot"], "black": ["alert", "snapshot"]}
# the fix's effect is measured this many steps after it is applied: well within the run's second half
DEMO_EFFECT_STEPS = 10
COLUMNS = (("reward/mean", "reward"), ("kl/mean", "KL"), ("policy/entropy", "entropy"),
           ("eval/accuracy/math", "math acc (eval)"), ("eval/reward/mean", "eval reward"))


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo", help="train the tiny world with PPO on the CPU and watch it live in the terminal "
                     "and the web cockpit",
        description="Run PPO on the shipped tiny world (offline, CPU) with a live view of reward, KL, "
                    "entropy and validation accuracy, and the web cockpit at http://127.0.0.1:PORT/. "
                    "Halfway through, a scripted incident (a fault injected on purpose) shows a "
                    "failure detected, explained and snapshotted; the terminal then prints the fix to try "
                    "(a ticket requested by demo-operator and approved by demo-approver, whose sign-in "
                    "links it prints at start). Everything is recorded in the store.")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"training steps (default {DEFAULT_STEPS})")
    p.add_argument("--store", default=DEFAULT_STORE, help=f"store URI (default {DEFAULT_STORE})")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"cockpit port on 127.0.0.1 (default {DEFAULT_PORT})")
    p.add_argument("--no-server", action="store_true", help="terminal view only, no web cockpit")
    p.add_argument("--no-incident", action="store_true", help="a healthy run: no scripted incident")
    p.add_argument("--incident", default=DEFAULT_INCIDENT,
                   help=f"fault to inject (default {DEFAULT_INCIDENT}; see `rlcockpit faults list`)")
    p.add_argument("--onset", type=int, default=None, help="first faulted step (default: halfway)")
    p.add_argument("--exit-when-done", action="store_true",
                   help="stop the cockpit when training ends (default: keep serving until Ctrl-C)")
    p.add_argument("--no-users", action="store_true",
                   help="create no demo users: the cockpit is open for reading and nobody may change anything")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides, e.g. rollout.batch_size=8 eval.every=0")
    p.set_defaults(func=_command)


def _command(args: argparse.Namespace) -> int:
    incident = None if args.no_incident else args.incident
    onset = incident_onset(args.steps, args.onset) if incident else None
    server = None if args.no_server else DemoServer(args.store, args.port)
    people = None
    if server is not None:
        server.start()
        print(f"rlcockpit cockpit: {server.url}  (open it in a browser; live while it trains)",
              flush=True)
        people = None if args.no_users else _sign_in(server, args.store)
    try:
        result = run_demo(steps=args.steps, store=args.store, seed=args.seed, incident=incident,
                          onset=onset, dotted=args.overrides, url=server.url if server else None,
                          people=people)
        if server is not None:
            view = "alerts" if incident else "dashboard"
            print(f"This run in the cockpit: {server.url}#/run/{result.run_id}/{view}", flush=True)
        if server is not None and not args.exit_when_done:
            print(f"Training is over; the cockpit stays at {server.url} — Ctrl-C quits.", flush=True)
            server.wait()
    finally:
        if server is not None:
            server.stop()
    return 0 if result.status in ("finished", "stopped") else 1


def _sign_in(server: DemoServer, store: str) -> Any:
    """Create (or replace) the demo users and print one sign-in link each (_support/demo_users.py)."""
    from rlcockpit.cli._support.demo_users import describe, ensure_demo_users

    people = ensure_demo_users(server.opened.control())
    for line in describe(people, server.url, store):
        print(line, flush=True)
    return people


def incident_onset(steps: int, onset: int | None) -> int:
    """The scripted incident starts halfway (never before step 2, the faults' minimum)."""
    return max(2, steps // 2 if onset is None else onset)


class DemoServer:
    """The cockpit (``rlcockpit serve``) in a background thread of the demo process."""

    def __init__(self, store: str, port: int, host: str = "127.0.0.1") -> None:
        from rlcockpit.server.settings import ServerSettings
        from rlcockpit.store import open_store

        _check_port_free(host, port)
        self.opened = open_store(store)  # creates the file, so the server can read it at once
        self.settings = ServerSettings(host=host, port=port, store=store)
        self.url = f"http://{host}:{port}/"
        self._server: Any = None
        self._thread: Any = None

    def start(self) -> None:
        import threading

        import uvicorn

        from rlcockpit.server.app import create_app
        from rlcockpit.server.auth import control_for

        access, control = control_for(self.settings, self.opened)  # as `rlcockpit serve` does
        app = create_app(self.settings, self.opened, access=access, control=control)
        config = uvicorn.Config(app, host=self.settings.host, port=self.settings.port,
                                log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="rlcockpit-demo-server",
                                        daemon=True)
        self._thread.start()
        self._wait_started()

    def _wait_started(self, timeout_s: float = 30.0) -> None:
        """Return once uvicorn listens: the links printed next must answer at once (a loaded
        machine can take seconds to bind)."""
        import time

        from rlcockpit.errors import ConfigError

        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError(f"the cockpit server did not start on {self.url} within {timeout_s:.0f} s; "
                                  "pass --port N or --no-server", details={"key": "port", "value": self.settings.port})
            time.sleep(0.05)

    def wait(self) -> None:
        """Block until Ctrl-C (KeyboardInterrupt reaches the main thread)."""
        import time

        try:
            while self._thread.is_alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            return

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(10)


def _check_port_free(host: str, port: int) -> None:
    import socket

    from rlcockpit.errors import ConfigError

    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"port {port} on {host} is not free ({exc.strerror}); pass --port N "
                              "or --no-server", details={"key": "port", "value": port}) from None


def demo_config(steps: int, store: str, seed: int = 0, overrides: dict[str, Any] | None = None,
                dotted: Sequence[str] = ()) -> Any:
    """The default TrainConfig (tuned for the tiny world) with the demo's name, length and store;
    ``dotted`` are ``key.sub=value`` overrides applied last (the command line's KEY=VALUE)."""
    from rlcockpit.config import apply_overrides, from_dict
    from rlcockpit.trainer.config import TrainConfig

    data: dict[str, Any] = {"name": "demo", "project": "demo", "seed": seed, "train": {"steps": steps},
                            "telemetry": {"store": store}, **(overrides or {})}
    return from_dict(TrainConfig, apply_overrides(data, dotted))


def run_demo(steps: int = DEFAULT_STEPS, store: str = DEFAULT_STORE, seed: int = 0,
             overrides: dict[str, Any] | None = None, console: Any = None,
             incident: str | None = None, onset: int | None = None, dotted: Sequence[str] = (),
             url: str | None = None, people: Any = None) -> Any:
    """Train, show a live table, print where the data went; returns the TrainResult. With
    ``incident`` (a fault name) that fault is injected from step ``onset`` (default: halfway) and
    the incident guide is printed above the table when it is detected; ``url`` (the cockpit) and
    ``people`` (:class:`~rlcockpit.cli._support.demo_users.DemoUsers`) make the guide's links and
    names."""
    from rich.console import Console
    from rich.live import Live

    console = console or Console()
    overrides = dict(overrides or {})
    overrides["control"] = {"effect_steps": DEMO_EFFECT_STEPS, **overrides.get("control", {})}
    if incident:
        overrides["diagnostics"] = {"enabled": True, "policy": {"actions": DEMO_ACTIONS}}
    cfg = demo_config(steps, store, seed, overrides, dotted)
    trainer, fault = _trainer(cfg, incident, incident_onset(steps, onset) if incident else None)
    guide = _guide(trainer, cfg, url, people, console) if incident else None
    view = DemoView(steps)
    console.print(f"[bold]rlcockpit demo[/]: PPO on the tiny world, {steps} steps, store {store}")
    if fault is not None:
        console.print(f"Scripted incident: [bold]{fault.name}[/] from step {fault.onset} "
                      f"({fault.description}); watch the Alerts page of the cockpit.", soft_wrap=True)
    with Live(view.render(), console=console, refresh_per_second=4) as live:
        def on_step(step: int, metrics: dict[str, float]) -> None:
            view.add(step, metrics)
            live.update(view.render())

        trainer.add_observer(on_step)
        result = trainer.run()
        if guide is not None:
            guide.check(trainer)  # a finding of the very last step
    console.print()
    print_where(console, result, cfg)
    return result


def _guide(trainer: Any, cfg: Any, url: str | None, people: Any, console: Any) -> Any:
    """The incident guide as a step hook; it prints through the Live's console, above the table."""
    from rlcockpit.cli._support.demo_guide import GuideContext, IncidentGuide

    ctx = GuideContext(url=url, store=cfg.telemetry.store, effect_steps=cfg.control.effect_steps,
                       operator=people.named("operator") if people else None,
                       approver=people.named("approver") if people else None)
    guide = IncidentGuide(ctx, trainer.live.params.as_dict(),
                          lambda line: console.print(line, soft_wrap=True, markup=False, highlight=False))
    trainer.add_step_hook(guide)
    return guide


def _trainer(cfg: Any, incident: str | None, onset: int | None) -> tuple[Any, Any]:
    """The Trainer, with the incident's fault injected when one is asked for."""
    from rlcockpit.cli.train import control_store
    from rlcockpit.trainer.trainer import Trainer

    if not incident:  # tickets and commands from the cockpit reach the demo too (docs/control.md)
        return Trainer(cfg, control_store=control_store(cfg)), None
    from rlcockpit import faults

    fault = faults.get(incident).with_onset(onset)
    return fault.trainer(cfg, control_store=control_store(cfg)), fault


class DemoView:
    """The live table: the latest steps plus the most recent evaluation."""

    def __init__(self, total: int, rows: int = 12) -> None:
        self.total = total
        self.rows: deque[tuple[int, dict[str, float]]] = deque(maxlen=rows)
        self.last_eval: dict[str, float] = {}
        self.step = 0

    def add(self, step: int, metrics: dict[str, float]) -> None:
        self.step = step
        evals = {k: v for k, v in metrics.items() if k.startswith("eval/")}
        self.last_eval.update(evals)
        self.rows.append((step, metrics))

    def render(self) -> Any:
        from rich.console import Group, NewLine
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        table = Table(expand=False)
        table.add_column("step", justify="right")
        for _, label in COLUMNS:
            table.add_column(label, justify="right")
        for step, m in self.rows:
            table.add_row(str(step), *(_fmt(m.get(key)) for key, _ in COLUMNS))
        header = Text(f"tiny world PPO  step {self.step}/{self.total}  latest math accuracy (eval on fixed "
                      f"validation prompts and seed): {_fmt(self.last_eval.get('eval/accuracy/math'))}")
        return Group(header, ProgressBar(total=self.total, completed=self.step, width=60), NewLine(), table)


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def print_where(console: Any, result: Any, cfg: Any) -> None:
    console.print(f"[bold]{result.status}[/] at step {result.step}. Run id [cyan]{result.run_id}[/].")
    # soft_wrap: never break a path or a command line, so it can be copied as printed
    console.print(f"Data (metrics, samples with token arrays, phases, events): {cfg.telemetry.store}",
                  soft_wrap=True)
    console.print(f"  list runs:  rlcockpit runs --store {cfg.telemetry.store}", soft_wrap=True)
    if result.checkpoint:
        console.print(f"Checkpoint: {result.checkpoint}", soft_wrap=True)
        console.print(f"  continue:   rlcockpit train --resume {result.checkpoint} train.steps={result.step + 100}",
                      soft_wrap=True)
