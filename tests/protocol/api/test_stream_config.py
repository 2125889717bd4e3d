"""Stream config rules not covered by the recorded replay (each expectation probed on
nats-server 2.15.1 or read from its source where noted)."""

from __future__ import annotations

import json

import pytest

from protocol import errors
from protocol.errors import ApiError
from protocol.models import StreamConfig
from protocol.stream_config import (
    config_to_json,
    normalize_create,
    normalize_update,
    required_api_level,
    subject_is_subset_match,
    subjects_collide,
)


def _create(name: str, body: dict[str, object], **existing: StreamConfig) -> StreamConfig:
    return normalize_create(name, json.dumps(body).encode(), existing=existing)[0]


def _error(fn: object, *args: object, **kw: object) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(*args, **kw)  # type: ignore[operator]
    return info.value


def test_defaults_of_a_minimal_create() -> None:
    cfg = _create("S1", {"name": "S1"})
    assert cfg.subjects == ["S1"]
    assert (cfg.max_msgs, cfg.max_bytes, cfg.max_msg_size, cfg.max_consumers) == (-1, -1, -1, -1)
    assert (cfg.num_replicas, cfg.storage, cfg.duplicate_window) == (1, "file", 120_000_000_000)
    assert cfg.metadata == {"_nats.req.level": "0"}
    assert list(config_to_json(cfg)) == [
        "name", "subjects", "retention", "max_consumers", "max_msgs", "max_bytes", "max_age",
        "max_msgs_per_subject", "max_msg_size", "discard", "storage", "num_replicas",
        "duplicate_window", "compression", "allow_direct", "mirror_direct", "sealed",
        "deny_delete", "deny_purge", "allow_rollup_hdrs", "consumer_limits", "allow_msg_ttl",
        "metadata",
    ]  # fmt: skip


def test_duplicate_window_follows_a_short_max_age() -> None:
    assert _create("A", {"name": "A", "max_age": 1_000_000_000}).duplicate_window == 1_000_000_000


def test_replicas_above_one_only_when_clustered() -> None:
    body = b'{"name":"R3","num_replicas":3}'
    err = _error(normalize_create, "R3", body, existing={})
    assert err.spec is errors.STREAM_REPLICAS_NOT_SUPPORTED
    cfg, _ = normalize_create("R3", body, existing={}, clustered=True)
    assert cfg.num_replicas == 3


def test_identical_create_returns_the_existing_config_even_with_echoed_metadata() -> None:
    old = _create("S", {"name": "S"})
    echoed = json.dumps({"name": "S", "metadata": config_to_json(old)["metadata"]}).encode()
    cfg, _ = normalize_create("S", echoed, existing={"S": old})
    assert cfg is old
    err = _error(normalize_create, "S", b'{"name":"S","max_msgs":5}', existing={"S": old})
    assert err.spec is errors.STREAM_NAME_EXIST


def test_pedantic_flag_is_returned() -> None:
    _, pedantic = normalize_create("P", b'{"name":"P","pedantic":true}', existing={})
    assert pedantic


@pytest.mark.parametrize(
    ("flags", "level"),
    [
        ({}, 0),
        ({"allow_msg_ttl": True}, 1),
        ({"subject_delete_marker_ttl": 2_000_000_000}, 1),
        ({"allow_atomic": True}, 2),
        ({"allow_msg_counter": True}, 2),
        ({"allow_msg_schedules": True}, 2),
        ({"persist_mode": "async"}, 2),
        ({"allow_batched": True}, 4),
        ({"allow_batched": True, "allow_msg_ttl": True}, 4),
    ],
)
def test_required_api_level(flags: dict[str, object], level: int) -> None:
    assert required_api_level(StreamConfig.model_validate({"name": "x", **flags})) == level


def test_atomic_toggling_moves_the_required_level_both_ways() -> None:
    old = _create("AT", {"name": "AT"})
    on, _ = normalize_update("AT", b'{"name":"AT","allow_atomic":true}', old, existing={})
    assert on.metadata == {"_nats.req.level": "2"}
    off, _ = normalize_update("AT", b'{"name":"AT"}', on, existing={})
    assert off.metadata == {"_nats.req.level": "0"}


def test_source_and_mirror_cycles_are_detected() -> None:
    ca = _create("CA", {"name": "CA", "sources": [{"name": "CB"}]})
    for body in (
        {"name": "CB", "sources": [{"name": "CA"}]},
        {"name": "CB", "sources": [{"name": "CA", "filter_subject": "zzz"}]},
    ):
        err = _error(normalize_create, "CB", json.dumps(body).encode(), existing={"CA": ca})
        assert err.description == "detected cycle"
    ma = _create("MA", {"name": "MA", "mirror": {"name": "MB"}})
    err = _error(
        normalize_create, "MB", b'{"name":"MB","mirror":{"name":"MA"}}', existing={"MA": ma}
    )
    assert (err.err_code, err.description) == (10052, "detected cycle")


def test_mirror_inherits_direct_get_from_a_visible_origin() -> None:
    origin = _create("DG", {"name": "DG", "subjects": ["dg.>"], "allow_direct": True})
    mirror = _create("DGM", {"name": "DGM", "mirror": {"name": "DG"}}, DG=origin)
    assert mirror.mirror_direct and not mirror.allow_direct
    assert mirror.subjects == []
    assert "duplicate_window" not in config_to_json(mirror)


def test_update_of_missing_stream_reports_config_errors_first() -> None:
    err = _error(normalize_update, "N", b'{"name":"N","max_age":1}', None, existing={})
    assert err.err_code == 10052
    err = _error(normalize_update, "N", b'{"name":"N"}', None, existing={})
    assert err.spec is errors.STREAM_NOT_FOUND


def test_sealing_forces_the_sealed_shape() -> None:
    old = _create("Z", {"name": "Z", "max_age": 10_000_000_000, "allow_rollup_hdrs": True})
    body = b'{"name":"Z","sealed":true,"max_age":10000000000,"allow_rollup_hdrs":true}'
    cfg, _ = normalize_update("Z", body, old, existing={})
    assert (cfg.sealed, cfg.max_age, cfg.discard) == (True, 0, "new")
    assert (cfg.deny_delete, cfg.deny_purge, cfg.allow_rollup_hdrs) == (True, True, False)


def test_update_may_not_overlap_another_stream_but_may_keep_its_own_subjects() -> None:
    a = _create("A", {"name": "A", "subjects": ["a.>"]})
    b = _create("B", {"name": "B", "subjects": ["b.>"]}, A=a)
    same, _ = normalize_update(
        "B", b'{"name":"B","subjects":["b.>"]}', b, existing={"A": a, "B": b}
    )
    assert same.subjects == ["b.>"]
    err = _error(
        normalize_update, "B", b'{"name":"B","subjects":["a.x"]}', b, existing={"A": a, "B": b}
    )
    assert err.spec is errors.STREAM_SUBJECT_OVERLAP


@pytest.mark.parametrize(
    ("a", "b", "collide"),
    [
        ("a.b", "a.b", True),
        ("a.b", "a.c", False),
        ("a.*", "a.b", True),
        ("a.>", "a", False),
        ("a.>", "a.b.c", True),
        ("*.x", "$JS.>", True),
        ("a.*", "*.b", True),
        ("a.*", "a.*.c", False),
        ("a.>", "*.*.c", True),
    ],
)
def test_subjects_collide(a: str, b: str, collide: bool) -> None:
    assert subjects_collide(a, b) is collide
    assert subjects_collide(b, a) is collide


def test_subset_match_used_for_the_event_exception() -> None:
    assert subject_is_subset_match("$JS.EVENT.x.>", "$JS.EVENT.>")
    assert not subject_is_subset_match("$JS.>", "$JS.EVENT.>")
    assert not subject_is_subset_match("*.x", "$JS.EVENT.>")
