"""Direct Get, one case per row of the validation table and per reply form, byte-exact.

The stream (``S``, subjects ``s.>``), deletions at 3 and at the last sequence 8:

    1 s.a "one"   2 s.b "two" +Foo: bar   4 s.c.x "four"   5 s.b ""   6 s.c.y "six" +A, B   7 s.a
"""

from __future__ import annotations

import pytest

from engine.direct_get import (
    DIRECT_GET_GROUP,
    MAX_ALLOWED_RESPONSES,
    MAX_PENDING_SIZE_BYTES,
    DirectReply,
    direct_get,
    direct_get_subjects,
    parse_direct_subject,
)
from engine.store import StoredMsg
from protocol.timefmt import format_rfc3339nano
from tests.engine.query.naive_view import NaiveView

T0 = 1_795_000_000_000_000_000
HDR_FOO = b"NATS/1.0\r\nFoo: bar\r\n\r\n"
HDR_AB = b"NATS/1.0\r\nA: 1\r\nB:  2 \r\n\r\n"
MSGS = [
    StoredMsg(1, "s.a", b"", b"one", T0 + 1_000),
    StoredMsg(2, "s.b", HDR_FOO, b"two", T0 + 2_000),
    StoredMsg(4, "s.c.x", b"", b"four", T0 + 4_000),
    StoredMsg(5, "s.b", b"", b"", T0 + 5_000),
    StoredMsg(6, "s.c.y", HDR_AB, b"six", T0 + 6_000),
    StoredMsg(7, "s.a", b"", b"seven", T0 + 7_000),
]
VIEW = NaiveView("S", MSGS, last_seq=8)
BY_SEQ = {m.seq: m for m in MSGS}

E412 = DirectReply(b"NATS/1.0 412 Required Api Level\r\n\r\n", b"")
E408_EMPTY = DirectReply(b"NATS/1.0 408 Empty Request\r\n\r\n", b"")
E408_MALFORMED = DirectReply(b"NATS/1.0 408 Malformed Request\r\n\r\n", b"")
E408_BAD = DirectReply(b"NATS/1.0 408 Bad Request\r\n\r\n", b"")
E404 = DirectReply(b"NATS/1.0 404 Message Not Found\r\n\r\n", b"")
E404_NO_RESULTS = DirectReply(b"NATS/1.0 404 No Results\r\n\r\n", b"")
E413 = DirectReply(b"NATS/1.0 413 Too Many Results\r\n\r\n", b"")


def ts(seq: int) -> str:
    return format_rfc3339nano(BY_SEQ[seq].ts_ns)


def single(seq: int, stream: str = "S") -> DirectReply:
    m = BY_SEQ[seq]
    head = m.hdr[:-2] if m.hdr else b"NATS/1.0\r\n"
    tail = (
        f"Nats-Stream: {stream}\r\nNats-Subject: {m.subject}\r\nNats-Sequence: {seq}\r\n"
        f"Nats-Time-Stamp: {ts(seq)}\r\n\r\n"
    )
    return DirectReply(head + tail.encode(), m.data)


def batched(seq: int, pending: int, last: int) -> DirectReply:
    m = BY_SEQ[seq]
    head = m.hdr[:-2] if m.hdr else b"NATS/1.0\r\n"
    tail = (
        f"Nats-Stream: S\r\nNats-Subject: {m.subject}\r\nNats-Sequence: {seq}\r\n"
        f"Nats-Time-Stamp: {ts(seq)}\r\nNats-Num-Pending: {pending}\r\n"
        f"Nats-Last-Sequence: {last}\r\n\r\n"
    )
    return DirectReply(head + tail.encode(), m.data)


def eob(pending: int, last: int, up_to: int | None = None) -> DirectReply:
    text = f"NATS/1.0 204 EOB\r\nNats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last}\r\n"
    if up_to is not None:
        text += f"Nats-UpTo-Sequence: {up_to}\r\n"
    return DirectReply((text + "\r\n").encode(), b"")


def dg(
    payload: str | bytes,
    *,
    key: str | None = None,
    hdr: bytes | None = None,
    view: NaiveView = VIEW,
    name: str = "S",
) -> list[DirectReply]:
    body = payload.encode() if isinstance(payload, str) else payload
    return direct_get(view, reply_stream_name=name, request_hdr=hdr, payload=body, subject_key=key)


def api_level(value: str) -> bytes:
    return f"NATS/1.0\r\nNats-Required-Api-Level: {value}\r\n\r\n".encode()


# ---- row 1: Nats-Required-Api-Level -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ("5", False),
        ("+5", False),
        ("-7", False),
        ("005", False),
        ("6", True),
        ("abc", True),
        ("5 ", True),  # trailing spaces are kept, so Atoi fails
        ("5.0", True),
        ("\u0665", True),  # an Arabic-Indic five: Python's isdigit, not Go's Atoi
        ("9223372036854775808", True),  # overflows int64
        ("-9223372036854775809", True),
    ],
)
def test_row1_api_level(value: str, refused: bool) -> None:
    replies = dg('{"seq":1}', hdr=api_level(value))
    assert replies == ([E412] if refused else [single(1)])


def test_row1_api_level_is_checked_first_in_both_forms() -> None:
    assert dg("", hdr=api_level("6")) == [E412]
    assert dg("{", hdr=api_level("6")) == [E412]
    assert dg("", key="s.a", hdr=api_level("6")) == [E412]
    assert dg("", key="", hdr=api_level("6")) == [E412]


def test_row1_api_level_header_is_case_sensitive_and_may_be_empty() -> None:
    assert dg('{"seq":1}', hdr=b"NATS/1.0\r\nnats-required-api-level: 9\r\n\r\n") == [single(1)]
    assert dg('{"seq":1}', hdr=b"NATS/1.0\r\nNats-Required-Api-Level:\r\n\r\n") == [single(1)]
    leading = b"NATS/1.0\r\nNats-Required-Api-Level:   5\r\n\r\n"
    assert dg('{"seq":1}', hdr=leading) == [single(1)]


# ---- rows 2-4: empty, malformed, nothing selected -----------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        "{",
        " ",
        '{"seq":1} x',
        '{"seq":1}{"seq":2}',
        '{"seq":-1}',
        '{"seq":"1"}',
        '{"seq":1.0}',
        '{"seq":-0}',
        '{"seq":true}',
        '{"seq":18446744073709551616}',
        '{"seq":1,"batch":9223372036854775808}',
        '{"seq":NaN}',
        "[1]",
        '"x"',
        "1",
        '{"seq":1,"batch":"2"}',
        '{"seq":1,"no_hdr":1}',
        '{"start_time":"yesterday"}',
        '{"start_time":5}',
        '{"multi_last":"s.a"}',
        '{"multi_last":[1]}',
        '{"seq":"x","foo":1}',
        b'\xef\xbb\xbf{"seq":1}',
        b'{"seq":1}\xff',
    ],
)
def test_row3_malformed(payload: str | bytes) -> None:
    assert dg(payload) == [E408_MALFORMED]


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "null",
        "{}",
        '{"batch":2}',
        '{"up_to_seq":3}',
        '{"no_hdr":true}',
        '{"max_bytes":10}',
        '{"seq":null}',
        '{"seq":0,"next_by_subj":""}',
        '{"multi_last":[]}',
        '{"lastbysubj":"s.a"}',  # unknown (delimiters do not fold): ignored
        '{"up_to_seq":3,"up_to_time":"2020-01-01T00:00:00Z"}',  # row 4 comes before row 5
    ],
)
def test_rows_2_and_4_empty(payload: str) -> None:
    assert dg(payload) == [E408_EMPTY]


def test_lenient_json_like_go() -> None:
    assert dg('{"seq":1,"foo":{"a":[1,2]}}') == [single(1)]  # unknown keys ignored
    assert dg('{"SEQ":2}') == [single(2)]  # case-insensitive key match
    assert dg('{"\u017feq":2}'.encode()) == [single(2)]  # long s folds to s
    assert dg('{"seq":1,"seq":2}') == [single(2)]  # duplicates: last wins
    assert dg('{"seq":1,"seq":null}') == [single(1)]  # null leaves a number alone
    assert dg('{"start_time":"2000-01-01T00:00:00Z","start_time":null,"seq":2}') == [single(2)]
    assert dg('{"last_by_subj":"s.\\u0061"}') == [single(7)]
    assert dg(b'{"seq":1,"x":"\xff"}') == [single(1)]  # invalid UTF-8 inside a string is fine
    deep = '{"seq":1,"x":' + "[" * 3000 + "]" * 3000 + "}"  # deeper than Python's recursion
    assert dg(deep) == [single(1)]
    too_deep = '{"seq":1,"x":' + "[" * 10001 + "]" * 10001 + "}"
    assert dg(too_deep) == [E408_MALFORMED]


# ---- row 5: conflicts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        '{"seq":1,"last_by_subj":"s.a"}',
        '{"seq":1,"start_time":"2020-01-01T00:00:00Z"}',
        '{"last_by_subj":"s.a","start_time":"2020-01-01T00:00:00Z"}',
        '{"last_by_subj":"s.a","next_by_subj":"s.a"}',
        '{"last_by_subj":"s.a","batch":2}',
        '{"last_by_subj":"s.a","multi_last":["s.a"]}',
        '{"next_by_subj":"s.a","multi_last":["s.a"]}',
        '{"multi_last":["s.a"],"up_to_seq":3,"up_to_time":"2020-01-01T00:00:00Z"}',
        '{"seq":1,"up_to_seq":3,"up_to_time":"2020-01-01T00:00:00Z"}',
    ],
)
def test_row5_conflicts(payload: str) -> None:
    assert dg(payload) == [E408_BAD]


def test_ignored_combinations() -> None:
    assert dg('{"seq":2,"up_to_seq":1}') == [single(2)]
    assert dg('{"seq":2,"max_bytes":1}') == [single(2)]
    assert dg('{"multi_last":["s.a"],"start_time":"2999-01-01T00:00:00Z"}') == [
        batched(7, 0, 0),
        eob(0, 7, 8),
    ]


# ---- rows 6-9: misses, no results, too many, load failure ---------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        '{"seq":3}',  # deleted
        '{"seq":8}',  # deleted, and the stream's last sequence
        '{"seq":100}',
        '{"last_by_subj":"s.zz"}',
        '{"next_by_subj":"s.zz"}',
        '{"seq":9,"next_by_subj":"s.>"}',
        f'{{"start_time":"{format_rfc3339nano(T0 + 7_001)}"}}',  # after the last message
        '{"seq":100,"batch":3}',  # a batch whose first lookup fails: no EOB
        '{"seq":8,"batch":2}',
        '{"next_by_subj":"s.zz","batch":3}',
    ],
)
def test_row6_not_found(payload: str) -> None:
    assert dg(payload) == [E404]


@pytest.mark.parametrize(
    "payload",
    [
        '{"multi_last":["s.zz"]}',
        '{"multi_last":[""]}',
        '{"multi_last":["s.>"],"up_to_seq":9}',  # beyond the last sequence (file store)
        f'{{"multi_last":["s.>"],"up_to_time":"{format_rfc3339nano(T0 + 1_000)}"}}',
        '{"multi_last":["s.>"],"up_to_time":"2000-01-01T00:00:00Z"}',
        '{"multi_last":["s.>"],"up_to_time":"2999-01-01T00:00:00Z"}',  # wraps below 1970
    ],
)
def test_row7_no_results(payload: str) -> None:
    assert dg(payload) == [E404_NO_RESULTS]


def test_row8_too_many_results_counts_subjects_up_to_the_ceiling() -> None:
    n = MAX_ALLOWED_RESPONSES + 1
    many = NaiveView("M", [StoredMsg(i, f"m.{i}", b"", b"x", T0 + i) for i in range(1, n + 1)])
    assert MAX_ALLOWED_RESPONSES == 1024
    assert dg('{"multi_last":["m.>"]}', view=many, name="M") == [E413]
    assert dg('{"multi_last":["m.*"],"batch":5}', view=many, name="M") == [E413]
    allowed = dg('{"multi_last":["m.>"],"up_to_seq":1024,"batch":1}', view=many, name="M")
    first_lines = [r.hdr.split(b"\r\n")[0] for r in allowed if r.hdr]
    assert first_lines == [b"NATS/1.0", b"NATS/1.0 204 EOB"]
    assert allowed[-1].hdr is not None
    assert b"Nats-UpTo-Sequence: 1024\r\n" in allowed[-1].hdr


class _LoadFails(NaiveView):
    """A view whose index knows seq 6 but whose store cannot load it."""

    def load(self, seq: int) -> StoredMsg | None:
        return None if seq == 6 else super().load(seq)


def test_row9_multi_last_load_failure_is_404_after_what_was_sent() -> None:
    view = _LoadFails("S", MSGS, last_seq=8)
    assert dg('{"multi_last":["s.>"]}', view=view) == [
        batched(4, 3, 0),
        batched(5, 2, 4),
        E404,
    ]


# ---- single-message replies ---------------------------------------------------------------------


def test_single_reply_without_stored_headers_is_exact() -> None:
    expected = (
        b"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: s.a\r\nNats-Sequence: 1\r\n"
        + f"Nats-Time-Stamp: {ts(1)}\r\n\r\n".encode()
    )
    assert dg('{"seq":1}') == [DirectReply(expected, b"one")]


def test_single_reply_appends_after_stored_headers_verbatim() -> None:
    expected = (
        b"NATS/1.0\r\nA: 1\r\nB:  2 \r\nNats-Stream: S\r\nNats-Subject: s.c.y\r\n"
        + f"Nats-Sequence: 6\r\nNats-Time-Stamp: {ts(6)}\r\n\r\n".encode()
    )
    assert dg('{"seq":6}') == [DirectReply(expected, b"six")]


def test_single_reply_lookups() -> None:
    assert dg('{"seq":5}') == [single(5)]  # empty payload still an HMSG
    assert dg('{"last_by_subj":"s.a"}') == [single(7)]
    assert dg('{"last_by_subj":"s.c.*"}') == [single(6)]
    assert dg('{"last_by_subj":"s.>"}') == [single(7)]
    assert dg('{"next_by_subj":"s.b"}') == [single(2)]
    assert dg('{"seq":3,"next_by_subj":"s.a"}') == [single(7)]
    assert dg(f'{{"start_time":"{ts(4)}"}}') == [single(4)]
    assert dg(f'{{"start_time":"{format_rfc3339nano(T0 + 2_001)}"}}') == [single(4)]
    assert dg(f'{{"start_time":"{ts(1)}","next_by_subj":"s.b"}}') == [single(2)]
    assert dg('{"start_time":"2000-01-01T00:00:00Z"}') == [single(1)]
    assert dg('{"start_time":"2999-01-01T00:00:00Z"}') == [single(1)]  # UnixNano wraps


def test_no_hdr_sends_a_plain_msg() -> None:
    assert dg('{"seq":2,"no_hdr":true}') == [DirectReply(None, b"two")]
    assert dg('{"no_hdr":true}', key="s.b") == [DirectReply(None, b"")]


def test_nats_stream_is_the_responders_own_name() -> None:
    """A mirror answering for its origin reports its own stream name."""
    assert dg('{"seq":1}', name="MIRROR") == [single(1, stream="MIRROR")]


# ---- subject-appended form ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "payload", "expected"),
    [
        ("s.a", "", [single(7)]),
        ("s.c.*", "", [single(6)]),
        ("s.>", "", [single(7)]),
        ("s.c.x", "", [single(4)]),
        ("s.zz", "", [E404]),
        ("s.a", "{}", [single(7)]),
        ("s.a", "null", [single(7)]),
        ("s.a", '{"max_bytes":5}', [single(7)]),
        ("s.a", '{"foo":1}', [single(7)]),
        ("s.a", '{"seq":0,"batch":0}', [single(7)]),
        ("s.a", '{"seq":1}', [E408_BAD]),
        ("s.a", '{"batch":1}', [E408_BAD]),
        ("s.a", '{"batch":-1}', [E408_BAD]),
        ("s.a", '{"last_by_subj":"s.a"}', [E408_BAD]),
        ("s.a", '{"next_by_subj":"s.a"}', [E408_BAD]),
        ("s.a", '{"multi_last":["s.a"]}', [E408_BAD]),
        ("s.a", '{"start_time":"2000-01-01T00:00:00Z"}', [E408_BAD]),
        ("s.a", '{"up_to_seq":1}', [E408_BAD]),
        ("s.a", '{"up_to_time":"2000-01-01T00:00:00Z"}', [E408_BAD]),
        ("s.a", "{", [E408_MALFORMED]),
        ("s.a", " ", [E408_MALFORMED]),
        ("s.a", '{"no_hdr":"yes"}', [E408_MALFORMED]),
        ("", "", [E408_BAD]),
        ("", "{", [E408_MALFORMED]),  # the body is decoded before the key is checked
    ],
)
def test_subject_appended_form(key: str, payload: str, expected: list[DirectReply]) -> None:
    assert dg(payload, key=key) == expected


# ---- batch mode ---------------------------------------------------------------------------------


def test_batch_walk_skips_deletes_and_ends_with_eob() -> None:
    assert dg('{"seq":1,"batch":3}') == [
        batched(1, 5, 0),
        batched(2, 4, 1),
        batched(4, 3, 2),
        eob(3, 4),
    ]
    assert dg('{"seq":3,"batch":2}') == [batched(4, 3, 0), batched(5, 2, 4), eob(2, 5)]
    assert dg('{"seq":7,"batch":3}') == [batched(7, 0, 0), eob(0, 7)]


def test_batch_by_subject_and_time() -> None:
    assert dg('{"next_by_subj":"s.a","batch":5}') == [batched(1, 1, 0), batched(7, 0, 1), eob(0, 7)]
    assert dg('{"next_by_subj":"s.c.*","batch":5,"seq":5}') == [batched(6, 0, 0), eob(0, 6)]
    assert dg(f'{{"start_time":"{ts(4)}","batch":2}}') == [
        batched(4, 3, 0),
        batched(5, 2, 4),
        eob(2, 5),
    ]


def test_batch_max_bytes_sends_the_crossing_message() -> None:
    # sizes: seq 1 = 3+0+3 = 6, seq 2 = 3+22+3 = 28 -> running 6, 34
    assert dg('{"seq":1,"batch":5,"max_bytes":1}') == [batched(1, 5, 0), eob(5, 1)]
    assert dg('{"seq":1,"batch":5,"max_bytes":34}') == [
        batched(1, 5, 0),
        batched(2, 4, 1),
        eob(4, 2),
    ]
    assert dg('{"seq":1,"batch":5,"max_bytes":35}')[-1] == eob(3, 4)
    assert dg('{"seq":1,"batch":5,"max_bytes":-5}') == [batched(1, 5, 0), eob(5, 1)]
    assert MAX_PENDING_SIZE_BYTES == 64 * 1024 * 1024


def test_batch_no_hdr_quirk_keeps_the_initial_pending_count() -> None:
    assert dg('{"seq":2,"batch":3,"no_hdr":true}') == [
        DirectReply(None, b"two"),
        DirectReply(None, b"four"),
        DirectReply(None, b""),
        eob(5, 5),
    ]


def test_negative_batch_sends_only_the_eob() -> None:
    assert dg('{"seq":1,"batch":-1}') == [eob(6, 0)]
    assert dg('{"last_by_subj":"s.a","batch":-1}') == [eob(6, 0)]
    assert dg('{"next_by_subj":"s.a","batch":-2}') == [eob(2, 0)]


# ---- multi_last ---------------------------------------------------------------------------------


def test_multi_last_is_sorted_by_sequence_with_upto_in_the_eob() -> None:
    assert dg('{"multi_last":["s.>"]}') == [
        batched(4, 3, 0),
        batched(5, 2, 4),
        batched(6, 1, 5),
        batched(7, 0, 6),
        eob(0, 7, 8),
    ]
    assert dg('{"multi_last":["s.b","s.a","s.a"]}') == [
        batched(5, 1, 0),
        batched(7, 0, 5),
        eob(0, 7, 8),
    ]


def test_multi_last_lower_bound_batch_and_bytes() -> None:
    assert dg('{"multi_last":["s.>"],"seq":5,"batch":1}') == [batched(5, 2, 0), eob(2, 5, 8)]
    assert dg('{"multi_last":["s.>"],"seq":100}') == [eob(0, 0, 8)]
    assert dg('{"multi_last":["s.>"],"max_bytes":1}') == [batched(4, 3, 0), eob(3, 4, 8)]
    assert dg('{"multi_last":["s.>"],"batch":-1}')[-1] == eob(0, 7, 8)


def test_multi_last_ceilings() -> None:
    assert dg('{"multi_last":["s.>"],"up_to_seq":3}') == [
        batched(1, 1, 0),
        batched(2, 0, 1),
        eob(0, 2, 3),
    ]
    at_5 = f'{{"multi_last":["s.>"],"up_to_time":"{ts(5)}"}}'
    assert dg(at_5) == [batched(1, 2, 0), batched(2, 1, 1), batched(4, 0, 2), eob(0, 4, 4)]
    assert dg('{"multi_last":["s.>"],"up_to_seq":8}')[-1] == eob(0, 7, 8)


def test_multi_last_ignores_no_hdr() -> None:
    assert dg('{"multi_last":["s.b"],"no_hdr":true}') == [batched(5, 0, 0), eob(0, 5, 8)]


# ---- an empty stream and the subject helpers ----------------------------------------------------


def test_empty_stream() -> None:
    empty = NaiveView("E", [])
    for payload in (
        '{"seq":1}',
        '{"next_by_subj":"e.a","batch":2}',
        '{"start_time":"2020-01-01T00:00:00Z","batch":2}',
    ):
        assert dg(payload, view=empty, name="E") == [E404]
    assert dg('{"multi_last":["e.>"]}', view=empty, name="E") == [E404_NO_RESULTS]
    assert dg("", key="e.a", view=empty, name="E") == [E404]


def test_subjects_and_group() -> None:
    assert DIRECT_GET_GROUP == "_sys_"
    assert direct_get_subjects("KV_x") == ("$JS.API.DIRECT.GET.KV_x", "$JS.API.DIRECT.GET.KV_x.>")
    assert parse_direct_subject("$JS.API.DIRECT.GET.KV_x") == ("KV_x", None)
    assert parse_direct_subject("$JS.API.DIRECT.GET.KV_x.$KV.x.k") == ("KV_x", "$KV.x.k")
    assert parse_direct_subject("$JS.API.DIRECT.GET.KV_x.") == ("KV_x", "")
    assert parse_direct_subject("$JS.API.DIRECT.GET.") is None
    assert parse_direct_subject("$JS.API.STREAM.MSG.GET.KV_x") is None
