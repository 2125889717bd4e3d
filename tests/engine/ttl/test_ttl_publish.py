"""Publishing with ``Nats-TTL``: errors 10165/10166 and where they fall in nats-server's check
order, the stored header (kept as sent, or raised to the marker floor), and the accounting size
of a rewritten message (docs/nats-differences.md §3 and its "TTL floor", §5)."""

from __future__ import annotations

import pytest

from engine import limits
from protocol import errors
from tests.engine.stream.harness import MakeHarness, S, hdr

TTL = "Nats-TTL"
TTL_ON = {"allow_msg_ttl": True}
MARKERS_5S = {"allow_msg_ttl": True, "allow_rollup_hdrs": True, "subject_delete_marker_ttl": 5 * S}


@pytest.mark.parametrize("value", ["never", "NEVER", "1s", "1h", "30", " 10", "1.5s"])
def test_ttl_on_a_stream_without_ttls_is_disabled(make_harness: MakeHarness, value: str) -> None:
    h = make_harness()
    assert h.fail("S.a", headers=hdr((TTL, value))).spec is errors.MESSAGE_TTL_DISABLED
    assert h.stream.state().messages == 0


@pytest.mark.parametrize("value", ["-1", "0", "abc", "500ms", "0s", "10 ", "+5"])
def test_unparsable_ttl_without_ttls_is_invalid_not_disabled(
    make_harness: MakeHarness, value: str
) -> None:
    """The standalone quirk (§3.3): parse failures pass the "disabled" check as "no TTL"."""
    h = make_harness()
    assert h.fail("S.a", headers=hdr((TTL, value))).spec is errors.MESSAGE_TTL_INVALID


@pytest.mark.parametrize("value", ["", "00"])
def test_no_ttl_values_are_stored_as_sent(make_harness: MakeHarness, value: str) -> None:
    for config in ({}, TTL_ON):
        h = make_harness(**config)
        block = hdr((TTL, value))
        assert h.ok("S.a", headers=block) == 1
        stored = h.store.load(1)
        assert stored is not None and stored.hdr == block
        assert h.stream.next_expiry_ns() is None


@pytest.mark.parametrize("value", ["-1", "0", "0s", "500ms", "abc", "1e3", "10 ", "-5s"])
def test_invalid_ttl_on_a_ttl_stream(make_harness: MakeHarness, value: str) -> None:
    h = make_harness(**TTL_ON)
    assert h.fail("S.a", headers=hdr((TTL, value))).spec is errors.MESSAGE_TTL_INVALID
    assert h.stream.state().last_seq == 0


def test_lowercase_key_is_not_a_ttl(make_harness: MakeHarness) -> None:
    h = make_harness()
    assert h.ok("S.a", headers=hdr(("nats-ttl", "abc"))) == 1


def test_stored_header_keeps_the_clients_text(make_harness: MakeHarness) -> None:
    h = make_harness(**TTL_ON)
    for i, value in enumerate(["1.5s", "5m", " 10", "never", "NEVER", "30"], start=1):
        block = hdr(("Foo", "bar"), (TTL, value))
        assert h.ok("S.a", headers=block) == i
        stored = h.store.load(i)
        assert stored is not None and stored.hdr == block


def test_check_order_around_the_ttl_errors(make_harness: MakeHarness) -> None:
    """§5.4: expected stream (2) < TTL disabled (3) < expected sequences (4, 5) < dedupe (7)
    < rollup (9) < max_msg_size ... < invalid TTL (13) < discard-new limits (14)."""
    off = make_harness()
    expect = "Nats-Expected-Last-Sequence"
    assert off.fail("S.a", headers=hdr((TTL, "1h"), (expect, "9"))).spec is (
        errors.MESSAGE_TTL_DISABLED
    )
    assert off.fail("S.a", headers=hdr((TTL, "abc"), (expect, "9"))).spec is (
        errors.STREAM_WRONG_LAST_SEQUENCE
    )
    assert off.fail("S.a", headers=hdr((TTL, "1h"), ("Nats-Expected-Stream", "X"))).spec is (
        errors.STREAM_NOT_MATCH
    )
    on = make_harness(allow_msg_ttl=True, max_msgs=1, discard="new")
    assert on.ok("S.a", headers=hdr(("Nats-Msg-Id", "m1"), (TTL, "1h"))) == 1
    dup = on.publish("S.a", headers=hdr(("Nats-Msg-Id", "m1"), (TTL, "abc")))
    assert dup.duplicate and dup.seq == 1
    assert on.fail("S.a", headers=hdr((TTL, "abc"), ("Nats-Rollup", "sub"))).spec is (
        errors.STREAM_ROLLUP_FAILED
    )
    assert on.fail("S.a", headers=hdr((TTL, "abc"))).spec is errors.MESSAGE_TTL_INVALID
    full = on.fail("S.a", headers=hdr((TTL, "1h")))
    assert full.spec is errors.STREAM_STORE_FAILED  # the stream is full: discard new


def test_marker_floor_raises_and_rewrites(make_harness: MakeHarness) -> None:
    h = make_harness(**MARKERS_5S)
    sent = hdr(("Foo", "bar"), (TTL, "1s"), ("Baz", "q"))
    assert h.ok("S.a", headers=sent) == 1
    stored = h.store.load(1)
    assert stored is not None
    assert stored.hdr == hdr(("Foo", "bar"), ("Baz", "q"), (TTL, "5"))
    # the deadline and the accounting size follow the stored header
    assert h.stream.next_expiry_ns() == stored.ts_ns + 5 * S
    size = limits.msg_size_bytes("memory", len("S.a"), len(stored.hdr), 1)
    assert h.stream.state().bytes == size
    for value in ("5", "5s", "6", "never"):
        seq = h.ok("S.b", headers=hdr((TTL, value)))
        kept = h.store.load(seq)
        assert kept is not None and kept.hdr == hdr((TTL, value))


def test_marker_floor_not_applied_with_one_message_per_subject(make_harness: MakeHarness) -> None:
    h = make_harness(max_msgs_per_subject=1, **MARKERS_5S)
    assert h.ok("S.a", headers=hdr((TTL, "1s"))) == 1
    stored = h.store.load(1)
    assert stored is not None and stored.hdr == hdr((TTL, "1s"))
    assert h.stream.next_expiry_ns() == stored.ts_ns + S


def test_oversized_after_the_rewrite_is_judged_on_the_sent_size(make_harness: MakeHarness) -> None:
    """max_msg_size is checked before the floor rewrite (stream.go order): a message that
    fits as sent is stored even though its rewritten header is one byte longer."""
    sent = hdr((TTL, "9"))
    markers = {**MARKERS_5S, "subject_delete_marker_ttl": 10 * S}
    h = make_harness(max_msg_size=len(sent) + 1, **markers)
    assert h.ok("S.a", headers=sent, data=b"x") == 1
    stored = h.store.load(1)
    assert stored is not None and stored.hdr == hdr((TTL, "10"))
    assert len(stored.hdr) + len(stored.data) == len(sent) + 2
