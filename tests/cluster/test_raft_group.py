"""The Raft glue's durability rule: an append is acknowledged only once it is on disk."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pysyncobj.node import Node

from cluster.raft_group import RaftDriver, _GroupTransport
from cluster.raft_journal import DurableJournal


class _Routes:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, Any]]] = []

    def send_raft(self, peer: str, group: str, message: dict[str, Any]) -> bool:
        self.sent.append((peer, group, message))
        return True


class _Driver:
    def __init__(self) -> None:
        self.sync_requests: list[str] = []

    def request_sync(self, name: str) -> None:
        self.sync_requests.append(name)


def test_append_reply_waits_for_fsync(tmp_path: Path) -> None:
    routes, driver = _Routes(), _Driver()
    journal = DurableJournal(tmp_path / "j")
    journal.add(b"\x01", 1, 0)
    journal.sync()
    transport = _GroupTransport("S.X", routes, driver)  # type: ignore[arg-type]
    transport.journal = journal
    leader = Node("n1")
    ack = {"type": "next_node_idx", "next_node_idx": 3, "reset": False, "success": True}

    journal.add(b"\x00entry", 2, 1)  # an append from the leader, not yet on disk
    transport.send(leader, ack)
    assert routes.sent == [] and driver.sync_requests == ["S.X"]
    # other messages (votes, negative replies) do not wait
    transport.send(leader, {"type": "next_node_idx", "success": False, "reset": True})
    assert len(routes.sent) == 1

    RaftDriver._sync(SimpleNamespace(journal=journal, transport_=transport))  # type: ignore[arg-type]
    assert not journal.dirty
    assert routes.sent[-1] == ("n1", "S.X", ack)

    # nothing pending: the reply goes straight out
    transport.send(leader, ack)
    assert routes.sent[-1] == ("n1", "S.X", ack) and len(routes.sent) == 3
    journal._destroy()
