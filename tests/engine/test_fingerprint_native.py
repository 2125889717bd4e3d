"""The content fingerprint (engine/digest.py) in C gives the Python form's value for any header
and payload, so that replicas built with and without the C forms agree on their digests. The
C-form tests skip where it is not built (the plain Python run)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import digest


def _native() -> object:
    native = digest._native_content_fingerprint()
    if native is None:
        pytest.skip("the C content fingerprint is not built here")
    return native


@given(st.binary(max_size=300), st.binary(max_size=3000), st.booleans())
def test_the_c_fingerprint_is_the_python_one(hdr: bytes, data: bytes, mutable: bool) -> None:
    native = digest._native_content_fingerprint()
    expected = digest._content_fingerprint_py(hdr, data)
    assert expected >> digest.FINGERPRINT_HDR_LEN_SHIFT == len(hdr)
    if native is not None:
        args = (bytearray(hdr), memoryview(data)) if mutable else (hdr, data)
        assert native(*args) == expected  # type: ignore[arg-type]


def test_the_native_build_fingerprints_in_c() -> None:
    native = _native()
    assert digest.content_fingerprint is native
    with pytest.raises(TypeError):
        digest.content_fingerprint("text", b"")  # type: ignore[arg-type]
    assert digest.content_fingerprint(b"", b"x") == digest._content_fingerprint_py(b"", b"x")
