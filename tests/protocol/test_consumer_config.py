"""Consumer create requests: nats-server's subject checks, defaults, config checks and updates."""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol import consumer_config as CC
from protocol import errors as E
from protocol.errors import ApiError
from protocol.models import StreamConfig

STREAM = StreamConfig(name="S", subjects=["s.>"])
WORKQUEUE = StreamConfig(name="S", subjects=["s.>"], retention="workqueue")


def _tokens(subject: str) -> list[str]:
    return subject.split(".")


def _body(config: dict[str, Any], stream: str = "S", **kw: Any) -> bytes:
    return json.dumps({"stream_name": stream, "config": config, **kw}).encode()


def _create(
    subject: str,
    config: dict[str, Any],
    stream: StreamConfig = STREAM,
    others: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    req = CC.parse_create(_tokens(subject), _body(config))
    name = req.name or "EPHEMERAL"
    return CC.normalize(req, name, stream, others or {})


def _code(subject: str, config: dict[str, Any], **kw: Any) -> int:
    with pytest.raises(ApiError) as caught:
        _create(subject, config, **kw)
    return caught.value.err_code


def test_a_pull_durable_gets_nats_servers_defaults() -> None:
    c = _create("$JS.API.CONSUMER.CREATE.S.d", {"durable_name": "d", "ack_policy": "explicit"})
    out = CC.config_obj(c)
    assert out == {
        "durable_name": "d",
        "name": "d",
        "deliver_policy": "all",
        "ack_policy": "explicit",
        "ack_wait": 30_000_000_000,
        "max_deliver": -1,
        "replay_policy": "instant",
        "max_waiting": 512,
        "max_ack_pending": 1000,
        "num_replicas": 0,
        "metadata": {"_nats.req.level": "0"},
    }


def test_an_ephemeral_gets_the_inactivity_default_and_no_ack_limits_without_acks() -> None:
    c = _create("$JS.API.CONSUMER.CREATE.S", {"deliver_subject": "in.box"})
    # nats-server draws its name but leaves it out of the config
    assert c["name"] == "" and c["inactive_threshold"] == 5_000_000_000
    assert c["max_ack_pending"] == 0 and c["ack_wait"] == 0 and c["max_waiting"] == 0


def test_backoff_sets_ack_wait_and_bounds_max_deliver() -> None:
    c = _create(
        "$JS.API.CONSUMER.CREATE.S.b",
        {"ack_policy": "explicit", "backoff": [1_000_000_000, 2_000_000_000], "max_deliver": 3},
    )
    assert c["ack_wait"] == 1_000_000_000
    assert (
        _code(
            "$JS.API.CONSUMER.CREATE.S.b",
            {"ack_policy": "explicit", "backoff": [1, 2, 3], "max_deliver": 2},
        )
        == E.CONSUMER_MAX_DELIVER_BACKOFF.err_code
    )


@pytest.mark.parametrize(
    ("subject", "config", "spec"),
    [
        ("$JS.API.CONSUMER.DURABLE.CREATE.S", {}, E.CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT),
        ("$JS.API.CONSUMER.DURABLE.CREATE.S.d", {}, E.CONSUMER_DURABLE_NAME_NOT_SET),
        (
            "$JS.API.CONSUMER.DURABLE.CREATE.S.d",
            {"durable_name": "e"},
            E.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT,
        ),
        (
            "$JS.API.CONSUMER.CREATE.S",
            {"durable_name": "d"},
            E.CONSUMER_EPHEMERAL_WITH_DURABLE_NAME,
        ),
        (
            "$JS.API.CONSUMER.CREATE.S.c.s.x",
            {"filter_subject": "s.y"},
            E.CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH,
        ),
        (
            "$JS.API.CONSUMER.CREATE.S.c.s.x",
            {"filter_subjects": ["s.x"]},
            E.CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED,
        ),
        (
            "$JS.API.CONSUMER.CREATE.S.c",
            {"filter_subject": "s.a", "filter_subjects": ["s.b"]},
            E.CONSUMER_DUPLICATE_FILTER_SUBJECTS,
        ),
        (
            "$JS.API.CONSUMER.CREATE.S.c",
            {"filter_subjects": ["s.*", "s.a"]},
            E.CONSUMER_OVERLAPPING_SUBJECT_FILTERS,
        ),
        ("$JS.API.CONSUMER.CREATE.S.c", {"filter_subjects": [""]}, E.CONSUMER_EMPTY_FILTER),
        (
            "$JS.API.CONSUMER.CREATE.S.c",
            {"deliver_policy": "by_start_sequence"},
            E.CONSUMER_INVALID_POLICY,
        ),
        ("$JS.API.CONSUMER.CREATE.S.c", {"deliver_subject": "s.x"}, E.CONSUMER_DELIVER_CYCLE),
        (
            "$JS.API.CONSUMER.CREATE.S.c",
            {"deliver_subject": "a.*"},
            E.CONSUMER_DELIVER_TO_WILDCARDS,
        ),
        (
            "$JS.API.CONSUMER.CREATE.S.c",
            {"idle_heartbeat": 1_000_000_000},
            E.CONSUMER_HB_REQUIRES_PUSH,
        ),
        (
            "$JS.API.CONSUMER.CREATE.S.c",
            {"deliver_subject": "in", "idle_heartbeat": 1000},
            E.CONSUMER_SMALL_HEARTBEAT,
        ),
        (
            "$JS.API.CONSUMER.CREATE.S.c",
            {"deliver_subject": "in", "flow_control": True},
            E.CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS,
        ),
        ("$JS.API.CONSUMER.CREATE.S.c", {"num_replicas": 3}, E.CONSUMER_REPLICAS_EXCEEDS_STREAM),
    ],
)
def test_refusals_carry_nats_servers_codes(
    subject: str, config: dict[str, Any], spec: E.ErrorSpec
) -> None:
    assert _code(subject, config) == spec.err_code


def test_workqueue_rules() -> None:
    def code(config: dict[str, Any], others: dict[str, dict[str, Any]] | None = None) -> int:
        return _code("$JS.API.CONSUMER.CREATE.S.c", config, stream=WORKQUEUE, others=others)

    assert code({}) == E.CONSUMER_PULL_REQUIRES_ACK.err_code
    assert code({"ack_policy": "explicit", "deliver_policy": "new"}) == (
        E.CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL.err_code
    )
    first = _create("$JS.API.CONSUMER.CREATE.S.a", {"ack_policy": "explicit"}, stream=WORKQUEUE)
    assert code({"ack_policy": "explicit"}, {"a": first}) == (
        E.CONSUMER_WQ_MULTIPLE_UNFILTERED.err_code
    )
    filtered = {"ack_policy": "explicit", "filter_subject": "s.a"}
    other = _create("$JS.API.CONSUMER.CREATE.S.a", filtered, stream=WORKQUEUE)
    assert code({**filtered, "filter_subject": "s.*"}, {"a": other}) == (
        E.CONSUMER_WQ_CONSUMER_NOT_UNIQUE.err_code
    )
    ok = _create(
        "$JS.API.CONSUMER.CREATE.S.c",
        {**filtered, "filter_subject": "s.b"},
        stream=WORKQUEUE,
        others={"a": other},
    )
    assert ok["filter_subject"] == "s.b"


def test_updates_may_change_only_what_nats_server_lets_change() -> None:
    old = _create("$JS.API.CONSUMER.CREATE.S.c", {"ack_policy": "explicit"})
    more = _create("$JS.API.CONSUMER.CREATE.S.c", {"ack_policy": "explicit", "max_ack_pending": 5})
    assert CC.update_error(old, more) is None
    other_policy = _create("$JS.API.CONSUMER.CREATE.S.c", {"ack_policy": "all"})
    error = CC.update_error(old, other_policy)
    assert error is not None and error.description == "ack policy can not be updated"
    push = _create(
        "$JS.API.CONSUMER.CREATE.S.c", {"ack_policy": "explicit", "deliver_subject": "i"}
    )
    error = CC.update_error(old, push)
    assert error is not None and error.description == "can not update pull consumer to push based"


def test_unsupported_settings_are_refused_by_name() -> None:
    with pytest.raises(ApiError, match="priority_timeout"):
        _create("$JS.API.CONSUMER.CREATE.S.c", {"priority_timeout": 8})


def test_a_pause_raises_the_required_api_level() -> None:
    c = _create("$JS.API.CONSUMER.CREATE.S.c", {"pause_until": "2100-01-01T00:00:00Z"})
    assert c["metadata"]["_nats.req.level"] == "1"
    resumed = CC.with_pause(CC.config_obj(c), CC.ZERO_TIME)
    assert "pause_until" not in resumed and resumed["metadata"]["_nats.req.level"] == "0"


def test_a_bad_action_and_bad_json_are_invalid_json() -> None:
    body = json.dumps({"stream_name": "S", "config": {}, "action": "upsert"}).encode()
    with pytest.raises(ApiError) as caught:
        CC.parse_create(_tokens("$JS.API.CONSUMER.CREATE.S.c"), body)
    assert caught.value.err_code == E.INVALID_JSON.err_code
    with pytest.raises(ApiError) as caught:
        CC.parse_create(_tokens("$JS.API.CONSUMER.CREATE.S.c"), _body({"ack_policy": "maybe"}))
    assert caught.value.err_code == E.INVALID_JSON.err_code
