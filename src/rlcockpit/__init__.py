"""rlcockpit — a cockpit for RL post-training of language models.

``import rlcockpit`` stays light: no torch, no fastapi. The telemetry SDK is loaded on first use::

    import rlcockpit
    with rlcockpit.init(project="demo", name="run-1", store="sqlite:///rlcockpit.db") as run:
        run.log(step, {"reward/mean": 0.4})
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlcockpit._version import __version__

if TYPE_CHECKING:
    from rlcockpit.telemetry import Run


def init(*args: Any, **kwargs: Any) -> Run:
    """Start a run and return its :class:`rlcockpit.telemetry.Run` (see that function's docs)."""
    from rlcockpit.telemetry import init as _init

    return _init(*args, **kwargs)


__all__ = ["__version__", "init"]
