"""Stream extensions: behaviour that packages above cluster/ attach to stream hosts.

cluster/ never imports upward (docs/architecture.md), yet a mirror stream (mirror/) lives in a host
that cluster/ opens. The host therefore offers attachment points, and packages register
attachers under the ``jetraft.stream_extensions`` entry point group (as ``jetraft.commands`` does
for the CLI): every host the node opens, on any node, is offered to each attacher, which returns
an attachment or None. An attacher that fails to load is logged and skipped.

Must never: let an extension's failure take the node down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from cluster.stream_host import StreamHost

log = logging.getLogger("jetraft.extensions")

EXTENSIONS_GROUP: Final = "jetraft.stream_extensions"


class StreamAttachment:
    """What an extension attaches to one stream host (its hooks default to doing nothing)."""

    def start(self) -> None:
        """The host is serving."""

    async def close(self) -> None:
        """The host is closing (before its store closes)."""

    def info(self) -> dict[str, Any]:
        """Keys to add to the stream's STREAM.INFO (e.g. ``mirror``)."""
        return {}

    def on_tick(self) -> None:
        """Called every Raft tick on a clustered replica."""


Attacher = Callable[["StreamHost"], StreamAttachment | None]


def load_attachers() -> list[Attacher]:
    attachers: list[Attacher] = []
    for ep in entry_points(group=EXTENSIONS_GROUP):
        try:
            attachers.append(ep.load())
        except Exception:
            log.exception("stream extension %s could not be loaded; running without it", ep.name)
    return attachers


def attach_all(host: StreamHost, attachers: list[Attacher]) -> None:
    for attacher in attachers:
        try:
            attachment = attacher(host)
        except Exception:
            log.exception("stream %s: extension %r failed to attach", host.name, attacher)
            continue
        if attachment is not None:
            host.attachments.append(attachment)
            attachment.start()
