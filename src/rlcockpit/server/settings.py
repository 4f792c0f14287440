"""The server's one frozen config (what ``rlcockpit serve`` and ``create_app`` take)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, check, option

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
WILDCARD_BINDS = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class ServerSettings(Config):
    """Where the server listens, which store it reads, and the limits that keep it responsive."""

    host: str = option("127.0.0.1", help="Address to bind. Loopback by default: the cockpit shows "
                                         "training data; bind wider only with users (issue 6).")
    port: int = option(8765, help="TCP port (0 picks a free one).", range=(0, 65535))
    store: str = option("sqlite:///rlcockpit.db", help="Store URI to read (see docs/store.md).")
    query_timeout_s: float = option(2.0, help="Time limit of one request's store reads; a read "
                                              "over it is interrupted and answered with 504 "
                                              "query_timeout.", range=(0.001, 600.0))
    max_points: int = option(20000, help="Largest max_points a series or compare request may ask "
                                         "for.", range=(8, 1_000_000))
    max_histogram_points: int = option(2000, help="Largest number of histogram steps one "
                                                  "request may ask for.", range=(2, 100_000))
    max_names: int = option(500, help="Largest number of metric names one series request may "
                                      "expand to (wildcards included).", range=(1, 100_000))
    sse_poll_s: float = option(0.25, help="How often a live stream polls the store for new "
                                          "steps, findings, phases and events.",
                               range=(0.01, 60.0))
    keepalive_s: float = option(15.0, help="Seconds between SSE keep-alive comments on a quiet "
                                           "stream.", range=(0.05, 3600.0))
    static_dir: str = option("", help="Directory of the web UI (index.html and assets); empty "
                                      "means the UI bundled in rlcockpit/server/static.")
    allowed_hosts: tuple[str, ...] = option(
        (), help="Host names a request's Host header may carry (DNS-rebinding guard), besides "
                 "the loopback names and the bound address; '*' allows any. Give the names "
                 "people type in the browser when binding wider than loopback.")
    max_body_bytes: int = option(1_048_576, help="Largest request body accepted; a larger one "
                                                 "is refused with 413 before authentication "
                                                 "or parsing.", range=(1024, 1 << 30))
    worker_threads: int = option(4, help="Threads that answer API requests at once (the rest "
                                         "wait their turn): bounds the CPU the server takes "
                                         "from a trainer on the same machine.", range=(1, 256))
    worker_nice: int = option(10, help="How many steps nicer than the process the server's "
                                       "event loop, worker and stream threads run (0: as the "
                                       "process; capped at niceness 19), so a trainer on the "
                                       "same machine wins the CPU.", range=(0, 19))
    read_cache_s: float = option(2.0, help="Longest time one answer of a read route about a run "
                                           "(its curves, samples, findings, ...) is given to "
                                           "other callers asking the same while the run has not "
                                           "been written since; 0: every request reads the "
                                           "store.", range=(0.0, 60.0))
    max_streams: int = option(64, help="Live streams open at once; one more is answered 503 "
                                       "too_many_streams.", range=(1, 10_000))
    refusal_window_s: float = option(60.0, help="Window of the audit log's refusal limiter: per "
                                                "(caller, action, reason, route), at most "
                                                "refusal_burst refused attempts a window get a "
                                                "row each (an anonymous caller: 1); the rest "
                                                "are counted into one refusals_suppressed row.",
                                     range=(0.001, 86_400.0))
    refusal_burst: int = option(10, help="Refused attempts of one signed-in caller per key and "
                                         "window that get their own audit row.",
                                range=(1, 1_000_000))
    session_ttl_s: float = option(43_200.0, help="Life of a browser session (what a one-time "
                                                 "sign-in code is exchanged for at POST "
                                                 "/api/session); 12 h by default.",
                                  range=(60.0, 30 * 86_400.0))
    auth_fail_burst: int = option(20, help="Failed token checks (an unknown or wrong token or "
                                           "sign-in code) one client address may make at once; "
                                           "past them its token checks are answered 429 "
                                           "too_many_attempts with Retry-After.",
                                  range=(1, 1_000_000))
    auth_fail_refill_s: float = option(3.0, help="One more failed token check is allowed to a "
                                                 "client address every this many seconds.",
                                       range=(0.001, 3600.0))
    stream_auth_check_s: float = option(2.0, help="How often an open live stream checks its "
                                                  "caller's token or session again; a revoked "
                                                  "or expired one ends the stream.",
                                        range=(0.05, 60.0))

    def __post_init__(self) -> None:
        super().__post_init__()
        check(bool(self.host.strip()), "host", self.host, "give an address such as 127.0.0.1")
        check(bool(self.store.strip()), "store", self.store,
              "give a store URI such as sqlite:///rlcockpit.db")

    @property
    def is_loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS or self.host.startswith("127.")

    def host_names(self) -> frozenset[str] | None:
        """Lower-case names the Host header may carry (port stripped); None: any name."""
        extra = {h.strip().lower() for h in self.allowed_hosts if h.strip()}
        if "*" in extra:
            return None
        names = {"localhost", "127.0.0.1", "::1", *extra}
        if self.host not in WILDCARD_BINDS:
            names.add(self.host.lower())
        return frozenset(names)
