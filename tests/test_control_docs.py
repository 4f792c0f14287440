"""docs/control.md cannot fall behind: every control route, command, setting and audit action."""

from __future__ import annotations

import re
from pathlib import Path

from rlcockpit.control import COMMANDS
from rlcockpit.control.config import ControlConfig
from rlcockpit.server.routes_control import router

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "control.md").read_text(encoding="utf-8")


def test_every_control_route_is_documented_with_its_method():
    for route in router.routes:
        for method in route.methods:
            assert f"`{method} {route.path}`" in DOC, f"{method} {route.path} missing from docs/control.md"


def test_every_command_and_setting_is_documented():
    for command in COMMANDS:
        assert f"rlcockpit {command} --run" in DOC
    for name in ControlConfig.__dataclass_fields__:
        assert f"`control.{name}`" in DOC


def test_every_audit_action_in_the_code_is_documented():
    source = "".join(p.read_text() for p in (ROOT / "src" / "rlcockpit").rglob("*.py")
                     if "control" in p.name or p.parent.name == "control" or p.name == "auth.py")
    literals = set(re.findall(r"\"((?:ticket|user|command|access)_[a-z_]+)\"", source))
    actions = {a for a in literals if not a.endswith("_id")}
    assert {"ticket_applied", "access_denied", "user_added"} <= actions
    missing = sorted(a for a in actions if f"`{a}`" not in DOC)
    assert not missing, f"docs/control.md does not name the audit actions {missing}"
