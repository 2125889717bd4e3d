"""Differential: mirror streams (issue 5; docs/nats-differences.md §1). The create reply (with
``mirror_direct`` forced to the origin's ``allow_direct``), STREAM.INFO's ``mirror`` object, the
mirror's own Direct Get replies (copied headers, the mirror's name in ``Nats-Stream``, the
upstream's sequences), and the mirror config errors, byte for byte against nats-server."""

from __future__ import annotations

from typing import Any

import pytest

from tests.differential.diff_harness import Differ, Session
from tests.differential.diff_setup import DELETED_SEQ, LAST_SEQ, standard_stream, substitute

pytestmark = pytest.mark.differential

MIRROR_DIRECT_GETS: list[tuple[dict[str, Any], bool]] = [
    ({"seq": 1}, False),
    ({"seq": DELETED_SEQ}, False),
    ({"seq": LAST_SEQ}, False),
    ({"last_by_subj": "$S.a"}, False),
    ({"next_by_subj": "$S.b"}, False),
    ({"seq": 1, "batch": LAST_SEQ + 2}, True),
    ({"multi_last": ["$S.>"]}, True),
]


async def test_mirror_create_info_and_direct_get(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        subs = await standard_stream(s)
        mirror = s.stream("M")
        await s.create(
            {"name": mirror, "mirror": {"name": s.stream()}, "allow_direct": True},
            label="create mirror",
        )
        await s.wait_messages(mirror, LAST_SEQ - 1)
        await s.api(f"STREAM.INFO.{mirror}", label="mirror info")
        for body, multi in MIRROR_DIRECT_GETS:
            await s.direct_get(
                mirror, substitute(body, subs), multi=multi, label=f"mirror DG {body!r}"
            )
        await s.api(
            f"STREAM.UPDATE.{mirror}",
            {"name": mirror, "mirror": {"name": s.stream("other")}, "allow_direct": True},
            label="mirror config cannot change",
        )
        # a mirror keeps polling its upstream: gone, it cannot show up in a later scenario's
        # wildcard subscription on the shared servers
        await s.api(f"STREAM.DELETE.{mirror}", record=False)

    await diff.run(scenario)


async def test_mirror_config_errors(diff: Differ) -> None:
    async def scenario(s: Session) -> None:
        await standard_stream(s)
        origin = {"name": s.stream()}
        cases: list[tuple[str, dict[str, Any]]] = [
            ("subjects", {"subjects": [s.subj("m.>")], "mirror": origin}),
            ("mirror_direct without mirror", {"mirror_direct": True}),
            ("atomic", {"mirror": origin, "allow_atomic": True}),
            ("first_seq", {"mirror": origin, "first_seq": 5}),
            ("sources too", {"mirror": origin, "sources": [origin]}),
            ("markers", {"mirror": origin, "subject_delete_marker_ttl": 1_000_000_000}),
            (
                "filter and transforms",
                {
                    "mirror": {
                        **origin,
                        "filter_subject": s.subj("a"),
                        "subject_transforms": [{"src": s.subj("a"), "dest": "x"}],
                    },
                },
            ),
            ("bad origin name", {"mirror": {"name": "a.b"}}),
        ]
        for label, extra in cases:
            await s.create({"name": s.stream("X"), **extra}, label=label)

    await diff.run(scenario)
