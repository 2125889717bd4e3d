"""Loading the nats-server recording (``recorded_nats_server.json``) into NaiveViews."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from engine.store import StoredMsg
from tests.engine.query.naive_view import NaiveView

RECORDED_PATH = Path(__file__).with_name("recorded_nats_server.json")


def fixture_bytes(value: str | dict[str, str] | None) -> bytes | None:
    """Bytes as the recording stores them: UTF-8 text, or ``{"b64": ...}`` when not UTF-8."""
    if value is None:
        return None
    if isinstance(value, dict):
        return base64.b64decode(value["b64"])
    return value.encode()


def _generated_msgs(spec: dict[str, Any]) -> list[StoredMsg]:
    gen = spec["generate"]
    known = sorted((int(k), v) for k, v in spec["ts_ns_known"].items())
    msgs = []
    for seq in range(1, gen["count"] + 1):
        lo = max((k, v) for k, v in known if k <= seq)
        hi = min((k, v) for k, v in known if k >= seq)
        ts = lo[1] if hi[0] == lo[0] else lo[1] + (hi[1] - lo[1]) * (seq - lo[0]) // (hi[0] - lo[0])
        msgs.append(
            StoredMsg(seq, f"{gen['subject_prefix']}{seq - 1}", b"", gen["data"].encode(), ts)
        )
    return msgs


def load_recording() -> tuple[dict[str, NaiveView], list[dict[str, Any]]]:
    rec = json.loads(RECORDED_PATH.read_text())
    views: dict[str, NaiveView] = {}
    for name, spec in rec["streams"].items():
        if "generate" in spec:
            msgs = _generated_msgs(spec)
        else:
            msgs = [
                StoredMsg(m["seq"], m["subject"], m["hdr"].encode(), m["data"].encode(), m["ts_ns"])
                for m in spec["messages"]
            ]
        views[name] = NaiveView(name, msgs, last_seq=spec["last_seq"])
    return views, rec["cases"]
