"""Subject validity and wildcard algebra, against nats-server's rules and a reference matcher."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.subjects import (
    has_wildcard,
    is_subset,
    is_valid_literal_subject,
    is_valid_queue_name,
    is_valid_subject,
    subject_matches,
    subjects_overlap,
    tokenize,
)


@pytest.mark.parametrize(
    ("subject", "valid"),
    [
        ("foo", True),
        ("foo.bar", True),
        ("foo.*", True),
        ("foo.>", True),
        (">", True),
        ("*", True),
        ("*.*.>", True),
        ("foo*", True),  # '*' inside a token is a literal
        ("a>b", True),
        ("foo.bar*.>", True),
        ("", False),
        (".", False),
        ("foo.", False),
        (".foo", False),
        ("foo..bar", False),
        ("foo.>.bar", False),
        (">.foo", False),
        ("foo.>.>", False),
        ("foo bar", False),
        ("foo\tbar", False),
        ("foo\rbar", False),
        ("foo\nbar", False),
        ("foo\fbar", False),
        (" ", False),
    ],
)
def test_is_valid_subject(subject: str, valid: bool) -> None:
    assert is_valid_subject(subject) is valid


@pytest.mark.parametrize(
    ("subject", "literal"),
    [
        ("foo.bar", True),
        ("foo*", True),
        ("a>b.c", True),
        ("foo.*", False),
        ("foo.>", False),
        (">", False),
        ("foo..bar", False),
        ("", False),
    ],
)
def test_is_valid_literal_subject(subject: str, literal: bool) -> None:
    assert is_valid_literal_subject(subject) is literal


@pytest.mark.parametrize(
    ("subject", "wild"),
    [("foo", False), ("foo*", False), ("a>b", False), ("*", True), ("a.*.b", True), ("a.>", True)],
)
def test_has_wildcard(subject: str, wild: bool) -> None:
    assert has_wildcard(subject) is wild


def test_tokenize_keeps_empty_tokens() -> None:
    assert tokenize("a..b") == ["a", "", "b"]
    assert tokenize("a.b.>") == ["a", "b", ">"]


@pytest.mark.parametrize(
    ("queue", "valid"), [("q", True), ("_sys_", True), ("a.b", True), ("", False), ("a b", False)]
)
def test_is_valid_queue_name(queue: str, valid: bool) -> None:
    assert is_valid_queue_name(queue) is valid


@pytest.mark.parametrize(
    ("filter_", "subject", "matches"),
    [
        ("foo", "foo", True),
        ("foo", "bar", False),
        ("foo.*", "foo.bar", True),
        ("foo.*", "foo", False),
        ("foo.*", "foo.bar.baz", False),
        ("foo.>", "foo.bar.baz", True),
        ("foo.>", "foo", False),  # '>' needs at least one token
        (">", "foo", True),
        (">", "a.b.c", True),
        ("*", "foo", True),
        ("*", "foo.bar", False),
        ("*.bar", "foo.bar", True),
        ("foo*", "foo*", True),
        ("foo*", "fooX", False),
        ("foo.*", "foo.*", True),  # a wildcard in a published subject is matched literally
        ("foo.bar", "foo.*", False),
        ("foo.*.baz", "foo..baz", False),  # empty tokens match nothing
        (">", "foo..bar", False),
    ],
)
def test_subject_matches(filter_: str, subject: str, matches: bool) -> None:
    assert subject_matches(filter_, subject) is matches


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("foo", "foo", True),
        ("foo", "bar", False),
        ("foo.*", "foo.bar", True),
        ("foo.*", "*.bar", True),
        ("foo.*", "bar.*", False),
        ("foo.>", "foo", False),
        ("foo.>", "foo.bar.baz", True),
        (">", "anything.at.all", True),
        ("*.*", "foo.>", True),
        ("*", "foo.>", False),
        ("foo.*.baz", "foo.bar.*", True),
        ("a.b", "a.b.c", False),
    ],
)
def test_subjects_overlap(a: str, b: str, overlap: bool) -> None:
    assert subjects_overlap(a, b) is overlap
    assert subjects_overlap(b, a) is overlap


@pytest.mark.parametrize(
    ("sub", "sup", "subset"),
    [
        ("foo.bar", "foo.*", True),
        ("foo.*", "foo.bar", False),
        ("foo.*", "foo.>", True),
        ("foo.>", "foo.*", False),
        ("foo.>", ">", True),
        (">", "foo.>", False),
        ("foo.bar.baz", "foo.>", True),
        ("foo", "foo.>", False),
        ("*.bar", "*.*", True),
        ("*.*", "*.bar", False),
        ("a.b", "a.b", True),
    ],
)
def test_is_subset(sub: str, sup: str, subset: bool) -> None:
    assert is_subset(sub, sup) is subset


# ---------------------------------------------------------------- reference implementation

TOKENS = st.sampled_from(["a", "b", "c", "*", ">", "ab"])


def _ref_regex(filter_: str) -> re.Pattern[str]:
    parts = []
    toks = filter_.split(".")
    for i, t in enumerate(toks):
        if t == "*":
            parts.append(r"[^.]+")
        elif t == ">" and i == len(toks) - 1:
            parts.append(r"[^.]+(?:\.[^.]+)*")
        else:
            parts.append(re.escape(t))
    return re.compile(r"\.".join(parts))


def _ref_match(filter_: str, subject: str) -> bool:
    if "" in subject.split("."):
        return False
    return _ref_regex(filter_).fullmatch(subject) is not None


filters = st.lists(TOKENS, min_size=1, max_size=5).map(".".join).filter(is_valid_subject)
literals = st.lists(st.sampled_from(["a", "b", "c", "ab", "*", ">"]), min_size=1, max_size=6).map(
    ".".join
)


@settings(max_examples=200)
@given(filters, literals)
def test_subject_matches_equals_reference(filter_: str, subject: str) -> None:
    assert subject_matches(filter_, subject) == _ref_match(filter_, subject)


ALPHABET = ["a", "b", "c", "ab", "x"]


def _all_literals(max_len: int = 4) -> list[str]:
    out: list[str] = [""]
    result = []
    for _ in range(max_len):
        out = [f"{p}.{t}" if p else t for p in out for t in ALPHABET]
        result.extend(out)
    return result


UNIVERSE = _all_literals()


small_filters = st.lists(TOKENS, min_size=1, max_size=3).map(".".join).filter(is_valid_subject)


@settings(max_examples=200)
@given(small_filters, small_filters)
def test_overlap_and_subset_agree_with_enumeration(a: str, b: str) -> None:
    # Filters of up to 3 tokens: every literal subject that can tell two of them apart has at
    # most 4 tokens, so enumerating all literals over ALPHABET up to 4 tokens decides both.
    a_set = {s for s in UNIVERSE if subject_matches(a, s)}
    b_set = {s for s in UNIVERSE if subject_matches(b, s)}
    assert subjects_overlap(a, b) == bool(a_set & b_set)
    assert is_subset(a, b) == (a_set <= b_set)
