"""Answers mirror fetches (``engine/mirror_fetch.py``) for one stream host.

Mirrors ask on ``MIRROR_FETCH_PREFIX`` + the upstream's name in queue group ``_sys_``: only the
stream's own replicas subscribe (its mirrors answer its Direct Get subjects, never this), and a
replica only while it may serve reads.

Must never: answer from a replica that is not caught up (the host switches it off first).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from cluster.router import Router, Subscription
from engine import mirror_fetch
from engine.direct_get import DIRECT_GET_GROUP
from engine.stream import Stream

MIRROR_FETCH_PREFIX: Final = "$JSC.MF."
_ERROR_TEXT_MAX: Final = 200  # a status line stays short whatever the request held


class MirrorFetchResponder:
    def __init__(self, router: Router, stream: Callable[[], Stream]) -> None:
        self._router = router
        self._stream = stream  # a replica's engine object is replaced by a state transfer
        self._subs: list[Subscription] = []

    @property
    def serving(self) -> bool:
        return bool(self._subs)

    def serve(self, want: bool) -> None:
        if want and not self._subs:
            subject = MIRROR_FETCH_PREFIX + self._stream().config.name
            self._subs = [
                self._router.subscribe_internal(subject, self._on_fetch, queue=DIRECT_GET_GROUP)
            ]
        elif not want and self._subs:
            for sub in self._subs:
                self._router.remove(sub)
            self._subs = []

    def _on_fetch(
        self, _subject: str, reply: str | None, _hdr: bytes | None, payload: bytes
    ) -> None:
        if not reply:
            return
        try:
            answer = mirror_fetch.answer(self._stream(), payload)
        except mirror_fetch.FetchError as exc:
            text = str(exc)[:_ERROR_TEXT_MAX]
            status = f"NATS/1.0 400 {text}\r\n\r\n".encode(errors="replace")
            self._router.publish(reply, None, status, b"")
            return
        self._router.publish(reply, None, None, answer)
