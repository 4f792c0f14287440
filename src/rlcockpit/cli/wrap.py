"""``rlcockpit wrap -- COMMAND...``: run a trainer, tee what it prints to the terminal and to a log
file, and follow that file live into the store (docs/integrations.md, "OpenRLHF").

The command runs in its own process group with its output on pipes: every line goes to this
terminal (stdout to stdout, stderr to stderr) and, as it arrives, to ``--log`` (appended). A
follower (:mod:`rlcockpit.integrations.follow`, format ``console-dicts``: OpenRLHF's
``✨ Global step N: {...}`` lines and its ``Sample: [...]`` line, the Hugging Face Trainer's
printed dicts, and ``Key: value`` lines with a step such as verl's console logger's
``step:N - key:value - ...``) tails the log into one live run, the detectors on it. Ctrl-C and SIGTERM are
forwarded to the command's process group (a second Ctrl-C sends SIGTERM, a third SIGKILL); the
exit code is the command's (128 + N when a signal N ended it). The run ends ``finished`` when the
command exited 0, ``stopped`` when it was interrupted, ``failed`` otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

EPILOG = """examples:
  rlcockpit wrap --store sqlite:///runs.db -- python -m openrlhf.cli.train_ppo_ray --pretrain ... \\
      --logger.tensorboard_dir runs/tb
  rlcockpit wrap --log logs/ppo.log --name ppo-7b -- bash train_ppo.sh
  rlcockpit wrap -- python -m verl.trainer.main_ppo trainer.logger='["console"]' ...

The log file is appended to; wrapping the same command with the same --log again continues the
same run (the follow state is kept next to the store). Follow the TensorBoard folder too with
`rlcockpit import --follow` (it adds the generated-samples text)."""
FORWARDED = (signal.SIGTERM, signal.SIGKILL)  # what a 2nd and a 3rd Ctrl-C send


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "wrap", help="run a trainer, tee its output to a log and follow the log live",
        description="Run COMMAND (after --), tee its stdout / stderr to the terminal and to a log "
                    "file, and follow that log live into a run (OpenRLHF's Global step lines, "
                    "printed Trainer dicts, verl's console step lines). Exits with the command's exit code.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default="sqlite:///rlcockpit.db", help="store URI (default: sqlite:///rlcockpit.db)")
    p.add_argument("--log", default=None, metavar="FILE",
                   help="the log file (appended to; default: rlcockpit-wrap-<UTC time>.log here)")
    p.add_argument("--project", default="wrapped", help="project of the run (default: wrapped)")
    p.add_argument("--name", default=None, help="name of the run (default: the log file's name)")
    p.add_argument("--source", default=None, help="alias table of the printed keys (default: detected, "
                                                  "e.g. openrlhf)")
    p.add_argument("--poll-interval", type=float, default=0.25, metavar="SECONDS",
                   help="how often the log is looked at (default 0.25)")
    p.add_argument("--no-diagnostics", action="store_true", help="do not run the detectors")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the trainer's command line")
    p.set_defaults(func=cmd_wrap)


def cmd_wrap(args: argparse.Namespace) -> int:
    from rlcockpit.errors import ConfigError
    from rlcockpit.integrations.follow import FollowOptions, start_follow

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise ConfigError("no command to run: put it after --, e.g. rlcockpit wrap -- python -m "
                          "openrlhf.cli.train_ppo_ray ...", details={"key": "command"})
    log_path = Path(args.log or time.strftime("rlcockpit-wrap-%Y%m%d-%H%M%S.log", time.gmtime())).resolve()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.touch()
    options = FollowOptions(poll_interval_s=args.poll_interval, diagnostics=not args.no_diagnostics, settle_s=1.0)
    follower = start_follow([log_path], store=args.store, fmt="console-dicts", source=args.source,
                            project=args.project, name=args.name or log_path.stem, options=options)
    print(f"rlcockpit wrap: {log_path} -> run {follower.run.run_id} in {args.store}", file=sys.stderr, flush=True)
    try:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        follower.close("failed")
        raise ConfigError(f"cannot run {command[0]!r}: {exc.strerror}", details={"key": "command"}) from exc
    stop = threading.Event()
    watcher = threading.Thread(target=follower.follow, args=(stop,), name="rlcockpit-wrap-follow", daemon=True)
    watcher.start()
    interrupted = _forward_signals(child)
    with log_path.open("ab", buffering=0) as log:
        lock = threading.Lock()
        tees = [threading.Thread(target=_tee, args=(pipe, out, log, lock), daemon=True)
                for pipe, out in ((child.stdout, sys.stdout.buffer), (child.stderr, sys.stderr.buffer))]
        for t in tees:
            t.start()
        code = _wait(child)
        for t in tees:
            t.join()
    stop.set()
    watcher.join()
    follower.poll()  # what the command printed last
    status = "finished" if code == 0 else "stopped" if interrupted else "failed"
    follower.close(status)
    print(f"rlcockpit wrap: run {follower.run.run_id} {status}: {follower.records} records followed; "
          f"the command exited {code}", file=sys.stderr, flush=True)
    return code


def _tee(pipe: IO[bytes], out: Any, log: IO[bytes], lock: threading.Lock) -> None:
    """Copy the command's output line by line to the terminal and the log (a line at a time, so
    stdout and stderr lines never interleave inside a line of the log)."""
    for line in iter(pipe.readline, b""):
        with lock:
            log.write(line)
        try:
            out.write(line)
            out.flush()
        except (OSError, ValueError):  # the terminal went away: the log and the run go on
            pass
    pipe.close()


def _forward_signals(child: subprocess.Popen) -> list[int]:
    """Ctrl-C / SIGTERM go to the command's process group; returns the list of signals forwarded."""
    sent: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        sig = signum if not sent else FORWARDED[min(len(sent), len(FORWARDED)) - 1]
        sent.append(sig)
        with contextlib.suppress(ProcessLookupError):  # it has already exited
            os.killpg(child.pid, sig)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    return sent


def _wait(child: subprocess.Popen) -> int:
    code = child.wait()
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it
