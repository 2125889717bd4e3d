"""Publish-time checks: each one's error, and the ORDER in which nats-server applies them.

Every expectation below was probed on the nats-server v2.15.1 binary (a stream "O" with
max_msg_size 300 that already holds seq 1 = O.a with Nats-Msg-Id m1 and seq 2 = O.b with m2);
a message that fails two checks must get the earlier check's error.
"""

from __future__ import annotations

import pytest

from engine.stream import PubResult
from tests.engine.stream.harness import Harness, MakeHarness, hdr

OK = ("ok",)
BIG = b"x" * 400
BIG_HDR_VALUE = "y" * 66_000


def dup(seq: int) -> tuple[str, int]:
    return ("dup", seq)


def err(err_code: int, description: str) -> tuple[str, int, str]:
    return ("err", err_code, description)


WRONG_LAST_1 = err(10071, "wrong last sequence: 1")
WRONG_LAST_2 = err(10071, "wrong last sequence: 2")
NOT_MATCH = err(10060, "expected stream does not match")
TTL_DISABLED = err(10166, "per-message TTL is disabled")
TTL_INVALID = err(10165, "invalid per-message TTL")
TOO_BIG = err(10054, "message size exceeds maximum allowed")
HDR_TOO_BIG = err(10097, "header size exceeds maximum allowed of 64k")
ROLLUP_NOT_PERMITTED = err(10111, "rollup not permitted")
SOURCE_HDR = err(10227, "message stream source header is not allowed")
NOT_READY = err(10193, "missing sequence for expected last sequence per subject")

ELS = "Nats-Expected-Last-Sequence"
ELSS = "Nats-Expected-Last-Subject-Sequence"
ELSS_SUBJ = "Nats-Expected-Last-Subject-Sequence-Subject"
ELMI = "Nats-Expected-Last-Msg-Id"
EXP_STREAM = "Nats-Expected-Stream"
MSG_ID = "Nats-Msg-Id"
ROLLUP = "Nats-Rollup"
TTL = "Nats-TTL"
SOURCE = "Nats-Stream-Source"

# (headers, payload, expected) — published on O.a after the two setup messages. Rows that store a
# message are last, so earlier rows see last_seq 2.
PROBED_ORDER: list[tuple[list[tuple[str, str]], bytes, tuple[object, ...]]] = [
    ([(EXP_STREAM, "X"), (ELS, "5")], b"1", NOT_MATCH),
    ([(ELSS, "9"), (ELS, "5")], b"1", WRONG_LAST_1),
    ([(ELS, "5"), (MSG_ID, "m1")], b"1", WRONG_LAST_2),
    ([(ELS, "abc")], b"1", WRONG_LAST_2),
    ([(ELSS, "abc")], b"1", WRONG_LAST_1),
    ([(ELSS, "0")], b"1", WRONG_LAST_1),
    ([(ELSS, "1"), (ELSS_SUBJ, "O.*")], b"1", WRONG_LAST_2),
    ([(ELSS_SUBJ, "O.*")], b"1", NOT_READY),
    ([(ELSS_SUBJ, "O.*"), (MSG_ID, "m1")], b"1", NOT_READY),
    ([(SOURCE, "x"), (MSG_ID, "m1")], b"1", SOURCE_HDR),
    ([(MSG_ID, "m1"), (ELMI, "zz")], b"1", dup(1)),
    ([(ELMI, "zz"), (ROLLUP, "bad")], b"1", err(10070, "wrong last msg ID: m2")),
    ([(ELMI, "m1")], b"1", err(10070, "wrong last msg ID: m2")),
    ([(ROLLUP, "bad")], b"1", ROLLUP_NOT_PERMITTED),
    ([(ROLLUP, "sub")], b"1", ROLLUP_NOT_PERMITTED),
    ([(TTL, "10")], b"1", TTL_DISABLED),
    ([(TTL, "never")], b"1", TTL_DISABLED),
    ([(TTL, "1.5s")], b"1", TTL_DISABLED),
    ([(TTL, "abc")], b"1", TTL_INVALID),
    ([(TTL, "0")], b"1", TTL_INVALID),
    ([(TTL, "500ms")], b"1", TTL_INVALID),
    ([(TTL, "abc"), (MSG_ID, "m1")], b"1", dup(1)),  # an unparsable TTL is reported late
    ([(TTL, "abc"), (ROLLUP, "bad")], b"1", ROLLUP_NOT_PERMITTED),
    ([(TTL, "10"), (EXP_STREAM, "X")], b"1", NOT_MATCH),
    ([(TTL, "10"), (ELS, "77")], b"1", TTL_DISABLED),
    # sizes come right after "sealed", before every header check
    ([(ROLLUP, "bad")], BIG, TOO_BIG),
    ([(EXP_STREAM, "X")], BIG, TOO_BIG),
    ([(MSG_ID, "m1")], BIG, TOO_BIG),
    ([(ELS, "9")], BIG, TOO_BIG),
    ([(SOURCE, "x")], BIG, TOO_BIG),
    ([(TTL, "5")], BIG, TOO_BIG),
    ([(TTL, "abc")], BIG, TOO_BIG),
    ([(ELSS_SUBJ, "O.*")], BIG, TOO_BIG),
    ([(EXP_STREAM, "X"), ("X", BIG_HDR_VALUE)], b"1", TOO_BIG),  # 10054 before 10097
    # rows that store
    ([(ELS, "")], b"1", OK),  # an empty value is no header
    ([(ELSS, "0"), (ELSS_SUBJ, "O.zz")], b"1", OK),
    ([(ELSS, "0"), (ELSS_SUBJ, "Q.>")], b"1", OK),
    ([("nats-expected-last-sequence", "9")], b"1", OK),  # keys are case-sensitive
]


def _setup(make_harness: MakeHarness, **config: object) -> Harness:
    h = make_harness(name="O", subjects=["O.>"], **config)
    assert h.ok("O.a", b"1", hdr((MSG_ID, "m1"))) == 1
    assert h.ok("O.b", b"2", hdr((MSG_ID, "m2"))) == 2
    return h


def _outcome(result: PubResult) -> tuple[object, ...]:
    if result.error is not None:
        assert result.seq == 0 and not result.duplicate
        return ("err", result.error.err_code, result.error.description)
    if result.duplicate:
        return ("dup", result.seq)
    return OK


def test_check_order_matches_nats_server(make_harness: MakeHarness) -> None:
    h = _setup(make_harness, max_msg_size=300)
    for headers, payload, expected in PROBED_ORDER:
        before = h.stream.state()
        result = h.publish("O.a", payload, hdr(*headers))
        assert _outcome(result) == expected, (headers, len(payload))
        if expected != OK:
            assert h.stream.state() == before  # a rejected publish changes nothing


def test_oversized_header_beats_header_checks(make_harness: MakeHarness) -> None:
    h = _setup(make_harness)
    for headers in ([(EXP_STREAM, "X")], [(MSG_ID, "m1")], [(ELS, "9")], [(TTL, "abc")]):
        result = h.publish("O.a", b"1", hdr(*headers, ("X", BIG_HDR_VALUE)))
        assert _outcome(result) == HDR_TOO_BIG


def test_header_size_limit_is_65535_bytes(make_harness: MakeHarness) -> None:
    h = make_harness()
    base = len(hdr(("X", "")))
    assert h.publish("S.a", b"", hdr(("X", "y" * (65_535 - base)))).error is None
    error = h.fail("S.a", b"", hdr(("X", "y" * (65_536 - base))))
    assert (error.err_code, error.code) == (10097, 400)


def test_max_msg_size_counts_header_plus_payload(make_harness: MakeHarness) -> None:
    """Probed: max_msg_size 30, an 18-byte header + 12 bytes passes, + 13 bytes fails."""
    h = make_harness(max_msg_size=30)
    header = hdr(("A", "b"))
    assert len(header) == 18
    h.ok("S.a", b"x" * 12, header)
    error = h.fail("S.a", b"x" * 13, header)
    assert (error.err_code, error.code) == (10054, 400)
    h.ok("S.a", b"x" * 30)
    h.fail("S.a", b"x" * 31)


def test_sealed_rejects_everything_first(make_harness: MakeHarness) -> None:
    h = make_harness(max_msg_size=300)
    h.ok("S.a")
    assert h.update(sealed=True) is None
    for payload, headers in ((b"x", b""), (BIG, b""), (b"x", hdr(("X", BIG_HDR_VALUE)))):
        error = h.fail("S.a", payload, headers)
        assert (error.err_code, error.description) == (10109, "invalid operation on sealed stream")


def test_expected_last_sequence_uses_the_stream_last_seq(make_harness: MakeHarness) -> None:
    h = make_harness()
    assert h.ok("S.a", headers=hdr((ELS, "0"))) == 1
    assert h.fail("S.a", headers=hdr((ELS, "0"))).description == "wrong last sequence: 1"
    h.ok("S.b", headers=hdr((ELS, "1")))
    h.purge()
    # last_seq survives a purge
    assert h.fail("S.a", headers=hdr((ELS, "0"))).description == "wrong last sequence: 2"
    assert h.ok("S.a", headers=hdr((ELS, "2"))) == 3


def test_expected_last_sequence_with_first_seq_config(make_harness: MakeHarness) -> None:
    """Probed: a stream created with first_seq 100 has last_seq 99."""
    h = make_harness(first_seq=100)
    assert h.fail("S.a", headers=hdr((ELS, "0"))).description == "wrong last sequence: 99"
    assert h.ok("S.a", headers=hdr((ELS, "99"))) == 100


def test_expected_last_subject_sequence(make_harness: MakeHarness) -> None:
    h = make_harness()
    assert h.ok("S.a", headers=hdr((ELSS, "0"))) == 1  # no message on the subject yet
    h.ok("S.b")
    assert h.ok("S.a", headers=hdr((ELSS, "1"))) == 3
    error = h.fail("S.a", headers=hdr((ELSS, "1")))
    assert (error.err_code, error.description) == (10071, "wrong last sequence: 3")
    # the -Subject variant, with a wildcard: the last message over all matching subjects
    assert h.ok("S.c", headers=hdr((ELSS, "3"), (ELSS_SUBJ, "S.*"))) == 4
    assert h.ok("S.c", headers=hdr((ELSS, "2"), (ELSS_SUBJ, "S.b"))) == 5
    assert h.fail("S.c", headers=hdr((ELSS, "9"), (ELSS_SUBJ, "S.zz"))).description == (
        "wrong last sequence: 0"
    )
    h.delete(3)
    assert h.ok("S.a", headers=hdr((ELSS, "1"))) == 6  # last *live* message on the subject


def test_rollup_value_errors(make_harness: MakeHarness) -> None:
    h = make_harness(allow_rollup_hdrs=True)
    error = h.fail("S.a", headers=hdr((ROLLUP, "Bogus")))
    assert (error.err_code, error.code, error.description) == (
        10111,
        500,
        'rollup value invalid: "bogus"',  # lower-cased, then Go %q
    )
    error = h.fail("S.a", headers=hdr((ROLLUP, 'a"b\\c')))
    assert error.description == 'rollup value invalid: "a\\"b\\\\c"'


def test_rollup_not_permitted_with_deny_purge(make_harness: MakeHarness) -> None:
    h = make_harness(deny_purge=True, allow_rollup_hdrs=True)
    assert h.fail("S.a", headers=hdr((ROLLUP, "sub"))).description == "rollup not permitted"


def test_rollup_sub_and_all(make_harness: MakeHarness) -> None:
    """Probed: after a a b a b, a SUB rollup on a keeps 3 5 6; an All rollup keeps only itself."""
    h = make_harness(allow_rollup_hdrs=True)
    for subject in ("S.a", "S.a", "S.b", "S.a", "S.b"):
        h.ok(subject)
    assert h.ok("S.a", headers=hdr((ROLLUP, "SUB"))) == 6
    state = h.stream.state()
    assert (state.messages, state.first_seq, state.last_seq, state.num_deleted) == (3, 3, 6, 1)
    assert h.live() == [3, 5, 6]
    assert h.ok("S.c", headers=hdr((ROLLUP, "All"))) == 7
    assert h.live() == [7]
    assert h.stream.state().first_seq == 7


def test_msg_id_dedupe_returns_the_original_seq(make_harness: MakeHarness) -> None:
    h = make_harness()
    assert h.ok("S.a", headers=hdr((MSG_ID, "id1"))) == 1
    result = h.publish("S.b", headers=hdr((MSG_ID, "id1")))
    assert result == PubResult(1, duplicate=True)
    assert h.stream.state().messages == 1
    # lower-case key is not a msg id
    assert h.ok("S.a", headers=hdr(("nats-msg-id", "id1"))) == 2


def test_dedupe_inside_one_publish_entry(make_harness: MakeHarness) -> None:
    h = make_harness()
    results = h.publish_many(
        [
            ("S.a", hdr((MSG_ID, "x")), b"1"),
            ("S.b", hdr((MSG_ID, "x")), b"2"),
            ("S.c", hdr((MSG_ID, "y")), b"3"),
        ]
    )
    assert results == [PubResult(1), PubResult(1, duplicate=True), PubResult(2)]


def test_expected_last_msg_id_tracks_the_last_stored_message(make_harness: MakeHarness) -> None:
    h = make_harness()
    assert h.fail("S.a", headers=hdr((ELMI, "x"))).description == "wrong last msg ID: "
    h.ok("S.a", headers=hdr((MSG_ID, "x1")))
    h.ok("S.a", headers=hdr((ELMI, "x1"), (MSG_ID, "x2")))
    h.ok("S.a")  # a message without an id resets it to ""
    assert h.fail("S.a", headers=hdr((ELMI, "x2"))).description == "wrong last msg ID: "
    h.ok("S.a", headers=hdr((MSG_ID, "x3")))
    # a duplicate or a failed publish does not change it, a purge does not either (probed)
    h.publish("S.a", headers=hdr((MSG_ID, "x1")))
    h.fail("S.a", headers=hdr((ELS, "999"), (MSG_ID, "x9")))
    h.purge()
    h.ok("S.a", headers=hdr((ELMI, "x3")))


@pytest.mark.parametrize("storage", ["memory", "file"])
def test_ttl_header_on_a_ttl_stream_is_stored(make_harness: MakeHarness, storage: str) -> None:
    h = make_harness(allow_msg_ttl=True, storage=storage)
    assert h.ok("S.a", headers=hdr((TTL, "5s"))) == 1
    assert h.fail("S.a", headers=hdr((TTL, "abc"))).err_code == 10165
    assert h.ok("S.a", headers=hdr((TTL, ""))) == 2  # empty value: no TTL


def test_ttl_that_parses_to_zero_is_no_ttl(make_harness: MakeHarness) -> None:
    """Probed: "Nats-TTL: 00" on a TTL-disabled stream is stored (parseInt64 gives 0, no error)."""
    h = make_harness()
    assert h.ok("S.a", headers=hdr((TTL, "00"))) == 1


def test_request_info_header_is_stripped_before_the_size_checks(make_harness: MakeHarness) -> None:
    """Probed: max_msg_size 30, 10-byte payload plus a Nats-Request-Info header is stored with
    no header at all (29 bytes in memory); the stripped header no longer counts."""
    h = make_harness(max_msg_size=30, subjects=["O.>"])
    assert h.ok("O.a", b"x" * 10, hdr(("Nats-Request-Info", "y" * 20))) == 1
    stored = h.stream.load(1)
    assert stored is not None and stored.hdr == b""
    assert h.stream.state().bytes == 29
    error = h.fail("O.a", b"x" * 10, hdr(("Nats-Request-Info", "y" * 20), (EXP_STREAM, "Z")))
    assert error.err_code == 10054
    assert h.ok("O.a", b"", hdr(("Nats-Request-Info", "y"), ("A", "b"))) == 2
    stored = h.stream.load(2)
    assert stored is not None and stored.hdr == hdr(("A", "b"))
