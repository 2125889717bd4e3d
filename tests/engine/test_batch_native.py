"""The header lookup atomic batches make per message: the C form (native build) answers exactly
as the Python one. Skips where the C form is not built (the plain Python run)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import batch

KEYS = [batch._BATCH_ID_LINE, batch._BATCH_SEQ_LINE, batch._COMMIT_LINE]


def _native() -> Callable[[bytes, bytes], str | None]:
    native = batch._native_line_value()
    if native is None:
        pytest.skip("the C header lookup is not built here")
    return native


LINES = st.one_of(
    st.sampled_from(
        [
            b"Nats-Batch-Id: abc",
            b"Nats-Batch-Id:",
            b"Nats-Batch-Sequence:   12",
            b"K: v",
            b"Nats-Batch-Commit: 1",
            b"Nats-Batch-Id: \xc3\xa9\xff",
            b"Nats-Batch-Sequence: 1 ",
        ]
    ),
    st.binary(max_size=12),
)


@settings(max_examples=1000)
@given(
    lines=st.lists(LINES, max_size=4),
    end=st.sampled_from([b"\r\n\r\n", b"\r\n", b"", b"\r"]),
    key=st.sampled_from(KEYS),
)
def test_the_c_lookup_answers_as_the_python_one(lines: list[bytes], end: bytes, key: bytes) -> None:
    native = _native()
    hdr = b"\r\n".join([b"NATS/1.0", *lines]) + end
    assert native(hdr, key) == batch._line_value_py(hdr, key)


def test_the_native_build_reads_batch_headers_in_c() -> None:
    native = _native()
    assert batch._line_value is native
    hdr = b"NATS/1.0\r\nNats-Batch-Id: b1\r\nNats-Batch-Sequence:  7\r\n\r\n"
    assert batch.batch_id_of(hdr) == "b1"
    assert native(hdr, batch._BATCH_SEQ_LINE) == "7"
    assert native(hdr, batch._COMMIT_LINE) is None
