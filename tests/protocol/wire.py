"""A one-connection server built from ClientSession and Sublist, for tests.

It does what cluster/ will do for a single client with no other connections: apply the
session's actions, deliver published messages to the connection's own matching subscriptions
(echo), count auto-unsubscribe deliveries, and answer no_responders. Its output bytes can be
compared with what nats-server sends for the same input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protocol.session import (
    ClientSession,
    Close,
    Connected,
    Publish,
    Send,
    Subscribe,
    Unsubscribe,
    encode_err,
    encode_hmsg,
    encode_msg,
    no_responders_header,
)
from protocol.sublist import Sublist

MAX_PAYLOAD_BYTES = 1048576


@dataclass(eq=False)
class _Sub:
    sid: str
    subject: str
    queue: str | None
    max_msgs: int | None = None
    delivered: int = 0


@dataclass
class WireResult:
    output: bytes
    closed: bool
    actions: list[Any] = field(default_factory=list)


class OneConnectionServer:
    def __init__(self, info: dict[str, Any]) -> None:
        self.session = ClientSession(info, MAX_PAYLOAD_BYTES)
        self.subs: dict[str, _Sub] = {}
        self.sublist: Sublist[_Sub] = Sublist()
        self.echo = True
        self.no_responders = False
        self.out = bytearray()
        self.closed = False
        self.actions: list[Any] = []

    def feed(self, data: bytes) -> None:
        self.session.receive_data(data)
        while (action := self.session.next_action()) is not None:
            self.actions.append(action)
            self._apply(action)

    def _apply(self, action: Any) -> None:
        if isinstance(action, Send):
            self.out += action.data
        elif isinstance(action, Connected):
            self.echo = action.echo
            self.no_responders = action.no_responders
        elif isinstance(action, Subscribe):
            sub = _Sub(action.sid, action.subject, action.queue)
            self.subs[action.sid] = sub
            self.sublist.insert(action.subject, action.queue, sub)
        elif isinstance(action, Unsubscribe):
            sub = self.subs.get(action.sid)
            if sub is None:
                return
            if action.max_msgs is None or sub.delivered >= action.max_msgs:
                self._remove(sub)
            else:
                sub.max_msgs = action.max_msgs
        elif isinstance(action, Publish):
            self._publish(action)
        elif isinstance(action, Close):
            if action.err is not None:
                self.out += encode_err(action.err)
            self.closed = True
        else:  # pragma: no cover
            raise AssertionError(action)

    def _remove(self, sub: _Sub) -> None:
        self.sublist.remove(sub.subject, sub.queue, sub)
        del self.subs[sub.sid]
        self.session.forget_subscription(sub.sid)

    def _publish(self, pub: Publish) -> None:
        result = self.sublist.match(pub.subject)
        targets = list(result.plain) + [members[0] for members in result.queues.values()]
        if not targets and pub.reply and self.no_responders:
            for sub in self.sublist.match(pub.reply).plain:
                hdr = no_responders_header(pub.subject)
                self.out += encode_hmsg(pub.reply, sub.sid, None, hdr, b"")
            return
        if not self.echo:
            return
        for sub in targets:
            if pub.hdr is not None:
                self.out += encode_hmsg(pub.subject, sub.sid, pub.reply, pub.hdr, pub.payload)
            else:
                self.out += encode_msg(pub.subject, sub.sid, pub.reply, pub.payload)
            sub.delivered += 1
            if sub.max_msgs is not None and sub.delivered >= sub.max_msgs:
                self._remove(sub)


def run(data: bytes, info: dict[str, Any]) -> WireResult:
    server = OneConnectionServer(info)
    server.feed(data)
    return WireResult(bytes(server.out), server.closed, server.actions)
