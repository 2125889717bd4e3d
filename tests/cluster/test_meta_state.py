"""The meta group's state machine: assignments from a log, identically on every node."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.meta_state import (
    MetaCommandError,
    MetaState,
    decode_meta_command,
    encode_meta_command,
)

_names = st.sampled_from(["A", "B", "C"])
_cmds = st.one_of(
    st.builds(
        lambda n, r: {
            "op": "add",
            "name": n,
            "config": {"name": n, "num_replicas": r},
            "peers": ["n0", "n1", "n2"][:r],
            "created_ns": 1,
        },
        _names,
        st.integers(1, 3),
    ),
    st.builds(lambda n: {"op": "del", "name": n}, _names),
    st.builds(
        lambda n, m: {"op": "upd", "name": n, "config": {"max_msgs": m}}, _names, st.integers()
    ),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(_cmds, max_size=20), st.integers(0, 20))
def test_replay_and_snapshot_give_the_same_state(cmds: list[dict[str, object]], cut: int) -> None:
    log = [encode_meta_command(c) for c in cmds]
    a = MetaState()
    for raw in log:
        a.apply(decode_meta_command(raw))
    # a node that restored a snapshot taken part-way and replayed the rest agrees
    b = MetaState()
    for raw in log[:cut]:
        b.apply(decode_meta_command(raw))
    c = MetaState.from_json(b.to_json())
    for raw in log[cut:]:
        c.apply(decode_meta_command(raw))
    assert a.to_json() == c.to_json()


def test_outcomes() -> None:
    s = MetaState()
    add = {"op": "add", "name": "A", "config": {}, "peers": ["n0"], "created_ns": 5}
    assert s.apply(add) is None
    assert s.apply(add) == "exists"
    assert s.apply({"op": "upd", "name": "Z", "config": {}}) == "missing"
    assert s.apply({"op": "del", "name": "A"}) is None
    assert s.apply({"op": "del", "name": "A"}) == "missing"


def test_bad_commands_are_refused() -> None:
    with pytest.raises(MetaCommandError):
        decode_meta_command(b"{")
    with pytest.raises(MetaCommandError):
        decode_meta_command(b'{"v": 99, "op": "add"}')
    with pytest.raises(MetaCommandError):
        MetaState().apply({"op": "nope", "name": "A"})
