"""docs/control.md cannot fall behind: every control route, command, setting and audit action."""

from __future__ import annotations

import re
from pathlib import Path

from rlcockpit.control import COMMANDS
from rlcockpit.control.config import ControlConfig
from rlcockpit.server.routes import CONTROL_ROUTERS

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "control.md").read_text(encoding="utf-8")


def test_every_control_route_is_documented_with_its_method():
    for route in (route for router in CONTROL_ROUTERS for route in router.routes):
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
    actions = {a for a in literals if not a.endswith(("_id", "_token"))}
    assert {"ticket_applied", "access_denied", "user_added"} <= actions
    missing = sorted(a for a in actions if f"`{a}`" not in DOC)
    assert not missing, f"docs/control.md does not name the audit actions {missing}"


def test_control_pages_labels_exist_in_both_languages():
    static = ROOT / "src" / "rlcockpit" / "server" / "static" / "js" / "views"
    text = (static / "control_i18n.js").read_text(encoding="utf-8")
    en_part, zh_part = text.split("export const ZH")
    pair = re.compile(r'"(ctl\.[a-z_0-9]+)"\s*:\s*"((?:[^"\\]|\\.)*)"')
    en, zh = dict(pair.findall(en_part)), dict(pair.findall(zh_part))
    assert len(en) > 40 and set(en) == set(zh)
    assert not [k for k in en if en[k] == zh[k] and re.search(r"[a-z]{3}", en[k])], "untranslated labels"
    used = set()
    for name in ("tickets.js", "audit.js", "liveparams.js", "control_common.js"):
        used |= set(re.findall(r'"(ctl\.[a-z_0-9]+)"', (static / name).read_text(encoding="utf-8")))
    statuses = {f"ctl.st_{s}" for s in ("requested", "approved", "rejected", "cancelled", "applied", "evaluated",
                                         "failed")}
    commands = {f"ctl.cmd_{c}" for c in COMMANDS}
    columns = {k for k in en if k.startswith("ctl.col_")}
    assert not (used - set(en)), f"labels used but not defined: {sorted(used - set(en))}"
    assert statuses | commands <= set(en)
    assert columns  # the table headers are built from ctl.col_<name>
