"""Replay every request recorded against nats-server v2.15.1 and demand the same bytes.

The recording (``recorded_nats_server.json``, made by /tmp/d2_probe/probe.py over raw TCP) holds
the streams' exact messages and timestamps, so even ``Nats-Time-Stamp`` must match exactly.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.direct_get import direct_get
from engine.msg_get import msg_get
from tests.engine.query.query_recording import fixture_bytes, load_recording

VIEWS, CASES = load_recording()
DIRECT = [c for c in CASES if c["api"] == "direct"]
MSG_GET = [c for c in CASES if c["api"] == "msg_get"]


def _as_recorded(replies: list[Any]) -> list[dict[str, Any]]:
    out = []
    for r in replies:
        out.append(
            {
                "kind": "MSG" if r.hdr is None else "HMSG",
                "hdr": fixture_bytes(None if r.hdr is None else r.hdr.decode()),
                "data": r.data,
            }
        )
    return out


@pytest.mark.parametrize("case", DIRECT, ids=[c["id"] for c in DIRECT])
def test_direct_get_matches_nats_server(case: dict[str, Any]) -> None:
    replies = direct_get(
        VIEWS[case["stream"]],
        reply_stream_name=case["stream"],
        request_hdr=fixture_bytes(case["hdr"]),
        payload=fixture_bytes(case["payload"]) or b"",
        subject_key=case["key"],
    )
    expected = [
        {"kind": r["kind"], "hdr": fixture_bytes(r["hdr"]), "data": fixture_bytes(r["data"])}
        for r in case["replies"]
    ]
    assert _as_recorded(replies) == expected


@pytest.mark.parametrize("case", MSG_GET, ids=[c["id"] for c in MSG_GET])
def test_msg_get_matches_nats_server(case: dict[str, Any]) -> None:
    response = msg_get(VIEWS[case["stream"]], fixture_bytes(case["payload"]) or b"")
    expected = json.loads(case["response"])
    assert response == expected
    assert list(response) == list(expected)  # key order, as Go writes it
    if "message" in expected:
        assert list(response["message"]) == list(expected["message"])


def test_recording_covers_every_reply_kind() -> None:
    """Guards the fixture itself: every status the module can send was seen on the wire."""
    seen = {
        (fixture_bytes(r["hdr"]) or b"").split(b"\r\n", 1)[0] for c in DIRECT for r in c["replies"]
    }
    for line in (
        b"NATS/1.0",
        b"NATS/1.0 204 EOB",
        b"NATS/1.0 404 Message Not Found",
        b"NATS/1.0 404 No Results",
        b"NATS/1.0 408 Bad Request",
        b"NATS/1.0 408 Empty Request",
        b"NATS/1.0 408 Malformed Request",
        b"NATS/1.0 412 Required Api Level",
        b"NATS/1.0 413 Too Many Results",
    ):
        assert line in seen
