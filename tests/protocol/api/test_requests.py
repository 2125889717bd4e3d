"""Request parsers: what each JetStream API handler reads from its body (nats-server rules)."""

from __future__ import annotations

import pytest

from protocol import api_json, errors
from protocol.errors import ApiError


def _code(fn: object, body: bytes) -> int:
    with pytest.raises(ApiError) as info:
        fn(body)  # type: ignore[operator]
    return info.value.err_code


def test_info_request() -> None:
    assert api_json.parse_info_request(b"") == (False, "", 0)
    assert api_json.parse_info_request(b"garbage") == (False, "", 0)  # not {/[: ignored
    body = b' {"deleted_details":true,"subjects_filter":"a.>","offset":-3}'
    assert api_json.parse_info_request(body) == (True, "a.>", 0)
    assert _code(api_json.parse_info_request, b"[]") == 10025


def test_names_and_list_requests() -> None:
    assert api_json.parse_names_request(b'{"offset":5,"subject":"x.*"}') == (5, "x.*")
    assert api_json.parse_list_request(b"5") == (0, "")
    with pytest.raises(ApiError, match="JSApiStreamListRequest"):
        api_json.parse_list_request(b"[1]")


def test_purge_request() -> None:
    assert api_json.parse_purge_request(b"") == ("", 0, 0)
    assert api_json.parse_purge_request(b'{"filter":"a","keep":2}') == ("a", 0, 2)
    assert api_json.parse_purge_request(b'{"filter":"a","seq":9}') == ("a", 9, 0)
    assert _code(api_json.parse_purge_request, b'{"seq":5,"keep":1}') == 10003


def test_msg_delete_request() -> None:
    for empty in (b"", b"{}", b" { } "):
        assert _code(api_json.parse_msg_delete_request, empty) == 10003
    assert api_json.parse_msg_delete_request(b'{"seq":3,"no_erase":true}') == (3, True)
    assert api_json.parse_msg_delete_request(b"null") == (0, False)
    assert _code(api_json.parse_msg_delete_request, b'{"seq":-1}') == 10025


def test_stream_delete_wants_an_empty_request() -> None:
    api_json.check_empty_request(b"")
    api_json.check_empty_request(b"{}")
    for body in (b"null", b" ", b'{"a":1}', b"{"):
        with pytest.raises(ApiError) as info:
            api_json.check_empty_request(body)
        assert info.value.spec is errors.NOT_EMPTY_REQUEST


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{}",
        b'{"batch":2,"seq":1}',
        b'{"max_bytes":10,"seq":1}',
        b'{"seq":1,"last_by_subj":"a"}',
        b'{"seq":1,"start_time":"2026-01-01T00:00:00Z"}',
        b'{"start_time":"2026-01-01T00:00:00Z","last_by_subj":"a"}',
        b'{"last_by_subj":"a","next_by_subj":"b"}',
        b'{"multi_last":["a"]}',
        b'{"up_to_seq":3}',
    ],
)
def test_msg_get_bad_requests(body: bytes) -> None:
    assert _code(api_json.parse_msg_get_request, body) == 10003


@pytest.mark.parametrize(
    "body",
    [
        b'{"seq":1}',
        b'{"last_by_subj":"a.*"}',
        b'{"next_by_subj":"a"}',
        b'{"next_by_subj":"a","seq":4}',
        b'{"start_time":"2026-01-01T00:00:00Z","next_by_subj":"a"}',
        b'{"seq":2,"up_to_seq":3}',
    ],
)
def test_msg_get_valid_requests(body: bytes) -> None:
    api_json.parse_msg_get_request(body)


def test_msg_get_strict_decoding() -> None:
    assert _code(api_json.parse_msg_get_request, b'{"seq":1,"foo":2}') == 10025
