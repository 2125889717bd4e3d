"""Sublist: matches equal a brute-force filter over all subscriptions, through inserts/removes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.subjects import is_valid_subject, subject_matches
from protocol.sublist import MATCH_CACHE_ENTRIES_MAX, MatchResult, Sublist


@dataclass(eq=True)  # unhashable and equal by value: the sublist must use identity
class FakeSub:
    name: str


def _norm(result: MatchResult[FakeSub]) -> tuple[list[int], dict[str, list[int]]]:
    plain = sorted(id(s) for s in result.plain)
    queues = {q: sorted(id(s) for s in members) for q, members in result.queues.items()}
    return plain, queues


def _brute(
    subs: list[tuple[str, str | None, FakeSub]], subject: str
) -> tuple[list[int], dict[str, list[int]]]:
    plain: list[int] = []
    queues: dict[str, list[int]] = {}
    for filter_, queue, sub in subs:
        if subject_matches(filter_, subject):
            if queue is None:
                plain.append(id(sub))
            else:
                queues.setdefault(queue, []).append(id(sub))
    return sorted(plain), {q: sorted(v) for q, v in queues.items()}


def test_basic_matching_and_queue_grouping() -> None:
    sl: Sublist[FakeSub] = Sublist()
    a, b, c, d, e = (FakeSub(n) for n in "abcde")
    sl.insert("foo.bar", None, a)
    sl.insert("foo.*", None, b)
    sl.insert("foo.>", "q", c)
    sl.insert("*.bar", "q", d)
    sl.insert(">", "r", e)
    r = sl.match("foo.bar")
    assert sorted(s.name for s in r.plain) == ["a", "b"]
    assert sorted(s.name for s in r.queues["q"]) == ["c", "d"]  # merged across nodes
    assert [s.name for s in r.queues["r"]] == ["e"]
    assert sl.count() == 5
    only_fwc = sl.match("foo")  # 'foo.>' needs a second token; only '>' matches
    assert only_fwc.plain == [] and only_fwc.queues == {"r": [e]}


def test_published_wildcards_are_literal_and_empty_tokens_match_nothing() -> None:
    sl: Sublist[FakeSub] = Sublist()
    lit, star = FakeSub("lit"), FakeSub("star")
    sl.insert("foo.bar", None, lit)
    sl.insert("foo.*", None, star)
    assert sl.match("foo.*").plain == [star]
    assert not sl.match("foo..bar")
    assert not sl.match(".foo")
    assert not sl.match("")


def test_equal_but_distinct_subscribers_are_kept_apart() -> None:
    sl: Sublist[FakeSub] = Sublist()
    one, two = FakeSub("same"), FakeSub("same")
    sl.insert("x", None, one)
    sl.insert("x", None, two)
    sl.insert("x", None, one)  # idempotent
    assert sl.count() == 2
    assert sl.remove("x", None, one)
    assert sl.match("x").plain == [two]
    assert sl.match("x").plain[0] is two
    assert not sl.remove("x", None, one)
    assert not sl.remove("x", "q", two)  # wrong queue
    assert not sl.remove("y.*", None, two)


def test_cached_results_are_not_changed_by_later_inserts() -> None:
    sl: Sublist[FakeSub] = Sublist()
    a, b = FakeSub("a"), FakeSub("b")
    sl.insert("x.*", None, a)
    before = sl.match("x.y")
    sl.insert("x.y", None, b)
    after = sl.match("x.y")
    assert before.plain == [a]
    assert sorted(s.name for s in after.plain) == ["a", "b"]
    sl.remove("x.*", None, a)
    assert sl.match("x.y").plain == [b]
    assert sorted(s.name for s in after.plain) == ["a", "b"]


def test_cache_is_bounded() -> None:
    sl: Sublist[FakeSub] = Sublist()
    sl.insert(">", None, FakeSub("all"))
    for i in range(MATCH_CACHE_ENTRIES_MAX + 10):
        assert len(sl.match(f"s.{i}").plain) == 1
    assert 0 < sl.cache_count() <= MATCH_CACHE_ENTRIES_MAX


@pytest.mark.parametrize("bad", ["", "foo..bar", "foo.>.bar", ".x", "x."])
def test_insert_rejects_invalid_subjects(bad: str) -> None:
    sl: Sublist[FakeSub] = Sublist()
    with pytest.raises(ValueError):
        sl.insert(bad, None, FakeSub("x"))
    assert sl.count() == 0


def test_trie_is_pruned_after_removal() -> None:
    sl: Sublist[FakeSub] = Sublist()
    s = FakeSub("s")
    sl.insert("a.*.c.>", None, s)
    sl.insert("a.b", None, s)  # a literal subscription takes no trie node
    assert sl.wildcard_nodes() == 4
    assert sl.remove("a.*.c.>", None, s)
    assert sl.wildcard_nodes() == 0
    assert sl.remove("a.b", None, s)
    assert sl.count() == 0


tokens = st.sampled_from(["a", "b", "c", "*", ">"])
filters = st.lists(tokens, min_size=1, max_size=4).map(".".join).filter(is_valid_subject)
literals = st.lists(st.sampled_from(["a", "b", "c", "*"]), min_size=1, max_size=5).map(".".join)
ops = st.lists(
    st.tuples(
        st.sampled_from(["insert", "insert", "remove", "match"]),
        filters,
        st.one_of(st.none(), st.sampled_from(["q1", "q2"])),
        st.integers(0, 5),
        literals,
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_match_equals_brute_force(program: list[tuple[str, str, str | None, int, str]]) -> None:
    sl: Sublist[FakeSub] = Sublist()
    pool = [FakeSub(f"s{i}") for i in range(6)]
    live: list[tuple[str, str | None, FakeSub]] = []
    for op, filter_, queue, idx, subject in program:
        sub = pool[idx]
        if op == "insert":
            sl.insert(filter_, queue, sub)
            if not any(f == filter_ and q == queue and s is sub for f, q, s in live):
                live.append((filter_, queue, sub))
        elif op == "remove":
            present = any(f == filter_ and q == queue and s is sub for f, q, s in live)
            assert sl.remove(filter_, queue, sub) is present
            live = [e for e in live if not (e[0] == filter_ and e[1] == queue and e[2] is sub)]
        assert _norm(sl.match(subject)) == _brute(live, subject)
        assert sl.count() == len(live)


def test_monitoring_views_list_every_subscriber_and_count_changes() -> None:
    """What /subsz reads: every subscriber (literal and wildcard), inserts and removes, and the
    fanout of the cached results (a queue group counts once)."""
    sl: Sublist[FakeSub] = Sublist()
    a, b, c, d = FakeSub("a"), FakeSub("b"), FakeSub("c"), FakeSub("d")
    sl.insert("foo.bar", None, a)
    sl.insert("foo.*", "q", b)
    sl.insert("foo.*", "q", c)
    sl.insert("baz.>", None, d)
    assert sl.fanout() == (0, 0.0)  # nothing matched yet: an empty cache
    sl.match("foo.bar")  # a + the queue group q
    sl.match("baz.x")  # d
    assert sl.fanout() == (2, 1.5)
    sl.remove("baz.>", None, d)
    assert sl.changes() == (4, 1)
    assert sorted(s.name for s in sl.subscribers()) == ["a", "b", "c"]


def test_subjects_that_differ_in_the_last_token_share_a_result_only_while_sound() -> None:
    """The prefix cache: ``_INBOX.c.1`` and ``_INBOX.c.2`` reach the same subscribers until a
    subscription could tell them apart (a literal one under the prefix, or a wildcard pattern
    ending in a literal token); every later match must see it."""
    sl: Sublist[FakeSub] = Sublist()
    inbox, api = FakeSub("inbox"), FakeSub("api")
    sl.insert("_INBOX.c.*", None, inbox)
    sl.insert("$JS.API.>", None, api)
    assert [s.name for s in sl.match("_INBOX.c.1").plain] == ["inbox"]
    assert sl.match("_INBOX.c.2") is sl.match("_INBOX.c.3")  # one shared result
    exact = FakeSub("exact")
    sl.insert("_INBOX.c.7", None, exact)
    assert [s.name for s in sl.match("_INBOX.c.7").plain] == ["inbox", "exact"]
    assert [s.name for s in sl.match("_INBOX.c.8").plain] == ["inbox"]
    sl.remove("_INBOX.c.7", None, exact)
    assert [s.name for s in sl.match("_INBOX.c.7").plain] == ["inbox"]
    tail = FakeSub("tail")
    sl.insert("_INBOX.*.9", "q", tail)
    assert sl.match("_INBOX.c.9").queues == {"q": [tail]}
    assert not sl.match("_INBOX.c.1").queues
    sl.remove("_INBOX.*.9", "q", tail)
    assert not sl.match("_INBOX.c.9").queues
    assert not sl.match("_INBOX.c.").plain  # an empty last token matches nothing


def test_a_pattern_under_another_first_token_leaves_reply_subjects_shared() -> None:
    """``$SYS.REQ.ACCOUNT.*.CONNS`` can tell ``$SYS`` subjects apart, never ``_INBOX`` ones:
    replies keep sharing one result, ``$SYS`` subjects are matched each on its own, and a
    pattern with a wildcard first token turns sharing off everywhere."""
    sl: Sublist[FakeSub] = Sublist()
    inbox, conns = FakeSub("inbox"), FakeSub("conns")
    sl.insert("_INBOX.c.*", None, inbox)
    sl.insert("$SYS.REQ.ACCOUNT.*.CONNS", None, conns)
    sl.insert("$SYS.REQ.ACCOUNT.*.*", None, FakeSub("any"))
    assert sl.match("_INBOX.c.1") is sl.match("_INBOX.c.2")
    assert {s.name for s in sl.match("$SYS.REQ.ACCOUNT.a.CONNS").plain} == {"any", "conns"}
    assert [s.name for s in sl.match("$SYS.REQ.ACCOUNT.a.INFO").plain] == ["any"]
    head = FakeSub("head")
    sl.insert("*.c.7", None, head)
    assert {s.name for s in sl.match("_INBOX.c.7").plain} == {"inbox", "head"}
    assert sl.match("_INBOX.c.8").plain == [inbox]
    sl.remove("*.c.7", None, head)
    sl.remove("$SYS.REQ.ACCOUNT.*.CONNS", None, conns)
    assert sl.match("_INBOX.c.7").plain == [inbox]
    assert sl.match("$SYS.REQ.ACCOUNT.a.CONNS") is sl.match("$SYS.REQ.ACCOUNT.a.INFO")


@given(
    st.lists(
        st.sampled_from(["a.*", "a.b", "a.c", "*.b", "a.>", ">", "a.*.c", "b.*", "b.*.c", "*.x.c"]),
        max_size=8,
    ),
    st.lists(
        st.sampled_from(["a.b", "a.c", "a.d", "b.b", "a.b.c", "a.x.c", "b.x.c", "b.x.d"]),
        max_size=12,
    ),
)
def test_shared_results_equal_a_fresh_index(filters: list[str], subjects: list[str]) -> None:
    """Matching subjects in any order (so results are shared and cached as they come) gives
    what a fresh index with the same subscriptions gives for each subject alone."""
    sl: Sublist[FakeSub] = Sublist()
    subs = [(f, FakeSub(f"{i}")) for i, f in enumerate(filters)]
    for filter_, sub in subs:
        sl.insert(filter_, None, sub)
    for subject in subjects:
        fresh: Sublist[FakeSub] = Sublist()
        for filter_, sub in subs:
            fresh.insert(filter_, None, sub)
        assert sl.match(subject).plain == fresh.match(subject).plain, subject
