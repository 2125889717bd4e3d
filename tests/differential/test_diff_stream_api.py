"""Differential: the stream JSON API, docs/nats-differences.md §5 (API and config checks).

INFO, STREAM.CREATE/UPDATE/INFO/DELETE/NAMES/LIST/PURGE, every listed error, strict JSON,
and the subjects that get no reply at all.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.differential.diff_harness import NO_REPLY_TIMEOUT_S, TIMEOUT, Differ, Session

pytestmark = pytest.mark.differential

API_LEVEL = "Nats-Required-Api-Level"
MAX_NAME_CHARS = 255
MAX_DESCRIPTION_CHARS = 4096

# nats-py 2.16 add_stream(name, subjects) sends exactly these keys (docs/nats-differences.md §5).
NATS_PY_ADD_STREAM_DEFAULTS: dict[str, Any] = {
    "discard": "old",
    "discard_new_per_subject": False,
    "max_msgs_per_subject": -1,
    "max_msg_size": -1,
    "no_ack": False,
    "duplicate_window": 0,
    "sealed": False,
    "deny_delete": False,
    "deny_purge": False,
    "allow_rollup_hdrs": False,
    "max_age": 0,
}


async def test_account_info_counts(fresh_diff: Differ) -> None:
    """$JS.API.INFO on fresh servers: zero, then streams, storage bytes and API counters."""

    async def scenario(s: Session) -> None:
        await s.api("INFO")
        await s.api("INFO", b"")
        await s.api("INFO", {"x": 1})
        await s.create({"name": "FILE1", "subjects": ["file1.>"]})
        await s.create({"name": "MEM1", "subjects": ["mem1.>"], "storage": "memory"})
        await s.publish("file1.a", "hello")
        await s.publish("mem1.a", "hello", headers={"H": "v"})
        await s.api("STREAM.INFO.NOPE")
        await s.api("INFO")
        await s.api("STREAM.NAMES")
        await s.api("STREAM.LIST")
        await s.api("STREAM.DELETE.MEM1")
        await s.api("INFO", headers={API_LEVEL: "6"})
        await s.api("INFO")

    await fresh_diff.run(scenario)


async def test_names_and_list_when_empty(fresh_diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        await s.api("STREAM.NAMES")
        await s.api("STREAM.LIST")
        await s.api("STREAM.NAMES", {"offset": 0})
        await s.api("STREAM.LIST", {"subject": "x"})

    await fresh_diff.run(scenario)


async def test_create_defaults_and_idempotence(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name})
        await s.create({"name": name})
        await s.api(f"STREAM.INFO.{name}")
        await s.create({"name": name, "max_msgs": 5})
        py = {"name": s.stream("PY"), "subjects": [s.subj("py.>")], **NATS_PY_ADD_STREAM_DEFAULTS}
        await s.create(py)
        await s.create(py)
        await s.create({"name": s.stream("MEM"), "subjects": [s.subj("mem")], "storage": "memory"})

    await diff.run(scenario)


def _config_cases(s: Session) -> list[dict[str, Any]]:
    """Creates that the server normalises or rejects; one stream name per case."""
    n = iter(range(1000))

    def cfg(**kw: Any) -> dict[str, Any]:
        i = next(n)
        return {"name": s.stream(f"C{i}"), "subjects": [s.subj(f"c{i}.>")], **kw}

    return [
        cfg(max_msgs=0, max_bytes=0, max_msgs_per_subject=0, max_msg_size=0, max_consumers=0),
        cfg(max_msgs=-5, max_bytes=-7, max_msgs_per_subject=-2),
        cfg(max_msgs=-5, pedantic=True),
        cfg(max_age=50_000_000),
        cfg(max_age=100_000_000),
        cfg(max_age=-1),
        cfg(max_age=1_000_000_000),
        cfg(max_age=1_000_000_000, duplicate_window=2_000_000_000),
        cfg(duplicate_window=50_000_000),
        cfg(duplicate_window=-1),
        cfg(compression="s2"),
        cfg(compression="s2", storage="memory"),
        cfg(compression="zip"),
        cfg(storage="disk"),
        cfg(retention="bogus"),
        cfg(retention="workqueue"),
        cfg(retention="interest"),
        cfg(discard="bogus"),
        cfg(discard="new", discard_new_per_subject=True, max_msgs_per_subject=1),
        cfg(discard_new_per_subject=True),
        cfg(num_replicas=3),
        cfg(num_replicas=6),
        cfg(num_replicas=-1),
        cfg(sealed=True),
        cfg(mirror_direct=True),
        cfg(deny_purge=True, allow_rollup_hdrs=True),
        cfg(placement={}),
        cfg(placement={"preferred": "x"}),
        cfg(placement={"cluster": "nowhere"}),
        cfg(first_seq=100),
        cfg(no_ack=True),
        cfg(description="d" * MAX_DESCRIPTION_CHARS),
        cfg(description="d" * (MAX_DESCRIPTION_CHARS + 1)),
        cfg(metadata={"k": "v"}),
        cfg(republish={"src": "", "dest": "rp.>"}),
        cfg(consumer_limits={"max_ack_pending": 5}),
        cfg(allow_direct=True, mirror_direct=False),
        {"name": s.stream("NOSUBJ"), "subjects": []},
        {"name": s.stream("ALL"), "subjects": [">"]},
        {"name": s.stream("JSAPI"), "subjects": ["$JS.API.>"]},
        {"name": s.stream("JSAPI2"), "subjects": ["$JS.>"]},
        {"name": s.stream("NRG"), "subjects": ["$NRG.x"]},
        {"name": s.stream("JSC"), "subjects": ["$JSC.>"]},
        {"name": s.stream("OVL"), "subjects": [s.subj("ovl.*"), s.subj("ovl.b")]},
        {"name": s.stream("DUPS"), "subjects": [s.subj("dup"), s.subj("dup")]},
        {"name": s.stream("BAD"), "subjects": [s.subj("bad..subj")]},
        {"name": s.stream("BAD2"), "subjects": [s.subj("bad.>.x")]},
        {"name": s.stream("BAD3"), "subjects": [s.subj("bad x")]},
        {"name": s.stream("WILD"), "subjects": [s.subj("w*")]},
        {"name": "x" * (MAX_NAME_CHARS + 1)},
        {"name": s.stream("L") + "x" * (MAX_NAME_CHARS - len(s.stream("L")))},
    ]


async def test_create_config_checks(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        for config in _config_cases(s):
            label = f"CREATE {str(config)[:200]}"
            await s.api(f"STREAM.CREATE.{config['name']}", config, label=label)

    await diff.run(scenario)


async def test_create_request_errors(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.api(f"STREAM.CREATE.{name}", b"")
        await s.api(f"STREAM.CREATE.{name}", b"{x")
        await s.api(f"STREAM.CREATE.{name}", b"[]")
        await s.api(f"STREAM.CREATE.{name}", {"name": name, "replicas": 1})
        await s.api(f"STREAM.CREATE.{name}", {"name": name, "limits_ttl": 1})
        await s.api(f"STREAM.CREATE.{name}", {"name": s.stream("OTHER")})
        await s.api(f"STREAM.CREATE.{name}", {"subjects": [s.subj()]})
        await s.api(f"STREAM.CREATE.{name}", {"name": name, "max_msgs": "5"})
        await s.api(f"STREAM.CREATE.{name}", {"name": name}, headers={API_LEVEL: "6"})
        await s.api(f"STREAM.CREATE.{name}", {"name": name}, headers={API_LEVEL: "x"})
        await s.api("STREAM.CREATE.a/b", {"name": "a/b"})
        await s.api("STREAM.CREATE.a\\b", {"name": "a\\b"})
        await s.api(f"STREAM.CREATE.{name}", {"name": name, "subjects": [s.subj()]})
        # overlap with an existing stream
        await s.create({"name": s.stream("OV"), "subjects": [s.subj("x"), s.subj("y.*")]})
        await s.create({"name": s.stream("OV2"), "subjects": [s.subj("y.>")]})
        await s.create({"name": s.stream("OV3"), "subjects": [s.subj("x")]})
        await s.create({"name": s.stream("OV4"), "subjects": [s.subj("y.b")]})
        await s.create({"name": s.stream("OV5"), "subjects": [s.subj("y")]})
        # same name, different config
        await s.create({"name": name, "subjects": [s.subj("other")]})

    await diff.run(scenario)


async def test_no_reply_subjects(diff: Differ) -> None:
    """Unknown $JS.API subjects and stream names with a dot get no reply at all."""

    async def scenario(s: Session) -> None:
        await s.create({"name": s.stream(), "subjects": [s.subj()]}, record=False)
        requests: list[tuple[str, dict[str, Any] | None]] = [
            ("STREAM.FOO", None),
            ("NOPE", None),
            ("STREAM", None),
            (f"STREAM.CREATE.{s.stream()}.x", {"name": s.stream()}),
            (f"STREAM.CREATE.{s.stream('N')}.x", {"name": f"{s.stream('N')}.x"}),
            (f"STREAM.UPDATE.{s.stream()}.x", {"name": s.stream()}),
            (f"STREAM.INFO.{s.stream()}.x", None),
            (f"STREAM.DELETE.{s.stream()}.x", None),
            (f"STREAM.PURGE.{s.stream()}.x", None),
            (f"STREAM.MSG.GET.{s.stream()}.x", {"seq": 1}),
            (f"STREAM.MSG.DELETE.{s.stream()}.x", {"seq": 1}),
            ("STREAM.CREATE", {"name": s.stream()}),
            ("STREAM.INFO", None),
            ("STREAM.NAMES.x", None),
            ("INFO.x", None),
        ]
        await s.api_unanswered(requests)

    transcript = await diff.run(scenario)
    # Guard against a masking or harness bug that would make both sides "agree" vacuously.
    assert all(step.key == TIMEOUT for step in transcript), [s.shown for s in transcript]


async def test_update(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        base: dict[str, Any] = {"name": name, "subjects": [s.subj("a")]}
        await s.create(base)
        await s.publish(s.subj("a"), "one")
        up = f"STREAM.UPDATE.{name}"
        await s.api(up, {**base, "subjects": [s.subj("a"), s.subj("b")], "max_msgs": 10})
        await s.api(up, {**base, "description": "hello", "metadata": {"k": "v"}})
        await s.api(up, {**base, "allow_direct": True})
        await s.api(up, {**base, "mirror_direct": True})
        await s.api(up, {**base, "storage": "memory"})
        await s.api(up, {**base, "retention": "workqueue"})
        await s.api(up, {**base, "retention": "interest"})
        await s.api(up, {**base, "num_replicas": 3})
        await s.api(up, {**base, "max_age": 10})
        await s.api(up, {**base, "first_seq": 5})
        await s.api(up, {**base, "replicas": 1})
        await s.api(up, {**base, "name": s.stream("X")})
        await s.api(up, b"")
        await s.api(up, b"{x")
        await s.api(up, {**base}, headers={API_LEVEL: "6"})
        await s.api(f"STREAM.UPDATE.{s.stream('NOPE')}", {**base, "name": s.stream("NOPE")})
        await s.api(up, {**base, "deny_delete": True, "deny_purge": True})
        await s.api(up, {**base, "deny_delete": False, "deny_purge": True})
        await s.api(up, {**base, "deny_delete": True, "deny_purge": False})
        await s.api(up, {**base, "deny_delete": True, "deny_purge": True, "sealed": True})
        await s.api(up, {**base, "deny_delete": True, "deny_purge": True, "sealed": False})
        await s.publish(s.subj("a"), "after seal")
        await s.api(f"STREAM.INFO.{name}")

    await diff.run(scenario)


async def test_update_overlap_and_seal_forcing(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        one = {"name": s.stream("ONE"), "subjects": [s.subj("one")]}
        two = {"name": s.stream("TWO"), "subjects": [s.subj("two")]}
        await s.create(one)
        await s.create(two)
        await s.api(f"STREAM.UPDATE.{two['name']}", {**two, "subjects": [s.subj("one")]})
        await s.api(f"STREAM.UPDATE.{two['name']}", {**two, "subjects": [s.subj("*")]})
        seal = {
            "name": s.stream("S"),
            "subjects": [s.subj("s")],
            "max_age": 10_000_000_000,
            "allow_rollup_hdrs": True,
        }
        await s.create(seal)
        await s.api(f"STREAM.UPDATE.{seal['name']}", {**seal, "sealed": True})

    await diff.run(scenario)


async def test_info_options(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj(">")]})
        for tail in ["a", "b", "a", "c.d", "a"]:
            await s.publish(s.subj(tail), tail)
        await s.api(f"STREAM.MSG.DELETE.{name}", {"seq": 2})
        info = f"STREAM.INFO.{name}"
        await s.api(info)
        await s.api(info, {})
        await s.api(info, {"deleted_details": True})
        await s.api(info, {"subjects_filter": ">"})
        await s.api(info, {"subjects_filter": s.subj("a")})
        await s.api(info, {"subjects_filter": s.subj("*")})
        await s.api(info, {"subjects_filter": "nomatch"})
        await s.api(info, {"subjects_filter": ">", "offset": 1})
        await s.api(info, {"subjects_filter": ">", "deleted_details": True})
        await s.api(info, b"{x")
        await s.api(info, {"foo": 1})
        await s.api(info, headers={API_LEVEL: "6"})
        await s.api(info, headers={API_LEVEL: "5"})
        await s.api(f"STREAM.INFO.{s.stream('NOPE')}")
        await s.api(f"STREAM.INFO.{s.stream('NOPE')}", {"foo": 1})

    await diff.run(scenario)


async def test_delete(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj()]})
        await s.api(f"STREAM.DELETE.{name}", b"x")
        await s.api(f"STREAM.DELETE.{name}", b"{x")
        await s.api(f"STREAM.DELETE.{name}", headers={API_LEVEL: "6"})
        await s.api(f"STREAM.DELETE.{name}", {})
        await s.api(f"STREAM.INFO.{name}")
        await s.create({"name": name, "subjects": [s.subj()]})
        await s.publish(s.subj(), "one")
        await s.api(f"STREAM.DELETE.{name}")
        await s.api(f"STREAM.DELETE.{name}")
        await s.api(f"STREAM.DELETE.{name}", b"x")
        await s.api(f"STREAM.INFO.{name}")
        await s.publish(s.subj(), "gone", timeout_s=NO_REPLY_TIMEOUT_S)
        await s.create({"name": name, "subjects": [s.subj()]})

    await diff.run(scenario)


async def test_names_and_list_filtered(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        for suffix, subject in [("B", "b.>"), ("A", "a.*"), ("C", "c")]:
            await s.create({"name": s.stream(suffix), "subjects": [s.subj(subject)]})
        await s.publish(s.subj("a.x"), "x")
        for endpoint in ("STREAM.NAMES", "STREAM.LIST"):
            await s.api(endpoint, {"subject": s.subj(">")})
            await s.api(endpoint, {"subject": s.subj("a.x")})
            await s.api(endpoint, {"subject": s.subj("b.*.z")})
            await s.api(endpoint, {"subject": s.subj("nomatch")})
            await s.api(endpoint, {"subject": s.subj(">"), "offset": 1})
            await s.api(endpoint, {"subject": s.subj(">"), "offset": 10})
            await s.api(endpoint, {"subject": s.subj(">"), "foo": 1})
            await s.api(endpoint, b"{x")
            await s.api(endpoint, {"subject": s.subj(">")}, headers={API_LEVEL: "6"})

    await diff.run(scenario)


async def _purge_stream(s: Session, suffix: str, **extra: Any) -> str:
    name = s.stream(suffix)
    prefix = suffix.lower()
    await s.create({"name": name, "subjects": [s.subj(f"{prefix}.>")], **extra}, record=False)
    for tail in ["a", "b", "a", "b", "a", "c", "a", "b"]:
        await s.publish(s.subj(f"{prefix}.{tail}"), tail, record=False)
    return name


async def test_purge(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        cases: list[tuple[str, bytes | dict[str, Any] | None]] = [
            ("ALL", None),
            ("EMPTYOBJ", {}),
            ("FILTER", {"filter": "$.a"}),
            ("WILD", {"filter": "$.*"}),
            ("SEQ", {"seq": 4}),
            ("SEQONE", {"seq": 1}),
            ("SEQBIG", {"seq": 100}),
            ("KEEP", {"keep": 3}),
            ("KEEPBIG", {"keep": 100}),
            ("KEEPZERO", {"keep": 0}),
            ("FKEEP", {"filter": "$.a", "keep": 1}),
            ("FSEQ", {"filter": "$.a", "seq": 5}),
            ("SEQKEEP", {"seq": 3, "keep": 1}),
            ("NOMATCH", {"filter": "$.zzz"}),
            ("BADJSON", b"{x"),
            ("UNKNOWN", {"foo": 1}),
            ("NEG", {"keep": -1}),
        ]
        for suffix, body in cases:
            name = await _purge_stream(s, suffix)
            if isinstance(body, dict) and "filter" in body:
                body = {**body, "filter": s.subj(suffix.lower()) + body["filter"][1:]}
            await s.api(f"STREAM.PURGE.{name}", body, label=f"PURGE {suffix} {body!r}")
            await s.api(f"STREAM.INFO.{name}", label=f"INFO after {suffix}")
            await s.publish(s.subj(f"{suffix.lower()}.a"), "after", label=f"PUB after {suffix}")
        denied = await _purge_stream(s, "DENY", deny_purge=True)
        await s.api(f"STREAM.PURGE.{denied}")
        await s.api(f"STREAM.PURGE.{denied}", {"filter": s.subj("deny.a")})
        await s.api(f"STREAM.PURGE.{s.stream('NOPE')}")
        name = await _purge_stream(s, "LVL")
        await s.api(f"STREAM.PURGE.{name}", headers={API_LEVEL: "6"})

    await diff.run(scenario)


async def test_purge_then_first_seq(diff: Differ) -> None:
    """After purging everything: first_seq = last_seq + 1 and first_ts is the zero time."""

    async def scenario(s: Session) -> None:
        name = await _purge_stream(s, "P")
        await s.api(f"STREAM.PURGE.{name}")
        await s.api(f"STREAM.INFO.{name}")
        await s.api(f"STREAM.PURGE.{name}")
        await s.api(f"STREAM.PURGE.{name}", {"seq": 20})
        await s.api(f"STREAM.INFO.{name}")
        await s.publish(s.subj("p.z"), "z")
        await s.api(f"STREAM.INFO.{name}")
        mem = await _purge_stream(s, "M", storage="memory")
        await s.api(f"STREAM.PURGE.{mem}", {"seq": 20})
        await s.api(f"STREAM.INFO.{mem}")

    await diff.run(scenario)
