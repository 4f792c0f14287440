"""The one server kit of the tests: a free loopback port, and an ASGI app served by uvicorn on a
background thread (the server `rlcockpit serve` runs). API, SSE, ops, TRL and browser tests all
start their servers here; the synthetic stores they serve are in storekit.py.

    with ServerThread(create_app(settings, store)) as url: ...    # stopped on exit
    server = serve_store(uri, plane=plane)                        # started; server.stop() later
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

LOCAL = "http://127.0.0.1"  # the Host the server answers by default (DNS-rebinding guard)


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """uvicorn serving ``app`` on its own thread. ``with ServerThread(app) as url`` starts and stops
    it; :meth:`start` / :meth:`stop` do the same for fixtures. ``graceful_s`` bounds the wait for
    open connections (an SSE stream, a browser) at stop; None waits for them."""

    def __init__(self, app: Any, host: str = "127.0.0.1", *, port: int | None = None,
                 graceful_s: float | None = None) -> None:
        import uvicorn

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host=host, port=self.port, log_level="warning", lifespan="on",
                                timeout_graceful_shutdown=graceful_s)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="test-uvicorn", daemon=True)

    def start(self, timeout: float = 20.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"uvicorn did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def __enter__(self) -> str:
        return self.start().url

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def serve_store(uri: str, store: Any = None, *, plane: Any = None, access: Any = None,
                **settings: Any) -> ServerThread:
    """The cockpit over the store at ``uri`` (``store``: an opened one), started: with ``plane``
    its control plane and the plane's sign-in (``Access``) unless ``access`` is given.
    ``settings`` are :class:`ServerSettings` fields (the SSE poll defaults to 0.1 s)."""
    from rlcockpit.server.app import create_app
    from rlcockpit.server.auth import Access
    from rlcockpit.server.settings import ServerSettings

    port = free_port()
    config = ServerSettings(store=uri, port=port, **{"sse_poll_s": 0.1, **settings})
    if plane is not None and access is None:
        access = Access(plane)
    app = create_app(config, store, access=access, control=plane)
    return ServerThread(app, port=port, graceful_s=1).start()
