"""Frames on the cluster port: routes (interest and messages) and Raft traffic on one connection.

A frame is ``[u32 body length][u8 kind][body]``; the body is MessagePack (binary-safe, no code
execution on decode — never pickle between nodes). Each node dials every peer and only *sends* on
the connection it dialed, so a pair of nodes has one connection per direction and frames from a
peer arrive in the order it sent them (interest before the messages that rely on it).

Frame bodies by kind:

* ``HELLO``  ``{"v", "name", "cluster"[, "id", "client_urls", "user", "pass" | "token"]}`` —
  first frame on a dialed connection, with the route credentials when the cluster has route
  authorization and the client URLs the node advertises (cluster/client_urls.py); at most
  ``HELLO_BYTES_MAX`` bytes, and nothing else is read before it was accepted.
* ``RAFT``   ``[group, message]`` — a pysyncobj message (a dict of ints, strs, bytes, lists).
* ``SUB``    ``[subject, queue | None, weight, excluded prefix | None]`` — the sender has interest
  (weight = local members of a queue group, 1 for plain interest) except in subjects under the
  prefix (``$JS.API.>`` minus Direct Get); a repeated SUB updates the weight.
* ``UNSUB``  ``[subject, queue | None]`` — the sender's interest is gone.
* ``MSG``    ``[subject, reply | None, hdr | None, payload, plain: bool, queues: [str]
  [, shown]]`` — deliver to the receiver's plain subscribers if ``plain``, and to one local member
  of each listed queue group (the sender already chose this node for them); with ``shown`` the
  subscribers see that subject instead of the one matched (a consumer's delivery).
* ``CATCHUP`` ``[group, transfer_id, part, data]`` — state transfer between the replicas of one
  Raft group (checked by protocol/raft_messages.py ``validate_catchup_message``).
* ``LAME_DUCK`` ``None`` — the sender entered lame duck mode: the receiver stops telling its
  clients the sender's client URLs and places no new stream on it.

Must never: execute anything from a frame, or accept a frame over ``FRAME_BYTES_MAX``.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any

import msgpack

ROUTE_PROTOCOL_VERSION = 1
FRAME_HEADER = struct.Struct(">IB")
FRAME_BYTES_MAX = 256 * 1024 * 1024  # a Raft append of a 1000-message batch of 1 MiB payloads fits
HELLO_BYTES_MAX = 4096  # all a connection may send before it authenticated


class FrameKind(IntEnum):
    HELLO = 1
    RAFT = 2
    SUB = 3
    UNSUB = 4
    MSG = 5
    CATCHUP = 6
    LAME_DUCK = 7


# kind byte -> FrameKind, looked up per frame (calling the IntEnum to convert is an interpreted
# call costing several times the lookup)
_KINDS: dict[int, FrameKind] = {int(kind): kind for kind in FrameKind}


class FrameError(ValueError):
    """The peer sent something that is not a frame; the connection must be dropped."""


def encode_frame(kind: FrameKind, body: Any) -> bytes:
    return _framed(kind, msgpack.packb(body, use_bin_type=True))


class FrameEncoder:
    """``encode_frame`` with one msgpack packer kept for every frame: building a packer costs
    about as much as packing a Raft message (0.3 us of 0.4-0.65). One per connection, used by
    one thread (the packer's buffer is its state)."""

    def __init__(self) -> None:
        self._packer = msgpack.Packer(use_bin_type=True)

    def encode(self, kind: FrameKind, body: Any) -> bytes:
        return _framed(kind, self._packer.pack(body))


def _framed(kind: FrameKind, data: bytes) -> bytes:
    if len(data) > FRAME_BYTES_MAX:
        raise FrameError(f"frame of {len(data)} bytes exceeds {FRAME_BYTES_MAX}")
    return FRAME_HEADER.pack(len(data), kind) + data


class FrameReader:
    """Accumulates bytes from the socket and yields complete ``(kind, body)`` frames."""

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX) -> None:
        self._buf = bytearray()
        # before a peer authenticated only a small HELLO is accepted (HELLO_BYTES_MAX)
        self.frame_bytes_max = frame_bytes_max

    @property
    def buffered(self) -> int:
        """Bytes received and not yet part of a complete frame."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[tuple[FrameKind, Any]]:
        buf = self._buf
        buf += data
        frames: list[tuple[FrameKind, Any]] = []
        pos = 0
        header = FRAME_HEADER.size
        while len(buf) - pos >= header:
            length, kind = FRAME_HEADER.unpack_from(buf, pos)
            if length > self.frame_bytes_max:
                raise FrameError(f"frame length {length} exceeds {self.frame_bytes_max}")
            end = pos + header + length
            if len(buf) < end:
                break
            frame_kind = _KINDS.get(kind)
            if frame_kind is None:
                raise FrameError(f"bad frame (kind {kind}): unknown kind")
            try:
                # a bytearray slice: one copy (msgpack reads any buffer)
                body = msgpack.unpackb(buf[pos + header : end], raw=False, strict_map_key=False)
            except (ValueError, msgpack.UnpackException) as exc:
                raise FrameError(f"bad frame (kind {kind}): {exc}") from exc
            frames.append((frame_kind, body))
            pos = end
        if pos:
            del buf[:pos]
        return frames
