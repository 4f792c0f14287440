"""The server's one frozen config (what ``rlcockpit serve`` and ``create_app`` take)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcockpit.config import Config, check, option

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


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

    def __post_init__(self) -> None:
        super().__post_init__()
        check(bool(self.host.strip()), "host", self.host, "give an address such as 127.0.0.1")
        check(bool(self.store.strip()), "store", self.store,
              "give a store URI such as sqlite:///rlcockpit.db")

    @property
    def is_loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS or self.host.startswith("127.")
