"""The real ops components for tests (docs/ops.md): Debian's Prometheus and Alertmanager started on
loopback in tmp_path, driven and read through their own HTTP APIs.

``make test`` installs them (the ``$(OPS)`` target, as for chromium); a missing binary fails the
test with the command that installs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from server_testkit import free_port

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
INSTALL = "make test installs it (or: apt-get install prometheus prometheus-alertmanager)"


def binary(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError(f"{names[0]} is not installed; {INSTALL}")


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def post_json(url: str, body: Any, timeout: float = 5.0) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read()
    return json.loads(raw) if raw else None


def wait_for(fn: Any, timeout: float = 30.0, every: float = 0.25, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except OSError as exc:  # not up yet
            last = exc
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}")


class Daemon:
    """A real server process on a loopback port; stopped (terminate, then kill) on exit."""

    def __init__(self, args: list[str], url: str, ready_path: str, log: Path) -> None:
        self.url = url
        self._log = log.open("wb")
        self.proc = subprocess.Popen(["nice", "-n", "10", *args], stdout=self._log,
                                     stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: self._ready(ready_path), timeout=30, what=f"{args[0]} to start")
        except AssertionError:
            self.stop()
            raise AssertionError(f"{args[0]} did not start; its log:\n{log.read_text()[-3000:]}") from None

    def _ready(self, path: str) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"exited with {self.proc.returncode}")
        with urllib.request.urlopen(self.url + path, timeout=2) as r:
            return r.status == 200

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


def start_prometheus(tmp: Path, targets: list[str], *, rule_files: list[Path] = (),
                     scrape_ms: int = 1000) -> Daemon:
    """Prometheus scraping ``targets`` (host:port, path /metrics) every ``scrape_ms``."""
    port = free_port()
    rules = "\n".join(f"  - {p}" for p in rule_files)
    config = tmp / "prometheus.yml"
    config.write_text(f"""global:
  scrape_interval: {scrape_ms}ms
  evaluation_interval: {scrape_ms}ms
rule_files:
{rules or '  []'}
scrape_configs:
  - job_name: rlcockpit
    metrics_path: /metrics
    static_configs:
      - targets: {json.dumps(targets)}
""")
    args = [binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}"]
    return Daemon(args, f"http://127.0.0.1:{port}", "/-/ready", tmp / "prometheus.log")


def start_alertmanager(tmp: Path, config: Path) -> Daemon:
    port = free_port()
    args = [binary("prometheus-alertmanager", "alertmanager"), f"--config.file={config}",
            f"--storage.path={tmp / 'am'}", f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address="]
    return Daemon(args, f"http://127.0.0.1:{port}", "/-/ready", tmp / "alertmanager.log")


def promql(prom: Daemon, expr: str) -> list[dict[str, Any]]:
    """Instant query; the result vector (raises on a query error)."""
    data = get_json(f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    if data["status"] != "success":
        raise AssertionError(f"{expr}: {data}")
    return data["data"]["result"]
