"""Direct Get properties over random small streams (with deletions) and random valid requests.

Each expectation is computed here by brute force over the raw message list, independently of
``engine.direct_get`` and of NaiveView's multi-last.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.direct_get import DirectReply, direct_get
from engine.msg_get import msg_get
from engine.store import StoredMsg
from protocol.headers import get_header
from protocol.timefmt import format_rfc3339nano
from tests.engine.query.naive_view import NaiveView, matches

T0 = 1_700_000_000_000_000_000
SUBJECTS = ["s.a", "s.b", "s.c.x", "s.c.y", "s.d"]
FILTERS = ["s.a", "s.b", "s.c.*", "s.c.>", "s.*", "s.>", "s.zz", ">"]
HEADERS = [b"", b"NATS/1.0\r\nK: v\r\n\r\n", b"NATS/1.0\r\nA: 1\r\nB: 22\r\n\r\n"]
EXAMPLES = 150


@dataclass
class Stream:
    view: NaiveView
    live: list[StoredMsg]


@st.composite
def streams(draw: st.DrawFn) -> Stream:
    n = draw(st.integers(0, 24))
    ts = T0
    msgs = []
    for seq in range(1, n + 1):
        ts += draw(st.integers(0, 3)) * 1000  # non-decreasing, sometimes equal
        subject = draw(st.sampled_from(SUBJECTS))
        hdr = draw(st.sampled_from(HEADERS))
        data = draw(st.binary(max_size=12))
        msgs.append(StoredMsg(seq, subject, hdr, data, ts))
    deleted = draw(st.sets(st.integers(1, max(n, 1)), max_size=n))
    live = [m for m in msgs if m.seq not in deleted]
    return Stream(NaiveView("S", live, last_seq=n), live)


def run(stream: Stream, request: dict[str, object]) -> list[DirectReply]:
    return direct_get(
        stream.view,
        reply_stream_name="S",
        request_hdr=None,
        payload=json.dumps(request).encode(),
        subject_key=None,
    )


def header_int(reply: DirectReply, key: str) -> int:
    assert reply.hdr is not None
    value = get_header(reply.hdr, key)
    assert value is not None, (key, reply.hdr)
    return int(value)


def size(m: StoredMsg) -> int:
    return len(m.subject) + len(m.hdr) + len(m.data)


def first_at_or_after(live: list[StoredMsg], ts_ns: int) -> int | None:
    return next((m.seq for m in live if m.ts_ns >= ts_ns), None)


@st.composite
def batch_requests(draw: st.DrawFn, stream: Stream) -> tuple[dict[str, object], int, str]:
    """A valid batch request, plus the start sequence and filter it means."""
    req: dict[str, object] = {"batch": draw(st.integers(1, 8))}
    mode = draw(st.sampled_from(["seq", "next", "seq_next", "time", "time_next"]))
    start, subject_filter = 0, ""
    if "next" in mode:
        subject_filter = draw(st.sampled_from(FILTERS))
        req["next_by_subj"] = subject_filter
    if mode.startswith("seq"):
        start = draw(st.integers(1 if mode == "seq" else 0, stream.view.last_seq + 2))
        if start:
            req["seq"] = start
    if mode.startswith("time"):
        base = draw(st.sampled_from([m.ts_ns for m in stream.live] or [T0]))
        at = base + draw(st.integers(-1, 1))
        req["start_time"] = format_rfc3339nano(at)
        found = first_at_or_after(stream.live, at)
        start = found if found is not None else stream.view.last_seq + 1
    if draw(st.booleans()):
        req["max_bytes"] = draw(st.integers(1, 80))
    return req, start, subject_filter


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data())
def test_batch_walk_is_consistent(data: st.DataObject) -> None:
    stream = data.draw(streams())
    req, start, subject_filter = data.draw(batch_requests(stream))
    replies = run(stream, req)
    candidates = [m for m in stream.live if m.seq >= start and matches(subject_filter, m.subject)]
    if not candidates:
        assert replies == [DirectReply(b"NATS/1.0 404 Message Not Found\r\n\r\n", b"")]
        return
    # brute force: take messages until the batch is full or the byte cap is reached
    expected: list[StoredMsg] = []
    total = 0
    cap = int(str(req.get("max_bytes", 64 * 1024 * 1024)))
    for m in candidates[: int(str(req["batch"]))]:
        expected.append(m)
        total += size(m)
        if total >= cap:
            break
    *data_replies, end = replies
    assert end.data == b""
    assert end.hdr is not None and end.hdr.startswith(b"NATS/1.0 204 EOB\r\n")
    assert [header_int(r, "Nats-Sequence") for r in data_replies] == [m.seq for m in expected]
    assert [r.data for r in data_replies] == [m.data for m in expected]
    pending = len(candidates)
    last = 0
    for reply, m in zip(data_replies, expected, strict=True):
        pending -= 1
        assert header_int(reply, "Nats-Num-Pending") == pending
        assert header_int(reply, "Nats-Last-Sequence") == last
        assert get_header(reply.hdr or b"", "Nats-Subject") == m.subject
        assert reply.hdr is not None and reply.hdr.startswith(m.hdr[:-2] or b"NATS/1.0\r\n")
        last = m.seq
    assert header_int(end, "Nats-Num-Pending") == pending
    assert header_int(end, "Nats-Last-Sequence") == last
    # the byte cap: nothing before the last message had reached it
    sizes = [size(m) for m in expected]
    assert sum(sizes[:-1]) < cap


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data())
def test_batch_no_hdr_reports_the_initial_pending(data: st.DataObject) -> None:
    stream = data.draw(streams())
    req, start, subject_filter = data.draw(batch_requests(stream))
    req["no_hdr"] = True
    replies = run(stream, req)
    candidates = [m for m in stream.live if m.seq >= start and matches(subject_filter, m.subject)]
    if not candidates:
        assert len(replies) == 1
        return
    *data_replies, end = replies
    assert all(r.hdr is None for r in data_replies)
    assert header_int(end, "Nats-Num-Pending") == len(candidates)
    sent = [m for m in candidates if m.data in {r.data for r in data_replies}]
    assert sent  # at least the first message was sent


@st.composite
def multi_requests(draw: st.DrawFn, stream: Stream) -> tuple[dict[str, object], int | None]:
    """A valid multi_last request, plus the ceiling it means (None: No Results)."""
    req: dict[str, object] = {
        "multi_last": draw(st.lists(st.sampled_from(FILTERS), min_size=1, max_size=3))
    }
    last_seq = stream.view.last_seq
    ceiling: int | None = last_seq
    kind = draw(st.sampled_from(["none", "seq", "time"]))
    if kind == "seq":
        up_to = draw(st.integers(1, last_seq + 2))
        req["up_to_seq"] = up_to
        ceiling = up_to if up_to <= last_seq else None
    elif kind == "time":
        base = draw(st.sampled_from([m.ts_ns for m in stream.live] or [T0]))
        at = base + draw(st.integers(-1, 1))
        req["up_to_time"] = format_rfc3339nano(at)
        found = first_at_or_after(stream.live, at)
        first_seq = stream.live[0].seq if stream.live else last_seq + 1
        at_seq = found if found is not None else last_seq + 1
        ceiling = None if at_seq <= first_seq else at_seq - 1
    if draw(st.booleans()):
        req["seq"] = draw(st.integers(1, last_seq + 1))
    if draw(st.booleans()):
        req["batch"] = draw(st.integers(1, 5))
    if draw(st.booleans()):
        req["max_bytes"] = draw(st.integers(1, 60))
    return req, ceiling


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data())
def test_multi_last_equals_brute_force(data: st.DataObject) -> None:
    stream = data.draw(streams())
    req, ceiling = data.draw(multi_requests(stream))
    replies = run(stream, req)
    no_results = DirectReply(b"NATS/1.0 404 No Results\r\n\r\n", b"")
    if ceiling is None:
        assert replies == [no_results]
        return
    filters = [str(f) for f in req["multi_last"]]  # type: ignore[attr-defined]
    last_per_subject: dict[str, int] = {}
    for m in stream.live:
        if m.seq <= ceiling and any(matches(f, m.subject) for f in filters):
            last_per_subject[m.subject] = m.seq
    all_seqs = sorted(last_per_subject.values())
    if not all_seqs:
        assert replies == [no_results]
        return
    lower = int(str(req.get("seq", 0)))
    cap = int(str(req.get("max_bytes", 64 * 1024 * 1024)))
    batch = int(str(req.get("batch", 0)))
    expected: list[tuple[int, int]] = []  # (seq, pending after it)
    total = 0
    for index, seq in enumerate(all_seqs):
        if seq < lower:
            continue
        expected.append((seq, len(all_seqs) - index - 1))
        total += size(next(m for m in stream.live if m.seq == seq))
        if total >= cap or (batch and len(expected) >= batch):
            break
    *data_replies, end = replies
    assert [header_int(r, "Nats-Sequence") for r in data_replies] == [s for s, _ in expected]
    assert [header_int(r, "Nats-Num-Pending") for r in data_replies] == [p for _, p in expected]
    chain = ([0] + [s for s, _ in expected])[: len(expected)]
    assert [header_int(r, "Nats-Last-Sequence") for r in data_replies] == chain
    assert end.hdr is not None and end.hdr.startswith(b"NATS/1.0 204 EOB\r\n")
    assert header_int(end, "Nats-UpTo-Sequence") == ceiling
    assert header_int(end, "Nats-Last-Sequence") == (expected[-1][0] if expected else 0)
    end_pending = expected[-1][1] if expected else 0
    assert header_int(end, "Nats-Num-Pending") == end_pending


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data())
def test_single_get_agrees_with_msg_get(data: st.DataObject) -> None:
    stream = data.draw(streams())
    req: dict[str, object] = data.draw(
        st.one_of(
            st.builds(lambda s: {"seq": s}, st.integers(1, 30)),
            st.builds(lambda f: {"last_by_subj": f}, st.sampled_from(FILTERS)),
            st.builds(
                lambda f, s: {"next_by_subj": f, "seq": s},
                st.sampled_from(FILTERS),
                st.integers(0, 30),
            ),
            st.builds(
                lambda t: {"start_time": format_rfc3339nano(T0 + t)}, st.integers(-5, 80_000)
            ),
        )
    )
    replies = run(stream, req)
    response = msg_get(stream.view, json.dumps(req).encode())
    assert len(replies) == 1
    if "error" in response:
        assert response["error"]["err_code"] == 10037
        assert replies[0].hdr == b"NATS/1.0 404 Message Not Found\r\n\r\n"
    else:
        message = response["message"]
        assert header_int(replies[0], "Nats-Sequence") == message["seq"]
        assert get_header(replies[0].hdr or b"", "Nats-Time-Stamp") == message["time"]


@settings(max_examples=EXAMPLES, deadline=None)
@given(payload=st.binary(max_size=40), key=st.one_of(st.none(), st.text(max_size=6)))
def test_garbage_never_raises(payload: bytes, key: str | None) -> None:
    view = NaiveView("S", [StoredMsg(1, "s.a", b"", b"x", T0)])
    replies = direct_get(
        view, reply_stream_name="S", request_hdr=payload, payload=payload, subject_key=key
    )
    assert replies and all(isinstance(r, DirectReply) for r in replies)
    response = msg_get(view, payload)
    assert set(response) in ({"type", "message"}, {"type", "error"})


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**65) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    members=st.dictionaries(
        st.sampled_from(["seq", "batch", "no_hdr", "multi_last", "start_time", "Seq", "x"]),
        JSON_VALUES,
        max_size=4,
    )
)
def test_json_shaped_requests_never_raise(members: dict[str, object]) -> None:
    view = NaiveView("S", [StoredMsg(1, "s.a", b"", b"x", T0)])
    payload = json.dumps(members).encode()
    assert direct_get(
        view, reply_stream_name="S", request_hdr=None, payload=payload, subject_key=None
    )
    response = msg_get(view, payload)
    if "error" in response:
        assert response["error"]["err_code"] in (10003, 10025, 10037)


@settings(max_examples=EXAMPLES, deadline=None)
@given(seq=st.one_of(st.integers(0, 40), st.integers(2**63, 2**64 + 5)), data=st.data())
def test_seq_only_fast_path_agrees_with_the_decoder(seq: int, data: st.DataObject) -> None:
    stream = data.draw(streams())

    def get(payload: bytes) -> list[DirectReply]:
        return direct_get(
            stream.view, reply_stream_name="S", request_hdr=None, payload=payload, subject_key=None
        )

    fast = get(b'{"seq":%d}' % seq)
    assert fast == get(b'{ "seq": %d }' % seq)  # whitespace takes the JSON decoder
