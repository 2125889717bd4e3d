"""Replay requests recorded from nats-server 2.15.1 and compare every answer.

``probed_responses.json`` holds the request sequence and the real server's replies (recorded
with a throwaway script against ``nats-server -js``; the steps depend on each other: later
creates overlap earlier streams, updates act on created ones). The replay keeps the same stream
table and checks, per step, that our decoding/validation gives the same error
(code, err_code, description) or the same normalized ``config`` — key order included.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from protocol import api_json
from protocol.errors import ApiError
from protocol.models import StreamConfig
from protocol.stream_config import config_to_json, normalize_create, normalize_update

FIXTURE = Path(__file__).with_name("probed_responses.json")
STEPS: list[dict[str, Any]] = json.loads(FIXTURE.read_text())

_API = "$JS.API.STREAM."


def _parse_only(subject: str, body: bytes) -> None:
    """Run the request parser nats-server runs for this endpoint (errors propagate)."""
    op = subject[len(_API) :]
    if op.startswith("INFO."):
        api_json.parse_info_request(body)
    elif op == "NAMES":
        api_json.parse_names_request(body)
    elif op == "LIST":
        api_json.parse_list_request(body)
    elif op.startswith("PURGE."):
        api_json.parse_purge_request(body)
    elif op.startswith("MSG.GET."):
        api_json.parse_msg_get_request(body)
    elif op.startswith("MSG.DELETE."):
        api_json.parse_msg_delete_request(body)
    elif op.startswith("DELETE."):
        api_json.check_empty_request(body)


def _outcome(step: dict[str, Any], state: dict[str, StreamConfig]) -> Any:
    subject, body = step["subject"], step["body"].encode()
    try:
        if subject.startswith(_API + "CREATE."):
            name = subject[len(_API + "CREATE.") :]
            cfg, _ = normalize_create(name, body, existing=state)
            state.setdefault(name, cfg)
            return {"config": config_to_json(cfg)}
        if subject.startswith(_API + "UPDATE."):
            name = subject[len(_API + "UPDATE.") :]
            cfg, _ = normalize_update(name, body, state.get(name), existing=state)
            state[name] = cfg
            return {"config": config_to_json(cfg)}
        _parse_only(subject, body)
        reply = step["reply"]
        if subject.startswith(_API + "DELETE.") and reply.get("success"):
            state.pop(subject[len(_API + "DELETE.") :], None)
        return None
    except ApiError as err:
        return {"error": err.to_json()}


@cache
def _replayed() -> tuple[Any, ...]:
    state: dict[str, StreamConfig] = {}
    return tuple(_outcome(step, state) for step in STEPS)


def _step_id(step: dict[str, Any]) -> str:
    return f"{step['subject'][:60]} {step['body'][:60]}"


# Errors that come from state our pure functions do not model (engine, store, cluster).
_NOT_PARSER_ERRORS = {10059, 10057, 10037, 10010}


@pytest.mark.parametrize("index", range(len(STEPS)), ids=[_step_id(s) for s in STEPS])
def test_replay_matches_nats_server(index: int) -> None:
    step = STEPS[index]
    reply = step["reply"]
    ours = _replayed()[index]
    is_config_call = step["subject"].startswith((_API + "CREATE.", _API + "UPDATE."))
    if reply is not None and "error" in reply:
        if reply["error"]["err_code"] in _NOT_PARSER_ERRORS and not is_config_call:
            assert ours is None
            return
        assert ours == {"error": reply["error"]}
    elif is_config_call:
        # Same keys, same values, same order.
        assert ours is not None and reply is not None
        assert json.dumps(ours["config"]) == json.dumps(reply["config"])
    else:
        assert ours is None


def test_fixture_covers_the_rules() -> None:
    """The recorded sequence keeps exercising the interesting cases (guards the fixture)."""
    codes = {s["reply"]["error"]["err_code"] for s in STEPS if s["reply"] and "error" in s["reply"]}
    for code in (10003, 10025, 10034, 10038, 10052, 10055, 10056, 10058, 10065, 10074, 10133):
        assert code in codes, code
    assert len(STEPS) > 150
