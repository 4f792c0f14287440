"""``rlcockpit serve``: the cockpit web server (JSON API, live stream, web UI) over one store."""

from __future__ import annotations

import argparse
import dataclasses
import socket
from typing import Any

DEFAULT_STORE = "sqlite:///rlcockpit.db"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve", help="serve the cockpit (web UI, JSON API, live stream) for a store",
        description="Serve the cockpit for the runs in a store: the web UI at /, the JSON API "
                    "under /api (docs/server.md), live server-sent events per run. Binds to "
                    "127.0.0.1 unless told otherwise.")
    p.add_argument("--store", default=DEFAULT_STORE, help=f"store URI (default {DEFAULT_STORE})")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    p.add_argument("--query-timeout", type=float, default=2.0,
                   help="seconds one request's store reads may take before 504 (default 2)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a name the Host header may carry besides the loopback names and the "
                        "bound address (repeatable; '*' = any). Needed with --host 0.0.0.0: "
                        "the name people type in the browser")
    p.add_argument("--worker-threads", type=int, default=4,
                   help="API requests answered at once (default 4; keeps a trainer on the same "
                        "machine fed)")
    p.add_argument("--session-ttl", type=float, default=43_200.0, metavar="SECONDS",
                   help="life of a browser session a one-time sign-in link is exchanged for "
                        "(default 43200 = 12 h; docs/control.md)")
    p.add_argument("--metrics", action=argparse.BooleanOptionalAction, default=True,
                   help="serve Prometheus metrics at /metrics (default on; docs/ops.md)")
    p.add_argument("--metrics-refresh", type=float, default=2.0, metavar="SECONDS",
                   help="/metrics reads the store at most this often (default 2)")
    p.add_argument("--metrics-runs", type=int, default=20, metavar="N",
                   help="/metrics exports the N most recent runs, running ones first (default 20)")
    p.add_argument("--alertmanager-url", default="", metavar="URL",
                   help="forward every new finding in the store (any trainer, the TRL callback, follow "
                        "mode) to this Alertmanager (API v2; docs/ops.md)")
    p.add_argument("--alertmanager-min-severity", default="yellow",
                   choices=("info", "yellow", "orange", "red", "black"),
                   help="lowest severity forwarded (default yellow)")
    p.add_argument("--log-format", choices=("console", "json"), default="console",
                   help="json: one JSON object per log line with rl_component=server (docs/ops.md)")
    p.add_argument("--loki-url", default="", metavar="URL",
                   help="also push the server's log lines to this Loki (base URL)")
    p.set_defaults(func=_command)


def settings_from_args(args: argparse.Namespace) -> Any:
    from rlcockpit.server.settings import ServerSettings

    return ServerSettings(host=args.host, port=args.port, store=args.store,
                          query_timeout_s=args.query_timeout,
                          allowed_hosts=tuple(args.allowed_host),
                          worker_threads=args.worker_threads, session_ttl_s=args.session_ttl)


def _command(args: argparse.Namespace) -> int:
    import uvicorn

    from rlcockpit.server.app import create_app
    from rlcockpit.server.auth import control_for
    from rlcockpit.store import open_store

    settings = settings_from_args(args)
    if settings.port == 0:  # pick the free port here, so the printed URL is the real one
        settings = dataclasses.replace(settings, port=free_port(settings.host))
    store = open_store(settings.store, create=False)
    access, control = control_for(settings, store)  # refuses a non-loopback bind without users
    app = create_app(settings, store, access=access, control=control, metrics=metrics_hook(args))
    print(f"rlcockpit cockpit for {settings.store}: http://{_url_host(settings.host)}:"
          f"{settings.port}/  (Ctrl-C stops)", flush=True)
    handlers = _structured_logs(args)
    forwarder = _forward_findings(args, store, f"http://{_url_host(settings.host)}:{settings.port}")
    try:
        uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning",
                    log_config=None if handlers else uvicorn.config.LOGGING_CONFIG)
    finally:
        if forwarder is not None:
            forwarder.close()
        for handler in handlers:
            handler.close()
    return 0


def _forward_findings(args: argparse.Namespace, store: Any, cockpit_url: str) -> Any:
    if not args.alertmanager_url:
        return None
    from rlcockpit.integrations.alertmanager import AlertmanagerSink, StoreForwarder

    sink = AlertmanagerSink(args.alertmanager_url, min_severity=args.alertmanager_min_severity,
                            cockpit_url=cockpit_url)
    return StoreForwarder(store.reader(), sink)


def _structured_logs(args: argparse.Namespace) -> list[Any]:
    """``--log-format json`` / ``--loki-url``: the server's and uvicorn's log lines as JSON."""
    if args.log_format != "json" and not args.loki_url:
        return []
    import logging

    from rlcockpit.integrations.logs import configure

    handlers = configure(args.log_format, loki_url=args.loki_url)
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers = list(handlers)
        logger.propagate = False
        logger.setLevel(logging.WARNING)
    return handlers


def metrics_hook(args: argparse.Namespace) -> Any:
    """The Prometheus exporter the server's ``/metrics`` calls (None with --no-metrics)."""
    if not args.metrics:
        return None
    from rlcockpit.errors import ConfigError

    try:
        import prometheus_client  # noqa: F401  (fail fast, here, not at the first scrape)

        from rlcockpit.integrations.prometheus import StoreExporter
    except ImportError as exc:
        raise ConfigError("/metrics needs prometheus-client: pip install 'rlcockpit[server]' (or "
                          "serve with --no-metrics)", details={"key": "--metrics"}) from exc
    try:
        return StoreExporter(refresh_s=args.metrics_refresh, max_runs=args.metrics_runs)
    except ValueError as exc:
        raise ConfigError(f"{exc}: give --metrics-refresh >= 0 and --metrics-runs >= 1",
                          details={"key": "--metrics-refresh"}) from exc


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def free_port(host: str) -> int:
    """A port the OS says is free on ``host`` right now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
