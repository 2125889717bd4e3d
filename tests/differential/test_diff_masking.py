"""The differential harness itself: masking hides only per-server values, and a real
difference between two servers fails with both replies shown."""

from __future__ import annotations

import json

import pytest

from tests.differential.diff_harness import Differ, Session, Transcript, diff_report
from tests.differential.diff_mask import (
    TS_MASK,
    ZERO_TIME,
    comparable_json_reply,
    mask_header_block,
    mask_json,
    mask_timestamp,
)
from tests.differential.diff_raw import Frame

pytestmark = pytest.mark.differential


@pytest.mark.parametrize(
    "value",
    ["2026-11-22T02:01:11.58597948Z", "2026-11-22T02:01:11Z", "2026-11-22T02:01:11.5Z"],
)
def test_well_formed_timestamps_are_masked(value: str) -> None:
    assert mask_timestamp(value) == TS_MASK


@pytest.mark.parametrize(
    "value",
    [
        ZERO_TIME,
        "2026-11-22T02:01:11.500Z",  # Go trims trailing zeros
        "2026-11-22T02:01:11.1234567891Z",  # more than nanoseconds
        "2026-11-22 00:29:27.587861324 +0000 UTC",  # the ADR-31 example format
        "2026-11-22T02:01:11.5+00:00",
        "",
        17,
    ],
)
def test_other_time_values_are_kept(value: object) -> None:
    assert mask_timestamp(value) == value


def test_mask_json_only_touches_listed_keys() -> None:
    info = {
        "type": "t",
        "config": {"name": "S", "metadata": {"_nats.ver": "2.15.1", "_nats.level": "5"}},
        "created": "2026-11-22T02:01:09.269085396Z",
        "state": {"first_seq": 3, "first_ts": ZERO_TIME, "last_ts": "2026-11-22T02:01:09Z"},
        "cluster": {"leader": "n1", "name": "C1"},
        "leader": "not inside cluster",
        "server_id": "NABC",
        "client_id": 7,
    }
    masked = mask_json(info)
    assert masked["config"]["metadata"] == {"_nats.ver": "<_nats.ver:str>", "_nats.level": "5"}
    assert masked["created"] == TS_MASK
    assert masked["state"] == {"first_seq": 3, "first_ts": ZERO_TIME, "last_ts": TS_MASK}
    assert masked["cluster"] == {"leader": "<leader:str>", "name": "C1"}
    assert masked["leader"] == "not inside cluster"
    assert masked["server_id"] == "<server_id:str>"
    assert masked["client_id"] == "<client_id:int>"


def test_pub_acks_and_errors_compare_bytes() -> None:
    dup = b'{"stream":"PB","seq":2,"duplicate": true}'
    assert comparable_json_reply(dup) == ("bytes", dup)
    assert comparable_json_reply(dup) != comparable_json_reply(
        b'{"stream":"PB","seq":2,"duplicate":true}'
    )
    assert comparable_json_reply(b'{"stream":"PB","seq":2}') != comparable_json_reply(
        b'{"seq":2,"stream":"PB"}'
    )
    err = b'{"type":"x","error":{"code":404,"err_code":10059,"description":"stream not found"}}'
    reordered = (
        b'{"type":"x","error":{"err_code":10059,"code":404,"description":"stream not found"}}'
    )
    assert comparable_json_reply(err) != comparable_json_reply(reordered)


def test_other_json_ignores_key_order_but_not_types() -> None:
    a = {
        "type": "t",
        "config": {"allow_direct": True, "max_msgs": -1},
        "ts": "2026-11-22T01:00:00Z",
    }
    b = {
        "ts": "2027-01-01T00:00:00.1Z",
        "config": {"max_msgs": -1, "allow_direct": True},
        "type": "t",
    }
    c = {"type": "t", "config": {"allow_direct": 1, "max_msgs": -1}, "ts": "2026-11-22T01:00:00Z"}
    d = {
        "type": "t",
        "config": {"allow_direct": True, "max_msgs": -1.0},
        "ts": "2026-11-22T01:00:00Z",
    }

    def cmp(obj: object) -> object:
        return comparable_json_reply(json.dumps(obj).encode())

    assert cmp(a) == cmp(b)
    assert cmp(a) != cmp(c)
    assert cmp(a) != cmp(d)


def test_header_block_masks_only_the_time_stamp() -> None:
    block = (
        b"NATS/1.0\r\nNats-Stream: S\r\nNats-Sequence: 1\r\n"
        b"Nats-Time-Stamp: 2026-11-22T01:59:00.321844294Z\r\n\r\n"
    )
    assert mask_header_block(block) == (
        b"NATS/1.0\r\nNats-Stream: S\r\nNats-Sequence: 1\r\nNats-Time-Stamp: <ts>\r\n\r\n"
    )
    adr_format = b"NATS/1.0\r\nNats-Time-Stamp: 2022-08-06 00:29:27.587861324 +0000 UTC\r\n\r\n"
    assert mask_header_block(adr_format) == adr_format


def test_frame_keys_ignore_sizes_but_not_content() -> None:
    ts1 = b"NATS/1.0\r\nNats-Sequence: 1\r\nNats-Time-Stamp: 2026-11-22T01:59:00.3Z\r\n\r\n"
    ts2 = b"NATS/1.0\r\nNats-Sequence: 1\r\nNats-Time-Stamp: 2026-11-22T01:59:00.321Z\r\n\r\n"
    seq2 = b"NATS/1.0\r\nNats-Sequence: 2\r\nNats-Time-Stamp: 2026-11-22T01:59:00.3Z\r\n\r\n"
    one = Frame("HMSG", b"HMSG i 1 60 61", "i", "1", "", ts1, b"x")
    two = Frame("HMSG", b"HMSG i 1 62 63", "i", "1", "", ts2, b"x")
    other = Frame("HMSG", b"HMSG i 1 60 61", "i", "1", "", seq2, b"x")
    assert one.key() == two.key()
    assert one.key() != other.key()


def test_diff_report_shows_both_replies() -> None:
    a, b = Transcript("oracle"), Transcript("jetraft")
    a.add("same", 1)
    b.add("same", 1)
    a.add("PUB x", ("bytes", b"1"), '{"stream":"S","seq":1}')
    b.add("PUB x", ("bytes", b"2"), '{"stream":"S","seq":2}')
    report = diff_report(a, b)
    assert report is not None
    assert '{"stream":"S","seq":1}' in report and '{"stream":"S","seq":2}' in report
    assert "step 1: PUB x" in report
    assert diff_report(a, a) is None


async def test_a_real_difference_between_servers_fails(diff: Differ) -> None:
    """Sanity check of the whole pipeline: servers that really answer differently fail."""

    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj()], "allow_direct": True})
        count = 1 if s.side == "oracle" else 2  # the only scenario allowed to branch on side
        for _ in range(count):
            await s.publish(s.subj(), "x", record=False)
        await s.direct_get(name, {"seq": 1, "batch": 5}, multi=True)

    with pytest.raises(AssertionError, match="Nats-Num-Pending") as err:
        await diff.run(scenario)
    assert "oracle" in str(err.value)
