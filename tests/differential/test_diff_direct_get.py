"""Differential: Direct Get ($JS.API.DIRECT.GET), docs/nats-differences.md §1.

Every request form and every status of §1.3-1.7, compared byte for byte (header blocks
included, Nats-Time-Stamp masked) over a raw connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.differential.diff_harness import NO_REPLY_TIMEOUT_S, REPLY_TIMEOUT_S, Differ, Session
from tests.differential.diff_raw import DEFAULT_CONNECT, hpub, pub
from tests.differential.diff_setup import (
    AFTER_ALL,
    BEFORE_ALL,
    STANDARD_MESSAGES,
    standard_stream,
    substitute,
)

pytestmark = pytest.mark.differential

MULTI_LAST_SUBJECTS_MAX = 1024


@dataclass(frozen=True)
class DG:
    """One Direct Get request against the standard stream."""

    body: bytes | dict[str, Any] | None = None
    tail: str | None = None  # subject-appended form: '$S.a' etc.
    headers: list[tuple[str, str]] | None = None
    multi: bool = False
    timeout_s: float = REPLY_TIMEOUT_S


API_LEVEL = "Nats-Required-Api-Level"

CASES: dict[str, list[DG]] = {
    "api_level": [
        DG({"seq": 1}, headers=[(API_LEVEL, "6")]),
        DG({"seq": 1}, headers=[(API_LEVEL, "abc")]),
        DG({"seq": 1}, headers=[(API_LEVEL, "-1")]),
        DG({"seq": 1}, headers=[(API_LEVEL, "")]),
        DG({"seq": 1}, headers=[(API_LEVEL, "5")]),
        DG({"seq": 1}, headers=[(API_LEVEL, "0")]),
        DG({"seq": 1}, headers=[(API_LEVEL, " 5")]),
        DG({"seq": 1}, headers=[("nats-required-api-level", "9")]),
        DG(b"", headers=[(API_LEVEL, "6")]),
        DG(b"{x", headers=[(API_LEVEL, "6")]),
        DG(None, tail="$S.a", headers=[(API_LEVEL, "6")]),
    ],
    "empty_and_malformed": [
        DG(b""),
        DG(b"{x"),
        DG(b"[]"),
        DG(b"null"),
        DG(b"1"),
        DG(b'{"seq":1'),
        DG({"seq": -1}),
        DG({"seq": "1"}),
        DG({"seq": 1.5}),
        DG({"seq": 1, "batch": "2"}),
        DG({"multi_last": "$S.a"}),
        DG({"last_by_subj": 7}),
        DG({"seq": 1, "no_hdr": 1}),
        DG({"start_time": "yesterday"}),
    ],
    "no_selector": [
        DG({}),
        DG({"seq": 0}),
        DG({"batch": 2}),
        DG({"up_to_seq": 3}),
        DG({"max_bytes": 10}),
        DG({"no_hdr": True}),
        DG({"multi_last": []}),
        DG({"last_by_subj": ""}),
    ],
    "conflicts": [
        DG({"seq": 1, "last_by_subj": "$S.a"}),
        DG({"seq": 1, "start_time": BEFORE_ALL}),
        DG({"start_time": BEFORE_ALL, "last_by_subj": "$S.a"}),
        DG({"last_by_subj": "$S.a", "next_by_subj": "$S.a"}),
        DG({"last_by_subj": "$S.a", "batch": 2}),
        DG({"last_by_subj": "$S.a", "multi_last": ["$S.a"]}),
        DG({"next_by_subj": "$S.a", "multi_last": ["$S.a"]}),
        DG({"multi_last": ["$S.>"], "up_to_seq": 3, "up_to_time": AFTER_ALL}),
        DG({"last_by_subj": "$S.a", "batch": 0}),
    ],
    "not_found": [
        DG({"seq": 3}),
        DG({"seq": 100}),
        DG({"last_by_subj": "$S.zzz"}),
        DG({"next_by_subj": "$S.zzz"}),
        DG({"seq": 7, "next_by_subj": "$S.a"}),
        DG({"start_time": AFTER_ALL}),
        DG({"start_time": AFTER_ALL, "next_by_subj": "$S.a"}),
    ],
    "single_forms": [
        DG({"seq": 1}),
        DG({"seq": 4}),
        DG({"seq": 7}),
        DG({"seq": 2, "next_by_subj": "$S.a"}),
        DG({"next_by_subj": "$S.b"}),
        DG({"next_by_subj": "$S.*"}),
        DG({"next_by_subj": "$S.>", "seq": 3}),
        DG({"last_by_subj": "$S.a"}),
        DG({"last_by_subj": "$S.>"}),
        DG({"last_by_subj": "$S.c.x"}),
        DG({"last_by_subj": "$S.*"}),
        DG({"start_time": BEFORE_ALL}),
        DG({"start_time": "$T4"}),
        DG({"start_time": "$T4", "next_by_subj": "$S.a"}),
        DG({"seq": 1, "foo": 2}),
        DG({"seq": 2, "up_to_seq": 3}),
        DG({"seq": 2, "up_to_time": BEFORE_ALL}),
        DG({"seq": 1, "max_bytes": 1}),
        DG({"seq": 4, "no_hdr": True}),
        DG({"seq": 7, "no_hdr": True}),
        DG({"last_by_subj": "$S.a", "no_hdr": True}),
        DG({"seq": 1, "no_hdr": False}),
    ],
    "batch": [
        DG({"seq": 1, "batch": 3}, multi=True),
        DG({"seq": 1, "batch": 1}, multi=True),
        DG({"seq": 2, "batch": 100}, multi=True),
        DG({"seq": 3, "batch": 2}, multi=True),
        DG({"seq": 7, "batch": 2}, multi=True),
        DG({"next_by_subj": "$S.a", "batch": 5}, multi=True),
        DG({"seq": 2, "next_by_subj": "$S.a", "batch": 2}, multi=True),
        DG({"next_by_subj": "$S.>", "batch": 3}, multi=True),
        DG({"seq": 1, "batch": 5, "max_bytes": 1}, multi=True),
        DG({"seq": 1, "batch": 5, "max_bytes": 30}, multi=True),
        DG({"start_time": BEFORE_ALL, "batch": 2}, multi=True),
        DG({"start_time": "$T5", "batch": 5}, multi=True),
        DG({"start_time": "$T2", "next_by_subj": "$S.a", "batch": 5}, multi=True),
        DG({"seq": 1, "batch": 5, "no_hdr": True}, multi=True),
        DG({"seq": 1, "batch": 3, "foo": True}, multi=True),
    ],
    "batch_first_lookup_fails": [
        DG({"seq": 100, "batch": 3}, multi=True),
        DG({"seq": 8, "batch": 2}, multi=True),
        DG({"next_by_subj": "$S.zzz", "batch": 2}, multi=True),
        DG({"start_time": AFTER_ALL, "batch": 2}, multi=True),
    ],
    "multi_last": [
        DG({"multi_last": ["$S.>"]}, multi=True),
        DG({"multi_last": ["$S.a", "$S.b"]}, multi=True),
        DG({"multi_last": ["$S.b", "$S.a"]}, multi=True),
        DG({"multi_last": ["$S.a", "$S.a"]}, multi=True),
        DG({"multi_last": ["$S.*", "$S.c.x"]}, multi=True),
        DG({"multi_last": ["$S.>"], "seq": 5}, multi=True),
        DG({"multi_last": ["$S.>"], "seq": 7}, multi=True),
        DG({"multi_last": ["$S.>"], "up_to_seq": 3}, multi=True),
        DG({"multi_last": ["$S.>"], "up_to_seq": 100}, multi=True),
        DG({"multi_last": ["$S.>"], "up_to_time": "$T5"}, multi=True),
        DG({"multi_last": ["$S.>"], "up_to_time": AFTER_ALL}, multi=True),
        DG({"multi_last": ["$S.>"], "batch": 2}, multi=True),
        DG({"multi_last": ["$S.>"], "max_bytes": 1}, multi=True),
        DG({"multi_last": ["$S.>"], "start_time": AFTER_ALL}, multi=True),
        DG({"multi_last": ["$S.>"], "no_hdr": True}, multi=True),
        DG({"multi_last": ["$S.a"], "up_to_seq": 1}, multi=True),
    ],
    "multi_last_no_results": [
        DG({"multi_last": ["$S.zzz"]}, multi=True),
        DG({"multi_last": ["$S.>"], "up_to_time": BEFORE_ALL}, multi=True),
        DG({"multi_last": ["$S.>"], "up_to_time": "$T1"}, multi=True),
        DG({"multi_last": ["$S.>"], "seq": 8}, multi=True),
        DG({"multi_last": ["$S.b"], "up_to_seq": 1}, multi=True),
    ],
    "subject_appended": [
        DG(None, tail="$S.a"),
        DG(None, tail="$S.c.x"),
        DG(None, tail="$S.*"),
        DG(None, tail="$S.>"),
        DG(None, tail="$S.h"),
        DG({}, tail="$S.a"),
        DG({"no_hdr": True}, tail="$S.a"),
        DG({"max_bytes": 5}, tail="$S.a"),
        DG({"foo": 1}, tail="$S.a"),
        DG(None, tail="$S.zzz"),
        DG(b"{x", tail="$S.a"),
        DG(b"[]", tail="$S.a"),
        DG({"seq": 1}, tail="$S.a"),
        DG({"batch": 1}, tail="$S.a"),
        DG({"last_by_subj": "$S.a"}, tail="$S.a"),
        DG({"next_by_subj": "$S.a"}, tail="$S.a"),
        DG({"multi_last": ["$S.a"]}, tail="$S.a"),
        DG({"start_time": BEFORE_ALL}, tail="$S.a"),
        DG({"up_to_seq": 1}, tail="$S.a"),
        DG({"up_to_time": AFTER_ALL}, tail="$S.a"),
        DG(None, tail="$S.a", headers=[("Foo", "bar")]),
    ],
}


async def run_cases(s: Session, cases: list[DG]) -> None:
    subs = await standard_stream(s)
    for case in cases:
        body = case.body if isinstance(case.body, bytes | None) else substitute(case.body, subs)
        tail = None if case.tail is None else substitute(case.tail, subs)
        await s.direct_get(
            s.stream(),
            body,
            subject_tail=tail,
            headers=case.headers,
            multi=case.multi,
            timeout_s=case.timeout_s,
            label=f"DG {case.tail or ''} {case.body!r} {case.headers or ''}",
        )


@pytest.mark.parametrize("group", sorted(CASES))
async def test_direct_get_forms(diff: Differ, group: str) -> None:
    async def scenario(s: Session) -> None:
        await run_cases(s, CASES[group])

    await diff.run(scenario)


async def test_direct_get_multi_last_subject_limit(diff: Differ) -> None:
    """1024 matching subjects are allowed, 1025 give 413 (batch does not help)."""

    async def scenario(s: Session) -> None:
        await s.create({"name": s.stream(), "subjects": [s.subj(">")], "allow_direct": True})
        nc = await s.nc()
        for i in range(MULTI_LAST_SUBJECTS_MAX):
            await nc.publish(s.subj(f"k.{i}"), b"x")
        await nc.flush()
        await s.wait_messages(s.stream(), MULTI_LAST_SUBJECTS_MAX)
        await s.direct_get(s.stream(), {"multi_last": [s.subj("k.>")], "batch": 3}, multi=True)
        await s.direct_get(s.stream(), {"multi_last": [s.subj("k.>")], "seq": 1022}, multi=True)
        await s.publish(s.subj("k.last"), b"y")
        await s.direct_get(s.stream(), {"multi_last": [s.subj("k.>")]}, multi=True)
        await s.direct_get(s.stream(), {"multi_last": [s.subj("k.>")], "batch": 5}, multi=True)
        await s.direct_get(
            s.stream(), {"multi_last": [s.subj("k.>")], "up_to_seq": 1024, "batch": 2}, multi=True
        )
        await s.direct_get(s.stream(), {"multi_last": [s.subj("k.1")]}, multi=True)

    await diff.run(scenario)


async def test_direct_get_header_exact_bytes(diff: Differ) -> None:
    """Stored headers come first, verbatim (odd spacing and order kept), then the four."""

    async def scenario(s: Session) -> None:
        await s.create({"name": s.stream(), "subjects": [s.subj(">")], "allow_direct": True})
        conn = await s.raw()
        raw_header = b"NATS/1.0\r\nZed:  two spaces \r\nalpha: lower\r\nZed: again\r\n\r\n"
        await s.exchange(conn, "hpub", hpub(s.subj("h"), raw_header, b"body", "_NO.REPLY"))
        await s.exchange(conn, "pub", pub(s.subj("p"), b"plain"))
        await s.wait_messages(s.stream(), 2)
        await s.direct_get(s.stream(), {"seq": 1})
        await s.direct_get(s.stream(), {"seq": 2})
        await s.direct_get(s.stream(), None, subject_tail=s.subj("h"))
        await s.direct_get(s.stream(), {"seq": 1, "batch": 2}, multi=True)
        await s.direct_get(s.stream(), {"multi_last": [s.subj(">")]}, multi=True)

    await diff.run(scenario)


async def test_direct_get_allow_direct_toggle(diff: Differ) -> None:
    """No responder without allow_direct: 503 with Nats-Subject; update switches at once."""

    async def scenario(s: Session) -> None:
        name = s.stream()
        reply = await s.create({"name": name, "subjects": [s.subj(">")]})
        s.record("allow_direct default", reply.get("config", "allow_direct"))
        await s.publish(s.subj("a"), "one")
        await s.direct_get(name, {"seq": 1})
        await s.direct_get(name, None, subject_tail=s.subj("a"))
        await s.direct_get(s.stream("MISSING"), {"seq": 1})
        await s.direct_get(s.stream("MISSING"), None, subject_tail="x.y")
        on = {"name": name, "subjects": [s.subj(">")], "allow_direct": True}
        await s.api(f"STREAM.UPDATE.{name}", on)
        await s.direct_get(name, {"seq": 1})
        await s.direct_get(name, None, subject_tail=s.subj("a"))
        await s.api(f"STREAM.UPDATE.{name}", {**on, "allow_direct": False})
        await s.direct_get(name, {"seq": 1})
        # A client without no_responders gets nothing at all (the PONG comes back alone).
        quiet = await s.raw({**DEFAULT_CONNECT, "no_responders": False})
        await s.exchange(
            quiet,
            "no no_responders",
            b"SUB _Q.> 1\r\n" + pub(f"$JS.API.DIRECT.GET.{name}", b'{"seq":1}', "_Q.1"),
        )

    await diff.run(scenario)


async def test_direct_get_max_msgs_per_subject_keeps_allow_direct_off(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        await s.create({"name": s.stream(), "subjects": [s.subj(">")], "max_msgs_per_subject": 1})
        await s.direct_get(s.stream(), {"seq": 1})

    await diff.run(scenario)


async def test_direct_get_no_reply_subject_is_ignored(diff: Differ) -> None:
    """A Direct Get without reply subject gets nothing; the connection is unaffected."""

    async def scenario(s: Session) -> None:
        await standard_stream(s)
        conn = await s.raw()
        await s.exchange(
            conn,
            "no reply",
            b"SUB _DIFF.> 7\r\n" + pub(f"$JS.API.DIRECT.GET.{s.stream()}", b'{"seq":1}'),
        )
        await s.exchange(
            conn,
            "empty key",
            pub(f"$JS.API.DIRECT.GET.{s.stream()}.", b"", "_DIFF.x"),
            timeout_s=NO_REPLY_TIMEOUT_S,
        )

    await diff.run(scenario)


# jetraft's read-your-writes field: bases that each valid form takes (body, subject tail, multi)
MIN_LAST_SEQ_BASES: list[DG] = [
    DG({"seq": 2}),
    DG({"seq": 3}),
    DG({"last_by_subj": "$S.a"}),
    DG({"next_by_subj": "$S.b"}),
    DG({"start_time": "$T4"}),
    DG({"seq": 4, "no_hdr": True}),
    DG({"seq": 1, "batch": 3}, multi=True),
    DG({"multi_last": ["$S.>"]}, multi=True),
    DG({}, tail="$S.a"),
    DG({}),  # no selector: 408 Empty Request with the field as without it
    DG({"seq": 1, "last_by_subj": "$S.a"}),  # a conflict: 408 Bad Request either way
]


def _answer_of(frames: list[Any]) -> list[Any]:
    """The reply frames without the reply subject, which differs from request to request."""
    return [f.key()[4:] if f.op in ("MSG", "HMSG") else f.key() for f in frames]


async def test_direct_get_min_last_seq_is_ignored_by_nats_server(diff: Differ) -> None:
    """nats-server ignores ``min_last_seq`` in Direct Get (the same answer with and without it),
    so a request carrying it stays valid there; jetraft, whose stream has reached the sequence,
    answers alike. MSG.GET refuses the field as any unknown field (10025)."""
    last_seq = len(STANDARD_MESSAGES)

    async def scenario(s: Session) -> None:
        subs = await standard_stream(s)
        for case in MIN_LAST_SEQ_BASES:
            assert isinstance(case.body, dict)
            tail = None if case.tail is None else substitute(case.tail, subs)
            answers = []
            for min_last_seq in (None, 1, last_seq):
                body = dict(case.body)
                if min_last_seq is not None:
                    body["min_last_seq"] = min_last_seq
                frames = await s.direct_get(
                    s.stream(),
                    substitute(body, subs),
                    subject_tail=tail,
                    multi=case.multi,
                    label=f"DG {case.tail or ''} {body!r}",
                )
                answers.append(_answer_of(frames))
            s.record(
                f"min_last_seq ignored: {case.tail or ''} {case.body!r}",
                answers[1:] == [answers[0]] * 2,
            )
        await s.api(f"STREAM.MSG.GET.{s.stream()}", {"seq": 1, "min_last_seq": 1})
        await s.api(f"STREAM.MSG.GET.{s.stream()}", {"min_last_seq": 100})

    await diff.run(scenario)
