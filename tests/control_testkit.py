"""A store with runs, published live parameters and one user per role, and the cockpit app over it
(real SQLite file, real FastAPI app through its test client). Used by the control-plane tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcockpit.control import Channel, ControlPlane
from rlcockpit.records import Batch as RecordBatch
from rlcockpit.records import CheckpointRecord, RunInfo
from rlcockpit.store import open_store

LOCAL = "http://127.0.0.1"  # the Host the server answers by default (DNS-rebinding guard)
RUN = "run-live"
FINISHED = "run-done"
SILENT = "run-silent"  # running, but never published live parameters
USERS = {"vera": "viewer", "olga": "operator", "otto": "operator", "alex": "approver", "anna": "approver",
         "root": "admin"}
LIVE_VALUES = {"actor_lr": 5e-5, "critic_lr": 1e-4, "kl_coef": 0.05, "kl_target": 1.0, "clip_eps": 0.2,
               "value_clip": 0.2, "entropy_coef": 0.0, "reward_scale": 1.0, "temperature": 1.0, "top_p": 1.0,
               "max_new_tokens": 24, "ppo_epochs": 2, "grad_clip_actor": 1.0, "grad_clip_embedding": 3.0,
               "grad_clip_critic": 1.0}


def live_specs() -> dict[str, dict[str, Any]]:
    from rlcockpit.trainer.live import LIVE_SPECS

    return {n: s.published() for n, s in LIVE_SPECS.items()}


@dataclass
class World:
    uri: str
    store: Any
    plane: ControlPlane
    tokens: dict[str, str]

    def headers(self, user: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[user]}"} if user else {}


_TEMPLATES: dict[bool, tuple[Path, dict[str, str]]] = {}


def build_world(tmp_path: Path, *, users: bool = True) -> World:
    """A fresh world per test: built once per process (scrypt is slow on purpose), then copied."""
    import sqlite3
    import tempfile

    if users not in _TEMPLATES:
        template = _build(Path(tempfile.mkdtemp(prefix="control-world-")), users=users)
        _TEMPLATES[users] = (template.store.path, template.tokens)
    path, tokens = _TEMPLATES[users]
    target = tmp_path / "control.db"
    with sqlite3.connect(path) as conn:  # a consistent copy, WAL included
        conn.execute("VACUUM INTO ?", (str(target),))
    store = open_store(f"sqlite:///{target}")
    return World(f"sqlite:///{target}", store, ControlPlane.over(store.control(), store.reader()), dict(tokens))


def _build(tmp_path: Path, *, users: bool) -> World:
    uri = f"sqlite:///{tmp_path / 'control.db'}"
    store = open_store(uri)
    writer = store.writer()
    for run_id, status in ((RUN, "running"), (FINISHED, "finished"), (SILENT, "running")):
        writer.create_run(RunInfo(run_id=run_id, project="p", name=run_id, status=status, heartbeat_at=9e12))
    writer.write_batch(RUN, RecordBatch(checkpoints=(CheckpointRecord(step=4, path=str(tmp_path / "ck4")),)))
    writer.close()
    control = store.control()
    for run_id in (RUN, FINISHED):
        Channel(control, run_id).publish(3, LIVE_VALUES, live_specs(), "start")
    plane = ControlPlane.over(control, store.reader())
    tokens = {}
    if users:
        for name, role in USERS.items():
            tokens[name] = plane.users.add(name, role, by="test")[1]
    return World(uri, store, plane, tokens)


def client(world: World) -> Any:
    from fastapi.testclient import TestClient

    from rlcockpit.server.app import create_app
    from rlcockpit.server.auth import Access
    from rlcockpit.server.settings import ServerSettings

    app = create_app(ServerSettings(store=world.uri), world.store, access=Access(world.plane),
                     control=world.plane)
    return TestClient(app, base_url=LOCAL)


def audit_tail(world: World, n: int = 1) -> list[Any]:
    return world.plane.store.read_audit()[-n:]
