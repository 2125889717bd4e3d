"""The meta group's state machine: which streams exist, their config, and their peers.

Commands are small JSON documents with a version field (``encode_meta_command``); ``apply`` is
deterministic — the same log gives every node the same assignments. Validation against the
request happens on the meta leader before it proposes; ``apply`` re-checks what a race could
break (two creates of one name) and returns an outcome instead of raising.

Must never: read clocks or local node state inside ``apply``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

META_COMMAND_VERSION = 1


class MetaCommandError(ValueError):
    pass


@dataclass
class Assignment:
    name: str
    config: dict[str, Any]
    peers: list[str]
    created_ns: int
    # a restored backup: the replicas wait for the state the first peer seeds (raft_log.seed)
    restoring: bool = False

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "config": self.config,
            "peers": self.peers,
            "created_ns": self.created_ns,
        }
        if self.restoring:
            doc["restoring"] = True
        return doc


@dataclass
class MetaState:
    assignments: dict[str, Assignment] = field(default_factory=dict)

    def apply(self, cmd: dict[str, Any]) -> str | None:
        """Apply one command; returns None on success or a short reason it had no effect."""
        op = cmd["op"]
        name = str(cmd["name"])
        if op == "add":
            if name in self.assignments:
                return "exists"
            self.assignments[name] = Assignment(
                name,
                dict(cmd["config"]),
                [str(p) for p in cmd["peers"]],
                int(cmd["created_ns"]),
                cmd.get("restoring") is True,
            )
            return None
        if op == "del":
            sa = self.assignments.get(name)
            if sa is None:
                return "missing"
            if "created_ns" in cmd and int(cmd["created_ns"]) != sa.created_ns:
                return "another incarnation"  # (a failed restore's undo, after a re-create)
            del self.assignments[name]
            return None
        if op == "upd":
            sa = self.assignments.get(name)
            if sa is None:
                return "missing"
            sa.config = dict(cmd["config"])
            return None
        raise MetaCommandError(f"unknown meta op {op!r}")

    def to_json(self) -> dict[str, Any]:
        return {"assignments": [sa.to_json() for _, sa in sorted(self.assignments.items())]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> MetaState:
        state = cls()
        for item in doc.get("assignments", []):
            sa = Assignment(
                str(item["name"]),
                dict(item["config"]),
                [str(p) for p in item["peers"]],
                int(item["created_ns"]),
                item.get("restoring") is True,
            )
            state.assignments[sa.name] = sa
        return state


def encode_meta_command(cmd: dict[str, Any]) -> bytes:
    return json.dumps({"v": META_COMMAND_VERSION, **cmd}, separators=(",", ":")).encode()


def decode_meta_command(data: bytes) -> dict[str, Any]:
    try:
        cmd = json.loads(data)
    except ValueError as exc:
        raise MetaCommandError(f"bad meta command: {exc}") from None
    if not isinstance(cmd, dict) or cmd.get("v") != META_COMMAND_VERSION:
        raise MetaCommandError(f"unsupported meta command version: {data[:40]!r}")
    return cmd
