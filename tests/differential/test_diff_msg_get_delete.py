"""Differential: $JS.API.STREAM.MSG.GET and STREAM.MSG.DELETE, docs/nats-differences.md §2."""

from __future__ import annotations

from typing import Any

import pytest

from tests.differential.diff_harness import Differ, Session
from tests.differential.diff_setup import AFTER_ALL, BEFORE_ALL, standard_stream, substitute

pytestmark = pytest.mark.differential

API_LEVEL = "Nats-Required-Api-Level"

Body = bytes | dict[str, Any] | None

MSG_GET_CASES: dict[str, list[tuple[Body, dict[str, str] | None]]] = {
    "found": [
        ({"seq": 1}, None),
        ({"seq": 4}, None),
        ({"seq": 7}, None),
        ({"seq": 4, "no_hdr": True}, None),
        ({"seq": 7, "no_hdr": True}, None),
        ({"last_by_subj": "$S.a"}, None),
        ({"last_by_subj": "$S.>"}, None),
        ({"last_by_subj": "$S.*"}, None),
        ({"next_by_subj": "$S.a"}, None),
        ({"seq": 2, "next_by_subj": "$S.a"}, None),
        ({"seq": 2, "next_by_subj": "$S.>"}, None),
        ({"start_time": BEFORE_ALL}, None),
        ({"start_time": "$T4"}, None),
        ({"start_time": "$T4", "next_by_subj": "$S.b"}, None),
        ({"seq": 1}, {API_LEVEL: "5"}),
        ({"seq": 2, "up_to_seq": 1}, None),
    ],
    "bad_request": [
        (b"", None),
        ({}, None),
        ({"seq": 0}, None),
        ({"seq": 1, "batch": 1}, None),
        ({"seq": 1, "max_bytes": 5}, None),
        ({"seq": 1, "last_by_subj": "$S.a"}, None),
        ({"seq": 1, "start_time": BEFORE_ALL}, None),
        ({"start_time": BEFORE_ALL, "last_by_subj": "$S.a"}, None),
        ({"last_by_subj": "$S.a", "next_by_subj": "$S.a"}, None),
        ({"multi_last": ["$S.a"]}, None),
        ({"no_hdr": True}, None),
    ],
    "invalid_json": [
        (b"{x", None),
        (b"[]", None),
        (b'{"seq":1', None),
        ({"seq": -1}, None),
        ({"seq": "1"}, None),
        ({"seq": 1, "foo": 2}, None),
        ({"seq": 1, "no_hdr": 1}, None),
        ({"start_time": "yesterday"}, None),
    ],
    "not_found": [
        ({"seq": 3}, None),
        ({"seq": 100}, None),
        ({"last_by_subj": "$S.zzz"}, None),
        ({"next_by_subj": "$S.zzz"}, None),
        ({"seq": 7, "next_by_subj": "$S.a"}, None),
        ({"start_time": AFTER_ALL}, None),
    ],
    "api_level": [
        ({"seq": 1}, {API_LEVEL: "6"}),
        ({"seq": 1}, {API_LEVEL: "abc"}),
        (b"{x", {API_LEVEL: "6"}),
        ({"seq": 100}, {API_LEVEL: "6"}),
    ],
}


@pytest.mark.parametrize("group", sorted(MSG_GET_CASES))
async def test_msg_get(diff: Differ, group: str) -> None:
    async def scenario(s: Session) -> None:
        subs = await standard_stream(s)
        for body, headers in MSG_GET_CASES[group]:
            sent = body if isinstance(body, bytes | None) else substitute(body, subs)
            await s.api(
                f"STREAM.MSG.GET.{s.stream()}",
                sent,
                headers=headers,
                label=f"MSG.GET {body!r} {headers or ''}",
            )

    await diff.run(scenario)


async def test_msg_get_missing_stream(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        await s.api(f"STREAM.MSG.GET.{s.stream('NOPE')}", {"seq": 1})
        await s.api(f"STREAM.MSG.GET.{s.stream('NOPE')}", b"")
        await s.api(f"STREAM.MSG.GET.{s.stream('NOPE')}", b"{x")

    await diff.run(scenario)


async def test_msg_delete(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        await standard_stream(s)
        endpoint = f"STREAM.MSG.DELETE.{s.stream()}"
        await s.api(endpoint, {"seq": 2})
        await s.api(endpoint, {"seq": 5, "no_erase": True})
        await s.api(endpoint, {"seq": 2})
        await s.api(endpoint, {"seq": 3})
        await s.api(endpoint, {"seq": 100})
        await s.api(endpoint, b"")
        await s.api(endpoint, {})
        await s.api(endpoint, {"seq": 0})
        await s.api(endpoint, b"{x")
        await s.api(endpoint, {"seq": 1, "foo": 1})
        await s.api(endpoint, {"seq": -1})
        await s.api(endpoint, {"no_erase": True})
        await s.api(endpoint, {"seq": 1}, headers={API_LEVEL: "6"})
        await s.api(f"STREAM.MSG.GET.{s.stream()}", {"seq": 2})
        await s.api(f"STREAM.MSG.GET.{s.stream()}", {"seq": 5})
        await s.api(f"STREAM.MSG.GET.{s.stream()}", {"next_by_subj": s.subj("b")})
        await s.api(f"STREAM.INFO.{s.stream()}", {"deleted_details": True})
        # Deleting the first and the last message moves first_seq; last_seq stays.
        await s.api(endpoint, {"seq": 1})
        await s.api(endpoint, {"seq": 7})
        await s.api(f"STREAM.INFO.{s.stream()}", {"deleted_details": True})
        await s.api(f"STREAM.MSG.DELETE.{s.stream('NOPE')}", {"seq": 1})

    await diff.run(scenario)


async def test_msg_delete_memory_storage(diff: Differ) -> None:
    """The same delete errors on a memory stream (the store's texts differ by storage)."""

    async def scenario(s: Session) -> None:
        await standard_stream(s, extra={"storage": "memory"})
        endpoint = f"STREAM.MSG.DELETE.{s.stream()}"
        await s.api(endpoint, {"seq": 2})
        await s.api(endpoint, {"seq": 2})
        await s.api(endpoint, {"seq": 100})
        await s.api(endpoint, {"seq": 0})
        await s.api(endpoint, {"seq": 5, "no_erase": True})
        await s.api(f"STREAM.MSG.GET.{s.stream()}", {"seq": 5})
        await s.api(f"STREAM.INFO.{s.stream()}", {"deleted_details": True})

    await diff.run(scenario)


async def test_msg_delete_denied_and_sealed(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        deny = s.stream("DENY")
        await s.create({"name": deny, "subjects": [s.subj("deny.>")], "deny_delete": True})
        await s.publish(s.subj("deny.a"), "x")
        await s.api(f"STREAM.MSG.DELETE.{deny}", {"seq": 1})
        await s.api(f"STREAM.MSG.DELETE.{deny}", {"seq": 9})
        sealed = s.stream("SEAL")
        config: dict[str, Any] = {"name": sealed, "subjects": [s.subj("seal.>")]}
        await s.create(config)
        await s.publish(s.subj("seal.a"), "x")
        await s.api(f"STREAM.UPDATE.{sealed}", {**config, "sealed": True})
        await s.api(f"STREAM.MSG.DELETE.{sealed}", {"seq": 1})
        await s.api(f"STREAM.MSG.DELETE.{sealed}", {"seq": 9})
        await s.api(f"STREAM.MSG.GET.{sealed}", {"seq": 1})

    await diff.run(scenario)
