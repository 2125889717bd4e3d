"""Small builders shared by the batch tests: header blocks and batch messages."""

from __future__ import annotations

from engine.batch import HDR_BATCH_COMMIT, HDR_BATCH_ID, HDR_BATCH_SEQ
from engine.entries import InboundMsg


def hdr(*items: tuple[str, str]) -> bytes:
    """A NATS header block with the given (key, value) lines, in order."""
    lines = "".join(f"{k}: {v}\r\n" for k, v in items)
    return f"NATS/1.0\r\n{lines}\r\n".encode()


def bmsg(
    batch_id: str,
    seq: int | str,
    commit: str | None = None,
    *extra: tuple[str, str],
    subject: str = "S.a",
    data: bytes = b"x",
) -> InboundMsg:
    """A batch message: Nats-Batch-Id, Nats-Batch-Sequence[, Nats-Batch-Commit], then extra."""
    items = [(HDR_BATCH_ID, batch_id), (HDR_BATCH_SEQ, str(seq))]
    if commit is not None:
        items.append((HDR_BATCH_COMMIT, commit))
    return InboundMsg(subject, hdr(*items, *extra), data)


def staged_batch(
    batch_id: str, extras: list[list[tuple[str, str]]], subject: str = "S.a"
) -> list[InboundMsg]:
    """The messages of a batch as staged (no commit header: the commit is added by the last
    message, which a test appends or not)."""
    return [
        bmsg(
            batch_id,
            i,
            "1" if i == len(extras) else None,
            *extra,
            subject=subject,
            data=f"{i}".encode(),
        )
        for i, extra in enumerate(extras, start=1)
    ]
