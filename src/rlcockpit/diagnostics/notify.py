"""Notifications of findings: a console one-liner and a generic JSON webhook.

- :class:`ConsoleNotifier` prints one rich line per finding, coloured by severity (honours
  ``diagnostics.policy.console``).
- :class:`WebhookNotifier` POSTs each finding (at or above ``webhook.min_severity``) as JSON with the
  standard library (urllib) from a background thread, so training never waits on the network.
  A failed delivery is retried ``webhook.retries`` times with exponential back-off, then given up
  with one warning. The URL's query string and user info (tokens often live there) never appear in
  a log line: only ``scheme://host[:port]/path`` is shown ("no secrets in logs").
- :class:`Notifier` combines both; ``notify(finding)`` returns the channels it was handed to.
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, TextIO
from urllib.parse import unquote, urlsplit, urlunsplit

from rlcockpit.diagnostics.base import severity_rank
from rlcockpit.diagnostics.config import PolicyConfig, WebhookConfig
from rlcockpit.records import FindingRecord, to_dict

log = logging.getLogger("rlcockpit.diagnostics.notify")
COLOURS = {"info": "cyan", "yellow": "yellow", "orange": "dark_orange", "red": "bold red",
           "black": "bold white on red"}
_STOP = object()


def redact_url(url: str) -> str:
    """``https://user:tok@host:8443/hook?key=s`` → ``https://host:8443/hook`` (safe to log)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<invalid url>"
    return f"{parts.scheme}://{host}{port}{parts.path}"


def split_userinfo(url: str) -> tuple[str, dict[str, str]]:
    """``http://user:pw@host/p`` → (``http://host/p``, Basic auth header): urllib cannot send
    user info itself."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, {}
    netloc = parts.netloc.rsplit("@", 1)[1]
    token = base64.b64encode(f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()).decode()
    return urlunsplit(parts._replace(netloc=netloc)), {"Authorization": f"Basic {token}"}


def finding_line(f: FindingRecord) -> str:
    """The console one-liner (rich markup): ``[RED] step 12 kl_tiers: message (incident ...)``."""
    from rich.markup import escape

    colour = COLOURS.get(f.severity, "white")
    status = "" if f.status == "raised" else f" {f.status}"
    incident = f" [dim](incident {escape(f.incident)})[/dim]" if f.incident else ""
    return (f"[{colour}]{f.severity.upper()}{status}[/{colour}] step {f.step} "
            f"[bold]{escape(f.detector)}[/bold]: {escape(f.message)}{incident}")


class ConsoleNotifier:
    def __init__(self, enabled: bool = True, file: TextIO | None = None) -> None:
        self.enabled = enabled
        self._console: Any = None
        self._file = file

    def notify(self, f: FindingRecord) -> bool:
        if not self.enabled:
            return False
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self._file, stderr=self._file is None, soft_wrap=True)
        self._console.print(finding_line(f), highlight=False)
        return True


class WebhookNotifier:
    """Background delivery of JSON findings with retries; ``close()`` waits for the queue to drain."""

    def __init__(self, config: WebhookConfig, *, run_id: str = "", backoff_s: float = 1.0,
                 max_queue: int = 1000) -> None:
        self.config = config
        self.run_id = run_id
        self.backoff_s = backoff_s
        self.delivered = 0
        self.failed = 0
        self.dropped = 0
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self._thread = threading.Thread(target=self._loop, name="rlcockpit-webhook", daemon=True)
        self._thread.start()

    def wants(self, f: FindingRecord) -> bool:
        return bool(self.config.url) and severity_rank(f.severity) >= severity_rank(self.config.min_severity)

    def notify(self, f: FindingRecord) -> bool:
        if not self.wants(f):
            return False
        try:
            self._queue.put_nowait(self.payload(f))
        except queue.Full:
            self.dropped += 1
            return False
        return True

    def payload(self, f: FindingRecord) -> dict[str, Any]:
        return {"source": "rlcockpit", "run_id": self.run_id, "finding": to_dict(f)}

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (bounded by ``timeout``), then stop the thread."""
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            self._deliver(item)

    def _deliver(self, payload: Mapping[str, Any]) -> None:
        body = json.dumps(payload, default=str).encode("utf-8")
        attempts = 1 + self.config.retries
        for attempt in range(attempts):
            error = self._post(body)
            if error is None:
                self.delivered += 1
                return
            if attempt + 1 < attempts:
                time.sleep(self.backoff_s * (2 ** attempt))
        self.failed += 1
        log.warning("webhook %s: giving up on a %s finding after %d attempts (%s)",
                    redact_url(self.config.url), payload["finding"]["severity"], attempts, error)

    def _post(self, body: bytes) -> str | None:
        """One attempt; None when delivered, else a short reason (never the full URL)."""
        url, headers = split_userinfo(self.config.url)
        headers.update({"Content-Type": "application/json", "User-Agent": "rlcockpit-webhook"})
        request = urllib.request.Request(url, data=body, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            return type(reason).__name__ if not isinstance(reason, str) else "unreachable"
        return None if 200 <= status < 300 else f"HTTP {status}"


class Notifier:
    """Console + webhook, as configured by ``diagnostics.policy``."""

    def __init__(self, policy: PolicyConfig, *, run_id: str = "", console_file: TextIO | None = None,
                 backoff_s: float = 1.0) -> None:
        self.console = ConsoleNotifier(policy.console, console_file)
        self.webhook = WebhookNotifier(policy.webhook, run_id=run_id, backoff_s=backoff_s) \
            if policy.webhook.url else None

    def notify(self, f: FindingRecord) -> list[str]:
        sent = []
        if self.console.notify(f):
            sent.append("console")
        if self.webhook is not None and self.webhook.notify(f):
            sent.append("webhook")
        return sent

    def close(self, timeout: float = 10.0) -> None:
        if self.webhook is not None:
            self.webhook.close(timeout)
