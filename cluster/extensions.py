"""Stream extensions: behaviour that packages above cluster/ attach to stream hosts.

cluster/ never imports upward (docs/architecture.md), yet a mirror stream (mirror/) lives in a host
that cluster/ opens. The host therefore offers attachment points, and packages register
attachers under the ``jetraft.stream_extensions`` entry point group (as ``jetraft.commands`` does
for the CLI): every host the node opens, on any node, is offered to each attacher, which returns
an attachment or None (``cluster/extension_loader.py``). An attacher that fails to load is logged
and skipped.

Must never: let an extension's failure take the node down.
"""

from __future__ import annotations

from typing import Any, Final

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

    def config_changed(self) -> None:
        """The stream's config was updated (an applied update entry, on every replica)."""
