"""Only the Raft messages jetraft sends get through; nothing else, and nothing is unpickled."""

from __future__ import annotations

import pickle
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.raft_messages import (
    COMMAND_NO_OP,
    COMMAND_REGULAR,
    RAFT_VALUE_MAX,
    RaftMessageError,
    validate_raft_message,
)

VALID: list[dict[str, Any]] = [
    {"type": "request_vote", "term": 7, "last_log_index": 12, "last_log_term": 6},
    {"type": "response_vote", "term": 7},
    {"type": "timeout_now", "term": 7},
    {
        "type": "append_entries",
        "term": 7,
        "commit_index": 11,
        "prevLogIdx": 11,
        "prevLogTerm": 6,
        "entries": [[b"\x00a", 12, 7], [b"\x00b", 13, 7]],
    },
    {
        "type": "append_entries",
        "term": 7,
        "commit_index": 11,
        "prevLogIdx": 11,
        "prevLogTerm": 6,
        "entries": [],
    },
    {"type": "append_entries", "term": 7, "commit_index": 3, "serialized": [b"{}", True, False]},
    {"type": "append_entries", "term": 7, "commit_index": 3, "serialized": None},
    {"type": "next_node_idx", "next_node_idx": 14, "reset": False, "success": True},
    {"type": "apply_command", "command": b"\x00cmd", "request_id": 3},
    {"type": "apply_command", "command": b"\x00cmd"},
    {"type": "apply_command_response", "request_id": 3, "log_idx": 14, "log_term": 7},
    {"type": "apply_command_response", "request_id": 3, "error": 2},
]


def _wire(message: object) -> object:
    return msgpack.unpackb(msgpack.packb(message, use_bin_type=True), raw=False)


def _normal(message: dict[str, Any]) -> dict[str, Any]:
    out = dict(message)
    if "entries" in out:
        out["entries"] = [tuple(e) for e in out["entries"]]
    if out.get("serialized") is not None:
        out["serialized"] = tuple(out["serialized"])
    return out


@pytest.mark.parametrize("message", VALID, ids=lambda m: str(m["type"]))
def test_every_message_jetraft_sends_passes_unchanged(message: dict[str, Any]) -> None:
    assert validate_raft_message(_wire(message)) == _normal(message)


class _Proof:
    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("pwned",))


@pytest.mark.parametrize(
    "message",
    [
        {"type": "request_vote", "term": 2**64 - 1, "last_log_index": 1, "last_log_term": 1},
        {
            "type": "request_vote",
            "term": RAFT_VALUE_MAX + 1,
            "last_log_index": 1,
            "last_log_term": 1,
        },
        {"type": "request_vote", "term": -1, "last_log_index": 1, "last_log_term": 1},
        {"type": "request_vote", "term": True, "last_log_index": 1, "last_log_term": 1},
        {"type": "request_vote", "term": 1, "last_log_index": 1},
        {"type": "response_vote", "term": 1, "extra": 1},
        {
            "type": "append_entries",
            "term": 1,
            "commit_index": "zz",
            "prevLogIdx": 1,
            "prevLogTerm": 1,
            "entries": [],
        },
        {
            "type": "append_entries",
            "transmission": "finish",
            "data": pickle.dumps(_Proof()),
            "term": 1,
            "commit_index": 1,
            "prevLogIdx": 1,
            "prevLogTerm": 1,
        },
        {
            "type": "append_entries",
            "term": 1,
            "commit_index": 1,
            "prevLogIdx": 1,
            "prevLogTerm": 1,
            "entries": [[b"x", 5, 1]],  # not the entry after prevLogIdx
        },
        {
            "type": "append_entries",
            "term": 1,
            "commit_index": 1,
            "prevLogIdx": 1,
            "prevLogTerm": 1,
            "entries": [["text", 2, 1]],
        },
        {"type": "append_entries", "term": 1, "commit_index": 1, "serialized": [b"", 1, 0]},
        {"type": "next_node_idx", "next_node_idx": 1, "reset": 0, "success": 1},
        {"type": "apply_command_response", "request_id": 1},
        {"type": "apply_command_response", "request_id": 1, "error": 2, "log_idx": 3},
        {"type": "apply_command_response", "request_id": 1, "log_idx": 3},
        {"type": "apply_command_response", "request_id": 1, "error": 2**40},
        # pysyncobj's pickled command types: MEMBERSHIP (2), VERSION (3), and empty data
        {"type": "apply_command", "command": b"\x02" + pickle.dumps(["add", "n9", None])},
        {"type": "apply_command", "command": b"\x03" + pickle.dumps(2)},
        {"type": "apply_command", "command": b"\x01"},  # a no-op is never forwarded
        {"type": "apply_command", "command": b""},
        {"type": "apply_command", "command": b"\x00", "request_id": -1},
        {
            "type": "append_entries",
            "term": 1,
            "commit_index": 1,
            "prevLogIdx": 1,
            "prevLogTerm": 1,
            "entries": [[b"\x03" + pickle.dumps(2), 2, 1]],
        },
        {
            "type": "append_entries",
            "term": 1,
            "commit_index": 1,
            "prevLogIdx": 1,
            "prevLogTerm": 1,
            "entries": [[b"", 2, 1]],
        },
        {
            "type": "append_entries",
            "term": 1,
            "commit_index": 1,
            "prevLogIdx": 1,
            "prevLogTerm": 1,
            "entries": [[b"\x00", 2, 2**64 - 1]],
        },
        {"type": "append_entries", "term": 1, "commit_index": 1, "serialized": [b"", True]},
        {"type": "append_entries", "term": 1, "commit_index": 1, "serialized": False},
        {
            "type": "append_entries",
            "term": 1,
            "commit_index": 1,
            "serialized": None,
            "prevLogIdx": 1,
        },
        {"type": "timeout_now", "term": 1.5},
        {"type": "response_vote", "term": "1"},
        {"type": "request_vote", "term": None, "last_log_index": 1, "last_log_term": 1},
        {"type": "install_snapshot", "term": 1},
        ["request_vote", 1],
        None,
    ],
)
def test_forged_or_malformed_messages_are_refused(message: object) -> None:
    with pytest.raises(RaftMessageError):
        validate_raft_message(_wire(message))


def test_command_types_are_pysyncobjs() -> None:
    """The codec must not import pysyncobj; its copy of the command types must still match."""
    from pysyncobj.syncobj import _COMMAND_TYPE

    assert (COMMAND_REGULAR, COMMAND_NO_OP) == (_COMMAND_TYPE.REGULAR, _COMMAND_TYPE.NO_OP)


def test_the_vote_poisoning_terms_are_refused() -> None:
    for term in (2**64 - 1, 2**63, RAFT_VALUE_MAX + 1):
        vote = {"type": "request_vote", "term": term, "last_log_index": 1, "last_log_term": 1}
        with pytest.raises(RaftMessageError, match="term"):
            validate_raft_message(_wire(vote))
    vote = {"type": "request_vote", "term": RAFT_VALUE_MAX, "last_log_index": 1, "last_log_term": 1}
    assert validate_raft_message(_wire(vote))["term"] == RAFT_VALUE_MAX


def test_bool_is_not_an_int() -> None:
    for key in ("commit_index", "prevLogIdx", "prevLogTerm", "term"):
        message = {**VALID[3], key: True}
        with pytest.raises(RaftMessageError, match=key):
            validate_raft_message(_wire(message))


def test_the_result_is_a_fresh_copy() -> None:
    message = _wire(VALID[3])
    checked = validate_raft_message(message)
    assert checked is not message and checked["entries"] is not message["entries"]  # type: ignore[index]


def test_a_huge_refused_value_gives_a_short_error() -> None:
    message = {"type": "request_vote", "term": b"x" * 1_000_000, "last_log_index": 1}
    message["last_log_term"] = 1
    with pytest.raises(RaftMessageError) as info:
        validate_raft_message(_wire(message))
    assert len(str(info.value)) < 300
    with pytest.raises(RaftMessageError) as info:
        validate_raft_message(_wire({"type": "x" * 1_000_000}))
    assert len(str(info.value)) < 300
    with pytest.raises(RaftMessageError) as info:
        validate_raft_message(_wire({**VALID[1], **{f"k{i}": i for i in range(10_000)}}))
    assert len(str(info.value)) < 300


LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.sampled_from(["request_vote", "append_entries", "transmission", "next_node_idx"]),
)
ANY = st.recursive(
    LEAF,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=12), children, max_size=6)
    ),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(ANY)
def test_random_values_never_raise_anything_but_a_refusal(value: object) -> None:
    try:
        validate_raft_message(_wire(value))
    except RaftMessageError:
        pass


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(VALID), st.text(max_size=12), ANY)
def test_mutated_valid_messages_are_accepted_only_when_still_well_typed(
    message: dict[str, Any], key: str, value: object
) -> None:
    mutated = {**message, key: value}
    try:
        checked = validate_raft_message(_wire(mutated))
    except RaftMessageError:
        return
    assert "transmission" not in checked and "data" not in checked
    for field, got in checked.items():
        if type(got) is int:
            assert 0 <= got <= RAFT_VALUE_MAX, (field, got)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VALID), ANY)
def test_a_transmission_key_is_always_refused(message: dict[str, Any], value: object) -> None:
    forged = {**message, "type": "append_entries", "transmission": value, "data": b"x"}
    with pytest.raises(RaftMessageError):
        validate_raft_message(_wire(forged))


PICKLABLE = st.recursive(
    st.one_of(st.none(), st.integers(), st.text(max_size=8), st.binary(max_size=8)),
    lambda children: st.one_of(st.lists(children, max_size=3), st.tuples(children, children)),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(PICKLABLE, st.integers(min_value=0, max_value=pickle.HIGHEST_PROTOCOL))
def test_a_pickle_is_never_a_valid_entry_or_command(value: object, protocol: int) -> None:
    """No pickle opcode is 0 or 1, so a pickle can never pass for a jetraft entry: even if some
    path unpickled entry data, a peer could not get one into a log."""
    payload = pickle.dumps(value, protocol=protocol)
    append = {**VALID[4], "entries": [[payload, 12, 7]]}
    for message in (append, {"type": "apply_command", "command": payload}):
        with pytest.raises(RaftMessageError):
            validate_raft_message(_wire(message))
