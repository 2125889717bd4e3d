# The C forms of engine.records' MSG encoder and engine.entries' message walk; present only in the
# native build (engine/_codec_c.c).
from collections.abc import Callable, MutableMapping
from typing import TypeVar

from engine.entries import InboundMsg
from engine.store import StoredMsg

_M = TypeVar("_M")
_K = TypeVar("_K")
_V = TypeVar("_V")

def append_msg_fields(
    buf: bytearray, seq: int, subject: str, hdr: bytes, data: bytes, ts_ns: int, /
) -> int: ...
def decode_msg_at(
    buf: bytes | bytearray, offset: int, length: int, seq: int, cls: type[StoredMsg], /
) -> StoredMsg | None: ...
def decode_msgs(
    buf: bytes, pos: int, end: int, count: int, make: Callable[[str, bytes, bytes], _M], /
) -> tuple[list[_M], int]: ...
def encode_msgs(msgs: tuple[InboundMsg, ...], /) -> bytes: ...
def set_untracked(mapping: MutableMapping[_K, _V], key: _K, value: _V, /) -> None: ...
def crc_source() -> str: ...
def content_fingerprint(hdr: bytes, data: bytes, /) -> int: ...
