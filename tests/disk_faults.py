"""Filesystem faults for the tests of space reserved ahead of appends (engine/disk.py)."""

from __future__ import annotations

import errno
import os

import pytest

from engine import disk

FALLOCATE_UNSUPPORTED = errno.EOPNOTSUPP
FALLOCATE_NO_SPACE = errno.ENOSPC


def refuse_fallocate(
    monkeypatch: pytest.MonkeyPatch, code: int, *, allocate_first: bool = False
) -> list[int]:
    """Makes reserving space fail with ``code``; returns the fds it was then asked for. With
    ``allocate_first`` the failing call first allocates (and grows the file), as ext4 does when
    it runs out of room part way."""
    calls: list[int] = []

    def refused(fd: int, offset: int, length: int) -> None:
        calls.append(fd)
        if allocate_first:
            os.posix_fallocate(fd, offset, length)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(disk, "_fallocate", refused)
    return calls
