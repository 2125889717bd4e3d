"""Standard stream contents shared by the Direct Get and MSG.GET scenarios.

Owns: the reference stream layout (subjects, payloads, headers, one interior delete) and the
substitution of per-server message timestamps into request bodies, so that a scenario can ask
for "start_time = the time of message 4" on each server without comparing the times themselves.
Must never: record anything that differs between servers.
"""

from __future__ import annotations

from typing import Any

from tests.differential.diff_harness import Session

# (subject tail, payload, headers) for sequences 1..7; sequence 3 is deleted afterwards.
STANDARD_MESSAGES: list[tuple[str, bytes, dict[str, str] | None]] = [
    ("a", b"one", None),
    ("b", b"two", None),
    ("a", b"three", None),
    ("c.x", b"four", {"Foo": "bar"}),
    ("b", b"five", None),
    ("a", b"six", None),
    ("h", b"", {"Foo": "bar", "Baz": "qux"}),
]
DELETED_SEQ = 3
LAST_SEQ = len(STANDARD_MESSAGES)
BEFORE_ALL = "2000-01-01T00:00:00Z"
AFTER_ALL = "2100-01-01T00:00:00Z"


async def standard_stream(
    s: Session, *, suffix: str = "", extra: dict[str, Any] | None = None
) -> dict[str, str]:
    """Create the standard stream (subjects '<uid>.>', allow_direct) and fill it.

    Returns substitutions: '$T<n>' -> RFC 3339 time of message n on this server, and
    '$S.' -> the subject prefix. The create reply and the PubAcks are recorded.
    """
    config: dict[str, Any] = {
        "name": s.stream(suffix),
        "subjects": [s.subj(">")],
        "allow_direct": True,
    }
    config.update(extra or {})
    await s.create(config)
    for tail, payload, headers in STANDARD_MESSAGES:
        await s.publish(s.subj(tail), payload, headers=headers)
    await s.api(f"STREAM.MSG.DELETE.{s.stream(suffix)}", {"seq": DELETED_SEQ})
    subs = {"$S.": s.subj() + "."}
    for seq in range(1, LAST_SEQ + 1):
        if seq == DELETED_SEQ:
            continue
        reply = await s.api(f"STREAM.MSG.GET.{s.stream(suffix)}", {"seq": seq}, record=False)
        subs[f"$T{seq}"] = reply.get("message", "time")
    return subs


def substitute(value: Any, subs: dict[str, str]) -> Any:
    """value with '$T<n>' strings replaced by times and '$S.' prefixes by the subject base."""
    if isinstance(value, dict):
        return {k: substitute(v, subs) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, subs) for v in value]
    if isinstance(value, str):
        if value in subs:
            return subs[value]
        if value.startswith("$S."):
            return subs["$S."] + value[3:]
    return value
