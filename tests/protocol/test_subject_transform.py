"""Subject transforms (protocol/subject_transform.py): the mapping functions' results and the
properties that hold for every subject; nats-server's exact answers for stored subjects and
config errors are pinned by tests/differential/test_diff_stream_features.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.subject_transform import SubjectTransform, TransformError, validate_mapping

token = st.text(alphabet="abcdefghij0123456789-_", min_size=1, max_size=12)


def compiled(src: str, dest: str) -> SubjectTransform:
    transform = SubjectTransform.compile(src, dest)
    assert transform is not None
    return transform


def test_no_destination_is_no_transform() -> None:
    assert SubjectTransform.compile("a.*", "") is None


@pytest.mark.parametrize(
    ("src", "dest", "subject", "expected"),
    [
        ("a.*.*", "b.$2.$1", "a.x.y", "b.y.x"),
        ("a.*.*", "b.{{wildcard(2)}}.{{ Wildcard( 1 ) }}", "a.x.y", "b.y.x"),
        ("a.>", "b.>", "a.x.y.z", "b.x.y.z"),
        ("a.*.>", "b.$1.>", "a.x.y.z", "b.x.y.z"),
        ("a.*", "b.{{splitfromleft(1,2)}}", "a.abcde", "b.ab.cde"),
        ("a.*", "b.{{splitfromright(1,2)}}", "a.abcde", "b.abc.de"),
        ("a.*", "b.{{slicefromleft(1,2)}}", "a.abcde", "b.ab.cd.e"),
        ("a.*", "b.{{slicefromright(1,2)}}", "a.abcde", "b.a.bc.de"),
        ("a.*", "b.{{slicefromright(1,9)}}", "a.abcde", "b.abcde"),
        ("a.*", "b.{{left(1,2)}}.{{right(1,2)}}", "a.abcde", "b.ab.de"),
        ("a.*", "b.{{split(1,-)}}", "a.x-y--z", "b.x.y.z"),
        ("a.*", "b.{{split(1,-)}}", "a.-x", "b.x"),
        ("a.*", "b.{{partition(1,1)}}", "a.anything", "b.0"),
        ("a.*", "b.$1", "c.x", None),  # not matched
        ("a.*", "b.$1", "a.*", None),  # not a literal subject
    ],
)
def test_mapping_functions(src: str, dest: str, subject: str, expected: str | None) -> None:
    assert compiled(src, dest).match(subject) == expected


@pytest.mark.parametrize(
    ("dest", "error"),
    [
        ("b.{{wildcard(2)}}", "wildcard index out of range in {{wildcard(2)}}: [2]"),
        ("b.{{nope(1)}}", "unknown function in {{nope(1)}}"),
        ("b.{{wildcard()}}", "not enough arguments passed to the function"),
        ("b.{{wildcard(1,2)}}", "too many arguments passed to the function"),
        ("b.{{splitfromleft(x,2)}}", "function argument is invalid or in the wrong format"),
        ("b.*", "invalid subject"),
        ("b..c", "invalid subject"),
    ],
)
def test_refused_destinations(dest: str, error: str) -> None:
    with pytest.raises(TransformError) as raised:
        SubjectTransform.compile("a.*", dest)
    assert error in str(raised.value)


def test_validate_mapping_refuses_whitespace_and_tokens_after_the_full_wildcard() -> None:
    with pytest.raises(TransformError):
        validate_mapping("a.>", "b.>.c")
    with pytest.raises(TransformError):
        validate_mapping("a.*", "b c.$1")
    validate_mapping("a.*", "b.{{random(3)}}")


@given(st.lists(token, min_size=1, max_size=5))
def test_full_wildcard_to_itself_is_the_identity(tokens: list[str]) -> None:
    subject = ".".join(tokens)
    assert compiled(">", ">").match(subject) == subject
    assert compiled("", "x.>").match(subject) == "x." + subject


@given(token, st.integers(1, 15))
def test_slices_and_splits_keep_every_character(value: str, size: int) -> None:
    for fn in ("slicefromleft", "slicefromright", "splitfromleft", "splitfromright"):
        out = compiled("a.*", f"{{{{{fn}(1,{size})}}}}").match(f"a.{value}")
        assert out is not None
        assert out.replace(".", "") == value
        assert all(0 < len(piece) for piece in out.split("."))


@given(st.lists(token, min_size=2, max_size=2), st.integers(1, 50))
def test_partitions_are_in_range_and_stable(tokens: list[str], count: int) -> None:
    transform = compiled("a.*.*", f"p.{{{{partition({count},1,2)}}}}")
    subject = "a." + ".".join(tokens)
    out = transform.match(subject)
    assert out is not None
    assert 0 <= int(out.split(".")[1]) < count
    assert transform.match(subject) == out


def test_random_uses_the_callers_pick() -> None:
    transform = compiled("a.*", "r.{{random(10)}}")
    assert transform.match("a.x", lambda n: n - 1) == "r.9"
