"""Filesystem faults for the tests of space reserved ahead of appends (engine/disk.py)."""

from __future__ import annotations

import errno
import os

import pytest

FALLOCATE_UNSUPPORTED = errno.EOPNOTSUPP
FALLOCATE_NO_SPACE = errno.ENOSPC


def refuse_fallocate(monkeypatch: pytest.MonkeyPatch, code: int) -> list[int]:
    """Makes ``os.posix_fallocate`` fail with ``code``; returns the fds it was then called on."""
    calls: list[int] = []

    def refused(fd: int, offset: int, length: int) -> None:
        calls.append(fd)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "posix_fallocate", refused)
    return calls
