"""Loads the stream extensions registered under ``jetraft.stream_extensions`` and attaches them
to each stream host the node opens (see ``cluster/extensions.py`` for what an attachment is).

Must never: let an extension's failure take the node down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import entry_points

from cluster.extensions import EXTENSIONS_GROUP, StreamAttachment
from cluster.stream_host import AnyStreamHost

log = logging.getLogger("jetraft.extensions")

Attacher = Callable[[AnyStreamHost], StreamAttachment | None]


def load_attachers() -> list[Attacher]:
    attachers: list[Attacher] = []
    for ep in entry_points(group=EXTENSIONS_GROUP):
        try:
            attachers.append(ep.load())
        except Exception:
            log.exception("stream extension %s could not be loaded; running without it", ep.name)
    return attachers


def attach_all(host: AnyStreamHost, attachers: list[Attacher]) -> None:
    for attacher in attachers:
        try:
            attachment = attacher(host)
        except Exception:
            log.exception("stream %s: extension %r failed to attach", host.name, attacher)
            continue
        if attachment is not None:
            host.attachments.append(attachment)
            attachment.start()
