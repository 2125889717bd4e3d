"""Which subjects of a list collide (nats-server ``SubjectsCollide``) without trying every pair.

Why: checking a stream's subjects pairwise is quadratic, and it runs on the node's event loop. One
STREAM.CREATE with 8,000 subjects held the loop for 13 s; a token trie walked subject by subject
fixed the friendly shapes but not hostile ones (half ``*.<n>``, half ``<n>.z``: 8,000 subjects
5.7 s, 50,000 subjects 415 s in a 530 KB request), because a wildcard query fans out over every
literal child of its trie node while the token that tells the subjects apart comes later.

How: each subject becomes a vector of token classes, one per position (see ``_wild_vec``,
``_pattern_vec``, ``_literal_vec``), such that two subjects collide exactly when the strings are
equal or the vectors are compatible at every position. The join then splits sets of vectors on
one position at a time, always the one that separates a sample of them best (not left to right),
so the distinguishing token is found wherever it sits; a set whose pairs agree everywhere is a
collision. Small sets and every reported pair go through the exact predicate passed in, so the
answer is the pairwise one (tests compare against the naive loop on random lists, quirks
included). Deciding whether *any* pair collides is as hard as orthogonal vectors in general, so
inputs built like that can still cost more than linear time; the request is bounded by
``max_payload`` (1 MiB, the limit nats-server applies; it has no limit on the number of
subjects), and the shapes that froze the loop are linear here (tests/protocol_api).

Token classes mirror ``stream_config.subjects_collide`` (nats-server's, quirks included):
both subjects with wildcards compare ``tokensCanMatch`` over the shorter length (a token starting
with ``*`` or ``>`` matches any non-empty one; lengths differ only if the shorter has ``>``); a
literal subject against one with wildcards is ``isSubsetMatch`` (only tokens starting with ``*``
are wild, ``>`` ends the comparison but needs one more token); two literal subjects collide only
when equal. Pure and deterministic: no I/O, no clocks, no randomness.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Final

Collide = Callable[[str, str], bool]

# Token classes for one position. A literal token is its own class (the str); these are the rest.
DONE: Final = 0  # past a subject's end, or at/after a `>` (both-wildcard case): matches anything
NONEND: Final = 1  # a `>` tested against a literal subject: any token, even empty, but not the end
EMPTY: Final = 2  # an empty token (invalid subject): nothing matches it but DONE and NONEND
END: Final = 3  # the end of a subject with no `>`: matches another END (or DONE) only
WILD: Final = 4  # `*` and the like: any non-empty token, not the end
_SPECIALS: Final = (DONE, NONEND, EMPTY, END, WILD)

Cls = int | str
Vec = tuple[Cls, ...]
Item = tuple[int, Vec]  # (index into the subject list, vector)

# below these sizes trying every pair with the exact predicate is cheaper than splitting
SMALL_SELF: Final = 8
SMALL_CROSS: Final = 32
# items per side whose tokens decide which position to split on
SAMPLE: Final = 16
_NO_PAIR: Final = (1 << 62, 1 << 62)


def _is_wild(tokens: list[str]) -> bool:
    return "*" in tokens or ">" in tokens


def _wild_vec(tokens: list[str]) -> Vec:
    """A subject with wildcards, as compared with another such subject (``tokensCanMatch``)."""
    vec: list[Cls] = [EMPTY if not t else WILD if t[0] in "*>" else t for t in tokens]
    if ">" not in tokens:
        vec.append(END)  # a longer subject only matches if this one has `>` somewhere
    return tuple(vec)


def _pattern_vec(tokens: list[str]) -> Vec:
    """A subject with wildcards, as tested against a literal subject (``isSubsetMatch``)."""
    fwc = tokens.index(">") if ">" in tokens else len(tokens)
    vec: list[Cls] = [EMPTY if not t else WILD if t[0] == "*" else t for t in tokens[:fwc]]
    vec.append(NONEND if fwc < len(tokens) else END)
    return tuple(vec)


def _literal_vec(tokens: list[str]) -> Vec:
    """A subject without wildcards, as tested against a pattern (its tokens are all literal)."""
    return (*(EMPTY if not t else t for t in tokens), END)


def _counts(items: Sequence[Item], q: int) -> dict[Cls, int]:
    counts: dict[Cls, int] = {}
    for _, vec in items:
        k = vec[q] if q < len(vec) else DONE
        counts[k] = counts.get(k, 0) + 1
    return counts


def _compatible_pairs(ca: dict[Cls, int], na: int, cb: dict[Cls, int], nb: int) -> int:
    """Ordered pairs (x from a, y from b) whose classes at one position are compatible."""
    d, n, e, en, w = (ca.get(k, 0) for k in _SPECIALS)
    d2, n2, e2, en2, w2 = (cb.get(k, 0) for k in _SPECIALS)
    lit_a = na - d - n - e - en - w
    lit_b = nb - d2 - n2 - e2 - en2 - w2
    total = (
        d * nb
        + n * (nb - en2)
        + e * (d2 + n2)
        + en * (d2 + en2)
        + w * (d2 + n2 + w2 + lit_b)
        + lit_a * (d2 + n2 + w2)
    )
    small, big = (ca, cb) if len(ca) <= len(cb) else (cb, ca)
    for k, c in small.items():
        if k.__class__ is str:
            total += c * big.get(k, 0)
    return total


def _sample(items: list[Item]) -> list[Item]:
    if len(items) <= SAMPLE:
        return items
    step = len(items) / SAMPLE
    return [items[int(k * step)] for k in range(SAMPLE)]


def _min_index(items: list[Item]) -> int:
    return min(i for i, _ in items)


class _Join:
    """Best-first search for the smallest colliding pair (i < j) below ``best``.

    Work items are sets of vectors known to be compatible on their ``resolved`` positions: either
    the pairs within one list, or the pairs across two. Each is keyed by its smallest index, the
    smallest first index any of its pairs can have, so once that passes the best pair found the
    rest cannot improve on it.
    """

    def __init__(self, subjects: Sequence[str], collide: Collide, best: tuple[int, int]) -> None:
        self.subjects = subjects
        self.collide = collide
        self.best = best
        self.stop_at_first = False
        self.found_any = False
        self._heap: list[tuple[int, int, list[Item], list[Item] | None, frozenset[int]]] = []
        self._seq = 0

    def push(self, a: list[Item], b: list[Item] | None, resolved: frozenset[int]) -> None:
        if b is None:
            if len(a) < 2:
                return
            lb = _min_index(a)
        else:
            if not a or not b:
                return
            lb = min(_min_index(a), _min_index(b))
        if (lb, -1) >= self.best:
            return
        heapq.heappush(self._heap, (lb, self._seq, a, b, resolved))
        self._seq += 1

    def run(self) -> None:
        while self._heap and not (self.stop_at_first and self.found_any):
            lb, _, a, b, resolved = heapq.heappop(self._heap)
            if (lb, -1) >= self.best:
                break  # ordered by lb: nothing left can beat the pair found
            self._step(a, b, resolved)

    def _found(self, i: int, j: int) -> None:
        pair = (i, j) if i < j else (j, i)
        self.found_any = True
        self.best = min(self.best, pair)

    def _step(self, a: list[Item], b: list[Item] | None, resolved: frozenset[int]) -> None:
        if (len(a) <= SMALL_SELF) if b is None else (len(a) * len(b) <= SMALL_CROSS):
            self._brute(a, b)
            return
        q = self._choose(a, b, resolved)
        if q is None:
            self._all_compatible(a, b)
        elif b is None:
            self._split_self(a, q, resolved | {q})
        else:
            self._split_cross(a, b, q, resolved | {q})

    def _brute(self, a: list[Item], b: list[Item] | None) -> None:
        subjects, collide = self.subjects, self.collide
        if b is None:
            ordered = sorted(i for i, _ in a)
            for x, i in enumerate(ordered):
                if (i, -1) >= self.best:
                    return
                for j in ordered[x + 1 :]:
                    if (i, j) >= self.best:
                        break
                    if collide(subjects[i], subjects[j]):
                        self._found(i, j)
                        break
            return
        for i, _ in a:
            for j, _ in b:
                pair = (i, j) if i < j else (j, i)
                if pair < self.best and collide(subjects[pair[0]], subjects[pair[1]]):
                    self._found(*pair)

    def _all_compatible(self, a: list[Item], b: list[Item] | None) -> None:
        """Every pair agrees at every position, so the smallest pair collides; check it anyway."""
        if b is None:
            i, j = sorted(i for i, _ in a)[:2]
        else:
            i, j = _min_index(a), _min_index(b)
        if self.collide(self.subjects[min(i, j)], self.subjects[max(i, j)]):
            self._found(i, j)
        else:  # the classes missed a quirk of the predicate: stay exact, if slow
            self._brute(a, b)

    def _choose(self, a: list[Item], b: list[Item] | None, resolved: frozenset[int]) -> int | None:
        """The position that leaves the fewest compatible pairs, judged on a sample first.

        A sample where every pair agrees everywhere says little when the set is larger than the
        sample, so then all items are scanned; None means every pair agrees at every position.
        """
        sa = _sample(a)
        sb = sa if b is None else _sample(b)
        q = _best_position(sa, sb, resolved)
        whole = len(sa) == len(a) and (b is None or len(sb) == len(b))
        if q is None and not whole:
            q = _best_position(a, a if b is None else b, resolved)
        return q

    def _split_self(self, a: list[Item], q: int, resolved: frozenset[int]) -> None:
        groups = _group(a, q)
        done, nonend, empty, end, wild = (groups.pop(k, []) for k in _SPECIALS)
        literal: list[Item] = []
        for group in groups.values():
            self.push(group, None, resolved)
            literal.extend(group)
        for group in (done, nonend, end, wild):  # EMPTY never matches EMPTY
            self.push(group, None, resolved)
        if done:
            self.push(done, nonend + empty + end + wild + literal, resolved)
        if nonend:
            self.push(nonend, empty + wild + literal, resolved)
        if wild:
            self.push(wild, literal, resolved)

    def _split_cross(self, a: list[Item], b: list[Item], q: int, resolved: frozenset[int]) -> None:
        ga, gb = _group(a, q), _group(b, q)
        a_done, a_nonend, a_empty, a_end, a_wild = (ga.pop(k, []) for k in _SPECIALS)
        b_done, b_nonend, b_empty, b_end, b_wild = (gb.pop(k, []) for k in _SPECIALS)
        a_lit = [item for group in ga.values() for item in group]
        b_lit = [item for group in gb.values() for item in group]
        self.push(a_done, b, resolved)
        self.push(a_nonend + a_empty + a_end + a_wild + a_lit, b_done, resolved)
        self.push(a_nonend, b_nonend + b_empty + b_wild + b_lit, resolved)
        self.push(a_empty + a_wild + a_lit, b_nonend, resolved)
        self.push(a_end, b_end, resolved)
        self.push(a_wild, b_wild + b_lit, resolved)
        self.push(a_lit, b_wild, resolved)
        small, big = (ga, gb) if len(ga) <= len(gb) else (gb, ga)
        for token in small:
            if token in big:
                self.push(ga[token], gb[token], resolved)


def _group(items: list[Item], q: int) -> dict[Cls, list[Item]]:
    groups: dict[Cls, list[Item]] = {}
    for item in items:
        vec = item[1]
        k = vec[q] if q < len(vec) else DONE
        group = groups.get(k)
        if group is None:
            groups[k] = [item]
        else:
            group.append(item)
    return groups


def _best_position(a: list[Item], b: list[Item], resolved: frozenset[int]) -> int | None:
    """The unresolved position with the fewest compatible pairs (a x b), if any is not all."""
    width = max(max(len(vec) for _, vec in a), max(len(vec) for _, vec in b))
    best_q: int | None = None
    best = len(a) * len(b)  # a position is only worth splitting on if some pair disagrees there
    for q in range(width):
        if q in resolved:
            continue
        ca = _counts(a, q)
        cb = ca if b is a else _counts(b, q)
        compatible = _compatible_pairs(ca, len(a), cb, len(b))
        if compatible < best:
            best_q, best = q, compatible
    return best_q


def first_colliding_pair(
    subjects: Sequence[str], collide: Collide, limit: int | None = None
) -> tuple[int, int] | None:
    """The smallest ``(i, j)`` with ``i < j``, ``i < limit`` whose subjects collide.

    The same answer as trying each ``j`` for each ``i`` in order (nats-server's loop), which is
    what decides the error text.
    """
    best = (len(subjects) if limit is None else limit, -1)
    first: dict[str, int] = {}
    for j, subject in enumerate(subjects):
        i = first.setdefault(subject, j)
        if i != j:
            best = min(best, (i, j))  # equal strings always collide, whatever their tokens
    tokens = [s.split(".") for s in subjects]
    wild = [i for i, t in enumerate(tokens) if _is_wild(t)]
    literal = [i for i, t in enumerate(tokens) if not _is_wild(t)]
    join = _Join(subjects, collide, best)
    join.push([(i, _wild_vec(tokens[i])) for i in wild], None, frozenset())
    join.push(
        [(i, _literal_vec(tokens[i])) for i in literal],
        [(i, _pattern_vec(tokens[i])) for i in wild],
        frozenset(),
    )
    join.run()
    return None if join.best[1] < 0 else join.best


def any_collision(left: Sequence[str], right: Sequence[str], collide: Collide) -> bool:
    """Does some subject of ``left`` collide with some subject of ``right``?"""
    if not left or not right:
        return False
    if not set(left).isdisjoint(right):
        return True
    subjects = [*left, *right]
    tokens = [s.split(".") for s in subjects]
    lefts = range(len(left))
    rights = range(len(left), len(subjects))

    def side(indexes: range, wild: bool, vec: Callable[[list[str]], Vec]) -> list[Item]:
        return [(i, vec(tokens[i])) for i in indexes if _is_wild(tokens[i]) == wild]

    join = _Join(subjects, collide, _NO_PAIR)
    join.stop_at_first = True
    join.push(side(lefts, True, _wild_vec), side(rights, True, _wild_vec), frozenset())
    join.push(side(lefts, False, _literal_vec), side(rights, True, _pattern_vec), frozenset())
    join.push(side(lefts, True, _pattern_vec), side(rights, False, _literal_vec), frozenset())
    join.run()
    return join.found_any
