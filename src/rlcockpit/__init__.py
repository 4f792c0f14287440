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
    from collections.abc import Mapping

    from rlcockpit.control import ControlConfig
    from rlcockpit.telemetry import Run


def init(*args: Any, live_params: Mapping[str, Any] | None = None,
         control: bool | ControlConfig | None = None, **kwargs: Any) -> Run:
    """Start a run and return its :class:`rlcockpit.telemetry.Run` (see that function's docs).

    ``live_params`` (``{name: LiveParam(value, lo=, hi=)}`` or ``{name: (value, lo, hi)}``) are the
    knobs operators may change by ticket; with them, or with ``control=True`` (commands only) or a
    ``ControlConfig``, the run takes approved tickets and pause / resume / stop at the loop's own
    boundary: ``for change in run.pending_changes(step): ...`` (docs/integrations.md).
    """
    from rlcockpit.telemetry import init as _init

    if control is False and live_params:
        raise _config_error("live_params need the control link: drop control=False")
    if not (live_params or control):
        return _init(*args, **kwargs)
    from rlcockpit.control import ControlConfig
    from rlcockpit.integrations.loop_control import attach, live_params_of
    from rlcockpit.store import open_store

    params = live_params_of(live_params)  # fail fast, before the run exists
    cfg = control if isinstance(control, ControlConfig) else ControlConfig()
    store = kwargs.get("store", args[2] if len(args) > 2 else None)
    run = _init(*args, **kwargs)
    try:
        opened = store if hasattr(store, "control") else open_store(run.store_uri)
        attach(run, opened, params, cfg)
    except BaseException:
        run.close("failed")
        raise
    return run


def _config_error(message: str) -> Exception:
    from rlcockpit.errors import ConfigError

    return ConfigError(message, details={"key": "control"})


def __getattr__(name: str) -> Any:
    if name == "LiveParam":  # lazy: importing rlcockpit loads nothing else
        from rlcockpit.integrations.loop_control import LiveParam

        return LiveParam
    raise AttributeError(f"module 'rlcockpit' has no attribute {name!r}")


__all__ = ["LiveParam", "__version__", "init"]
