"""The detector registry: built-in detectors register exactly the way a user's own detector does.

    from rlcockpit.diagnostics import Detector, Condition, register

    @register
    class MyDetector(Detector):
        name = "my_detector"
        reads = ("reward/mean",)
        def update(self, view): ...

Built-ins live one per file in :mod:`rlcockpit.diagnostics.detectors` and are imported on first use.
"""

from __future__ import annotations

import importlib
import pkgutil

from rlcockpit.diagnostics.base import Detector
from rlcockpit.errors import ConfigError

_REGISTRY: dict[str, type[Detector]] = {}
_BUILTINS_LOADED = False


def register(cls: type[Detector]) -> type[Detector]:
    """Class decorator adding a detector to the registry under ``cls.name``."""
    if not isinstance(cls, type) or not issubclass(cls, Detector):
        raise ConfigError(f"register() takes a Detector subclass, got {cls!r}")
    if not cls.name:
        raise ConfigError(f"detector {cls.__name__} has no `name`; set name = \"...\" on the class")
    known = _REGISTRY.get(cls.name)
    if known is not None and known.__qualname__ != cls.__qualname__:
        raise ConfigError(f"two detectors are named {cls.name!r}: {known.__module__}."
                          f"{known.__qualname__} and {cls.__module__}.{cls.__qualname__}; rename one")
    _REGISTRY[cls.name] = cls
    return cls


def load_builtins() -> None:
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    from rlcockpit.diagnostics import detectors

    for info in pkgutil.iter_modules(detectors.__path__):
        importlib.import_module(f"{detectors.__name__}.{info.name}")
    _BUILTINS_LOADED = True


def available() -> dict[str, type[Detector]]:
    """Every registered detector by name (built-ins included), sorted by name."""
    load_builtins()
    return dict(sorted(_REGISTRY.items()))


def get(name: str) -> type[Detector]:
    found = available()
    if name not in found:
        import difflib

        close = difflib.get_close_matches(name, list(found), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown detector {name!r}{hint} (known: {', '.join(found)})",
                          details={"key": f"diagnostics.detectors.{name}"})
    return found[name]
