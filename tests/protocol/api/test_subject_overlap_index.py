"""The subject trie gives exactly the pairwise overlap answer, without the quadratic cost."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ApiError
from protocol.stream_config import normalize_create, subjects_collide
from protocol.subject_index import SubjectIndex

# tokens chosen to hit every branch of nats-server's SubjectsCollide, quirks included
# (a token that merely starts with `*`, empty tokens from `a..b`)
TOKENS = st.sampled_from(["a", "b", "c", "*", ">", "*x", ">y", ""])
SUBJECTS = st.lists(TOKENS, min_size=1, max_size=4).map(".".join)


def _naive_first(subjects: list[str], i: int) -> int | None:
    for j in range(i + 1, len(subjects)):
        if subjects_collide(subjects[i], subjects[j]):
            return j
    return None


@settings(max_examples=400, deadline=None)
@given(st.lists(SUBJECTS, min_size=1, max_size=12))
def test_first_collision_matches_the_pairwise_check(subjects: list[str]) -> None:
    index = SubjectIndex(subjects)
    for i, subject in enumerate(subjects):
        assert index.first_collision(subject, subjects_collide, after=i) == _naive_first(
            subjects, i
        )


@settings(max_examples=300, deadline=None)
@given(st.lists(SUBJECTS, min_size=1, max_size=10), SUBJECTS)
def test_any_collision_matches_the_pairwise_check(subjects: list[str], probe: str) -> None:
    expected = any(subjects_collide(probe, s) for s in subjects)
    assert (SubjectIndex(subjects).first_collision(probe, subjects_collide) is not None) == expected


def test_a_stream_of_many_subjects_reports_the_first_overlapping_pair() -> None:
    subjects = [f"orders.{n}.*" for n in range(20_000)] + ["orders.7.x"]
    body = ('{"name":"BIG","subjects":[' + ",".join(f'"{s}"' for s in subjects) + "]}").encode()
    with pytest.raises(ApiError) as caught:
        normalize_create("BIG", body, existing={})
    assert 'subject "orders.7.*" overlaps with "orders.7.x"' in str(caught.value)
