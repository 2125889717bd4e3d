"""``set_untracked``: what the stores keep for long stays off the cycle collector's
lists in the native build, and the C form stores exactly what ``mapping[key] = value`` stores.
The C-form tests skip where it is not built (the plain Python run)."""

from __future__ import annotations

import gc
import weakref
from collections import OrderedDict
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import store as store_module
from engine.filestore import FileStore
from engine.memstore import MemoryStore
from engine.store import SetUntracked, StoredMsg


def _native() -> SetUntracked:
    native = store_module._native_set_untracked()
    if native is None:
        pytest.skip("the C form of set_untracked is not built here")
    return native


ATOMS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(), st.binary()
)
VALUES = st.one_of(
    ATOMS,
    st.lists(ATOMS, max_size=5).map(tuple),
    st.lists(st.one_of(ATOMS, st.lists(ATOMS, max_size=2)), max_size=4).map(tuple),
    st.builds(
        StoredMsg,
        st.integers(1, 2**63),
        st.text(min_size=1),
        st.binary(),
        st.binary(),
        st.integers(0, 2**63),
    ),
    st.builds(
        StoredMsg,
        st.integers(1, 9),
        st.text(min_size=1),
        st.binary().map(bytearray),
        st.binary(),
        st.integers(0, 9),
    ),
)


def _atomic_tuple(value: object) -> bool:
    atoms = (type(None), bool, int, float, str, bytes)
    return isinstance(value, tuple) and all(type(item) in atoms for item in value)


@given(st.lists(st.tuples(st.integers(0, 5), VALUES), max_size=8), st.booleans())
def test_the_c_form_stores_what_an_assignment_stores(
    puts: list[tuple[int, Any]], ordered: bool
) -> None:
    native = _native()
    make: type[MutableMapping[int, Any]] = OrderedDict if ordered else dict
    got, expected = make(), make()
    for key, value in puts:
        tracked_before = gc.is_tracked(value)
        native(got, key, value)
        store_module._set_untracked_py(expected, key, value)
        assert gc.is_tracked(value) == (tracked_before and not _atomic_tuple(value))
    assert list(got.items()) == list(expected.items())
    for value in got.values():
        if _atomic_tuple(value):
            assert not gc.is_tracked(value)


class _Box:
    cycle: object = None


def test_a_tuple_holding_an_object_stays_tracked_and_its_cycle_is_collected() -> None:
    native = _native()
    held: dict[int, object] = {}
    box = _Box()
    cyclic = (1, box)
    box.cycle = cyclic
    native(held, 1, cyclic)
    assert gc.is_tracked(cyclic)
    gone = weakref.ref(box)
    del held[1], box, cyclic
    gc.collect()
    assert gone() is None


def test_a_mapping_error_is_raised_as_an_assignment_raises_it() -> None:
    native = _native()
    with pytest.raises(TypeError):
        native((), 0, (1,))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        native({}, [], (1,))  # unhashable key
    with pytest.raises(TypeError):
        native({}, 1)  # type: ignore[call-arg]


def test_stored_messages_are_not_tracked(tmp_path: Path) -> None:
    _native()
    assert store_module.set_untracked is not store_module._set_untracked_py
    msg = StoredMsg(1, "a.b", b"NATS/1.0\r\nX: 1\r\n\r\n", b"payload", 5)
    writer = FileStore(tmp_path / "f")
    writer.append(StoredMsg(*msg))
    writer.close()
    file_store = FileStore(tmp_path / "f")  # its read cache keeps what it reads from disk
    memory_store = MemoryStore()
    memory_store.append(StoredMsg(*msg))
    try:
        for kept in (file_store, memory_store):
            loaded = kept.load(1)
            assert loaded == msg and not gc.is_tracked(loaded)
            assert kept.load(1) is loaded  # the kept object itself
    finally:
        file_store.close()


class _Point(NamedTuple):
    x: int
    y: int


class _PointWithDict(_Point):  # no __slots__: instances get a __dict__
    pass


def test_only_tuples_and_namedtuple_like_classes_are_untracked() -> None:
    native = _native()
    held: dict[int, object] = {}
    plain, point, with_dict = tuple([1, "a"]), _Point(1, 2), _PointWithDict(1, 2)
    for key, value in enumerate((plain, point, with_dict)):
        native(held, key, value)
    assert not gc.is_tracked(plain) and not gc.is_tracked(point)
    assert gc.is_tracked(with_dict)  # its __dict__ may hold anything
