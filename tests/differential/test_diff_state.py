"""Differential: defaults filled in and stream state objects, docs/nats-differences.md §5.

Byte counts (file and memory accounting), num_subjects, num_deleted, deleted details, the
subjects map, first_seq on create and after purges and deletes, duplicate_window defaulting.
"""

from __future__ import annotations

import pytest

from tests.differential.diff_harness import Differ, Session

pytestmark = pytest.mark.differential


async def _fill(s: Session, prefix: str) -> None:
    for tail, payload, headers in [
        ("a", "1", None),
        ("b", "22", {"H": "v"}),
        ("a", "333", None),
        ("c.d", "", None),
        ("b", "55555", {"Nats-Msg-Id": "x"}),
    ]:
        await s.publish(s.subj(f"{prefix}.{tail}"), payload, headers=headers, record=False)


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_state_accounting(diff: Differ, storage: str) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj("s.>")], "storage": storage})
        await _fill(s, "s")
        info = f"STREAM.INFO.{name}"
        await s.api(info)
        await s.api(f"STREAM.MSG.DELETE.{name}", {"seq": 3}, record=False)
        await s.api(info, {"deleted_details": True, "subjects_filter": ">"})
        await s.api(f"STREAM.MSG.DELETE.{name}", {"seq": 1}, record=False)
        await s.api(info, {"deleted_details": True})
        await s.api(f"STREAM.PURGE.{name}", {"filter": s.subj("s.b")})
        await s.api(info, {"deleted_details": True, "subjects_filter": s.subj("s.*")})
        await s.api(f"STREAM.PURGE.{name}")
        await s.api(info, {"deleted_details": True})
        await _fill(s, "s")
        await s.api(info, {"subjects_filter": s.subj("s.c.>")})

    await diff.run(scenario)


async def test_first_seq(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj()], "first_seq": 100})
        await s.api(f"STREAM.INFO.{name}")
        await s.publish(s.subj(), "x")
        await s.api(f"STREAM.INFO.{name}")
        await s.api(f"STREAM.MSG.GET.{name}", {"seq": 99})
        await s.api(f"STREAM.MSG.GET.{name}", {"seq": 100})
        await s.direct_get(name, {"seq": 100})
        mem = s.stream("M")
        await s.create(
            {"name": mem, "subjects": [s.subj("m")], "first_seq": 7, "storage": "memory"}
        )
        await s.publish(s.subj("m"), "x")
        await s.api(f"STREAM.INFO.{mem}")

    await diff.run(scenario)


async def test_defaults_from_limits(diff: Differ) -> None:
    """duplicate_window follows a short max_age; limits and lists normalise."""

    async def scenario(s: Session) -> None:
        await s.create({"name": s.stream("A"), "subjects": [s.subj("a")], "max_age": 10**9})
        await s.create(
            {
                "name": s.stream("B"),
                "subjects": [s.subj("b")],
                "max_age": 300 * 10**9,
                "duplicate_window": 0,
            }
        )
        await s.create(
            {
                "name": s.stream("C"),
                "subjects": [s.subj("c")],
                "max_age": 10**9,
                "duplicate_window": 10**9,
            }
        )
        await s.create(
            {
                "name": s.stream("D"),
                "subjects": [s.subj("d")],
                "max_msgs": 10,
                "max_bytes": 1000,
                "max_msgs_per_subject": 2,
                "max_msg_size": 100,
                "max_consumers": 3,
                "discard": "new",
            }
        )

    await diff.run(scenario)


async def test_delete_first_and_last(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        name = s.stream()
        await s.create({"name": name, "subjects": [s.subj(">")]})
        await _fill(s, "x")
        for seq in (1, 5, 2):
            await s.api(f"STREAM.MSG.DELETE.{name}", {"seq": seq})
            await s.api(f"STREAM.INFO.{name}", {"deleted_details": True})
        await s.api(f"STREAM.MSG.DELETE.{name}", {"seq": 3})
        await s.api(f"STREAM.MSG.DELETE.{name}", {"seq": 4})
        await s.api(f"STREAM.INFO.{name}", {"deleted_details": True})
        await s.publish(s.subj("x.a"), "again")
        await s.api(f"STREAM.INFO.{name}", {"deleted_details": True})

    await diff.run(scenario)
