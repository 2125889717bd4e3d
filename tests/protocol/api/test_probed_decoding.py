"""Go ``encoding/json`` behaviour, checked against bodies recorded from nats-server 2.15.1.

``probed_decode.json``: STREAM.INFO bodies (syntax errors, offsets, type errors, the decoder's
multi-value loop, case-insensitive names, invalid UTF-8) and STREAM.CREATE bodies (custom enum
unmarshalers, time parsing, nested paths), each with nats-server's error or resulting config.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from protocol import api_json
from protocol.errors import ApiError
from protocol.stream_config import config_to_json, normalize_create

CASES: list[dict[str, Any]] = json.loads(Path(__file__).with_name("probed_decode.json").read_text())


def _run(case: dict[str, Any]) -> dict[str, Any]:
    body = base64.b64decode(case["body_b64"])
    try:
        if ".INFO." in case["subject"]:
            api_json.parse_info_request(body)
            return {"error": None}
        cfg, _ = normalize_create("X", body, existing={})
        return {"error": None, "config": config_to_json(cfg)}
    except ApiError as err:
        return {"error": err.to_json()}


@pytest.mark.parametrize(
    "case", CASES, ids=[base64.b64decode(c["body_b64"]).decode("latin-1")[:50] for c in CASES]
)
def test_decoding_matches_nats_server(case: dict[str, Any]) -> None:
    ours = _run(case)
    assert ours["error"] == case["error"]
    if case.get("config") is not None:
        assert json.dumps(ours["config"]) == json.dumps(case["config"])
