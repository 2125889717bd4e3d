"""In-memory indexes over a stream's live messages, so that no query scans the stream.

Owns: the set of live sequences (sorted), per-subject sorted sequence lists, a token trie of the
distinct subjects (wildcard filters walk subjects, never messages), and per-sequence metadata
(subject, timestamp, accounting size, content fingerprint for the digest). ``engine/stream.py``
keeps it in step with the store on every apply and answers every ``StreamView`` query from it.
``add`` runs once per published message and is kept to a few O(1) steps.

Timestamps are non-decreasing in sequence order (``Stream.apply`` assigns ts = max(entry ts, last
ts)), which is what lets ``seq_for_time`` bisect the sequence list.

Must never: touch the store, read clocks, or decide what to remove (the stream does).
"""

from __future__ import annotations

import sys
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import Final

from engine.meta_columns import MetaColumns, MetaTuple
from engine.seqlist import SeqList
from protocol.subjects import FULL_WILDCARD, PARTIAL_WILDCARD, has_wildcard, subject_matches

# A subject's sequences live in a plain list (an append is the cheapest possible add, and removing
# its head moves at most this many pointers: under a microsecond) until it grows past this, then
# in a SeqList (cheap removal from the head at any size).
SUBJECT_LIST_SMALL_MAX: Final = 4096
# Wildcard next/last lookups first walk this many neighbouring messages before falling back to
# one bisect per matching subject: cheap when the filter matches most subjects.
WILDCARD_PROBE_MSGS: Final = 16

_SubjectSeqs = list[int] | SeqList


def _ceiling(seqs: _SubjectSeqs, value: int) -> int | None:
    """The lowest seq >= ``value``."""
    if isinstance(seqs, SeqList):
        return seqs.ceiling(value)
    i = bisect_left(seqs, value)
    return seqs[i] if i < len(seqs) else None


def _floor(seqs: _SubjectSeqs, value: int) -> int | None:
    """The highest seq <= ``value``."""
    if isinstance(seqs, SeqList):
        return seqs.floor(value)
    i = bisect_right(seqs, value)
    return seqs[i - 1] if i > 0 else None


def _count_from(seqs: _SubjectSeqs, value: int) -> int:
    """How many seqs are >= ``value``."""
    if isinstance(seqs, SeqList):
        return seqs.count_from(value)
    return len(seqs) - bisect_left(seqs, value)


class MsgMeta:
    """What the index knows of one live message (payloads stay in the store), as ``get`` and
    ``remove`` answer it: built on demand from the index's columns."""

    __slots__ = ("digest", "size_bytes", "subject", "ts_ns")

    def __init__(self, subject: str, ts_ns: int, size_bytes: int, digest: int) -> None:
        self.subject = subject
        self.ts_ns = ts_ns
        self.size_bytes = size_bytes
        # the content fingerprint the stream digest is derived from (engine/digest.py)
        self.digest = digest

    def __repr__(self) -> str:
        return (
            f"MsgMeta(subject={self.subject!r}, ts_ns={self.ts_ns}, "
            f"size_bytes={self.size_bytes}, digest={self.digest})"
        )


class _TrieNode:
    __slots__ = ("children", "subject")

    def __init__(self) -> None:
        self.children: dict[str, _TrieNode] = {}
        self.subject: str | None = None  # set when a live subject ends at this node


class SubjectTrie:
    """Distinct live subjects by token, for wildcard matching without a scan of all subjects."""

    __slots__ = ("_root",)

    def __init__(self) -> None:
        self._root = _TrieNode()

    def insert(self, subject: str) -> None:
        node = self._root
        for token in subject.split("."):
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = _TrieNode()
            node = child
        node.subject = subject

    def remove(self, subject: str) -> None:
        path: list[tuple[_TrieNode, str]] = []
        node = self._root
        for token in subject.split("."):
            child = node.children.get(token)
            if child is None:
                return
            path.append((node, token))
            node = child
        node.subject = None
        for parent, token in reversed(path):
            child = parent.children[token]
            if child.subject is not None or child.children:
                break
            del parent.children[token]

    def clear(self) -> None:
        self._root = _TrieNode()

    def match(self, subject_filter: str) -> Iterator[str]:
        """Live subjects matched by a filter (``*`` one token, trailing ``>`` one or more)."""
        tokens = subject_filter.split(".")
        yield from self._match(self._root, tokens, 0)

    def _match(self, node: _TrieNode, tokens: list[str], i: int) -> Iterator[str]:
        if i == len(tokens):
            if node.subject is not None:
                yield node.subject
            return
        token = tokens[i]
        if token == FULL_WILDCARD and i == len(tokens) - 1:
            for child in node.children.values():
                yield from self._all_below(child)
        elif token == PARTIAL_WILDCARD:
            for child in node.children.values():
                yield from self._match(child, tokens, i + 1)
        else:
            literal_child = node.children.get(token)
            if literal_child is not None:
                yield from self._match(literal_child, tokens, i + 1)

    def _all_below(self, node: _TrieNode) -> Iterator[str]:
        stack = [node]
        while stack:
            current = stack.pop()
            if current.subject is not None:
                yield current.subject
            stack.extend(current.children.values())


def is_match_all(subject_filter: str) -> bool:
    """The empty filter and ">" select every message."""
    return subject_filter in ("", FULL_WILDCARD)


def _msg_meta(meta: MetaTuple) -> MsgMeta:
    subject, ts_ns, size_bytes, digest = meta
    return MsgMeta(subject, ts_ns, size_bytes, digest)


class StreamIndex:
    """Live sequences, per-subject sequences, subject trie and per-message metadata."""

    __slots__ = ("_meta", "_seqs", "_subjects", "_trie", "bytes_total")

    def __init__(self) -> None:
        self._seqs = SeqList()
        self._subjects: dict[str, _SubjectSeqs] = {}
        # what is known of each live message, in columns (engine/meta_columns.py)
        self._meta = MetaColumns()
        self._trie = SubjectTrie()
        self.bytes_total = 0

    # ------------------------------------------------------------------ maintenance

    def add(self, seq: int, subject: str, ts_ns: int, size_bytes: int, digest: int) -> None:
        """Index a newly stored message; sequences arrive in increasing order. (Once per
        published message: written for speed, every step O(1) in the common case.)"""
        self._seqs.append(seq)  # AssertionError unless above every live seq
        subject = sys.intern(subject)  # one str object per distinct subject, however many msgs
        per_subject = self._subjects.get(subject)
        if per_subject is None:
            self._subjects[subject] = [seq]
            self._trie.insert(subject)
        elif isinstance(per_subject, list):
            per_subject.append(seq)
            if len(per_subject) > SUBJECT_LIST_SMALL_MAX:
                self._subjects[subject] = SeqList(per_subject)
        else:
            per_subject.append(seq)
        self._meta.put(seq, subject, ts_ns, size_bytes, digest)
        self.bytes_total += size_bytes

    def remove(self, seq: int) -> MsgMeta | None:
        """Forget a live message; None when it is not live."""
        found = self._meta.pop(seq)
        if found is None:
            return None
        meta = _msg_meta(found)
        self._seqs.remove(seq)
        per_subject = self._subjects[meta.subject]
        if isinstance(per_subject, list):
            del per_subject[bisect_left(per_subject, seq)]
        else:
            per_subject.remove(seq)
        if not per_subject:
            del self._subjects[meta.subject]
            self._trie.remove(meta.subject)
        self.bytes_total -= meta.size_bytes
        return meta

    def clear(self) -> None:
        self._seqs.clear()
        self._subjects = {}
        self._meta.clear()
        self._trie.clear()
        self.bytes_total = 0

    # ------------------------------------------------------------------ plain lookups

    def __len__(self) -> int:
        return len(self._seqs)

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and seq in self._meta

    def get(self, seq: int) -> MsgMeta | None:
        found = self._meta.get(seq)
        return None if found is None else _msg_meta(found)

    @property
    def first_seq(self) -> int:
        """Lowest live sequence, 0 when empty."""
        return self._seqs.first

    @property
    def last_live_seq(self) -> int:
        """Highest live sequence, 0 when empty."""
        return self._seqs.last

    @property
    def num_subjects(self) -> int:
        return len(self._subjects)

    def seqs(self, minimum: int | None = None, maximum: int | None = None) -> Iterator[int]:
        """Live sequences in [minimum, maximum], ascending (a lazy view: copy before mutating)."""
        return self._seqs.irange(minimum, maximum)

    def subject_count(self, subject: str) -> int:
        seqs = self._subjects.get(subject)
        return len(seqs) if seqs is not None else 0

    def subject_first_seq(self, subject: str) -> int:
        seqs = self._subjects.get(subject)
        if not seqs:
            return 0
        return seqs.first if isinstance(seqs, SeqList) else seqs[0]

    def subject_seqs(self, subject: str) -> list[int]:
        seqs = self._subjects.get(subject)
        return list(seqs) if seqs is not None else []

    def matching_subjects(self, subject_filter: str) -> list[str]:
        if is_match_all(subject_filter):
            return list(self._subjects)
        if not has_wildcard(subject_filter):
            return [subject_filter] if subject_filter in self._subjects else []
        return list(self._trie.match(subject_filter))

    # ------------------------------------------------------------------ queries

    def next_seq(self, start_seq: int, subject_filter: str = "") -> int | None:
        """First live seq >= start_seq matching the filter."""
        if is_match_all(subject_filter):
            return self._seqs.ceiling(start_seq)
        if not has_wildcard(subject_filter):
            seqs = self._subjects.get(subject_filter)
            return None if seqs is None else _ceiling(seqs, start_seq)
        probed, meta = 0, self._meta
        for seq in self._seqs.irange(minimum=start_seq):
            if subject_matches(subject_filter, meta.live_subject(seq)):
                return seq
            probed += 1
            if probed >= WILDCARD_PROBE_MSGS:
                break
        else:
            return None
        best: int | None = None
        for subject in self._trie.match(subject_filter):
            found = _ceiling(self._subjects[subject], start_seq)
            if found is not None and (best is None or found < best):
                best = found
        return best

    def last_seq(self, subject_filter: str, ceiling: int | None = None) -> int | None:
        """Last live seq <= ceiling (None = no ceiling) matching the filter."""
        if ceiling is None:
            ceiling = self.last_live_seq
        if is_match_all(subject_filter):
            return self._seqs.floor(ceiling)
        if not has_wildcard(subject_filter):
            seqs = self._subjects.get(subject_filter)
            return None if seqs is None else _floor(seqs, ceiling)
        probed, meta = 0, self._meta
        for seq in self._seqs.irange(maximum=ceiling, reverse=True):
            if subject_matches(subject_filter, meta.live_subject(seq)):
                return seq
            probed += 1
            if probed >= WILDCARD_PROBE_MSGS:
                break
        else:
            return None
        best: int | None = None
        for subject in self._trie.match(subject_filter):
            found = _floor(self._subjects[subject], ceiling)
            if found is not None and (best is None or found > best):
                best = found
        return best

    def count(self, start_seq: int, subject_filter: str = "") -> int:
        """Number of live messages with seq >= start_seq matching the filter."""
        if is_match_all(subject_filter):
            return self._seqs.count_from(start_seq)
        if not has_wildcard(subject_filter):
            seqs = self._subjects.get(subject_filter)
            return 0 if seqs is None else _count_from(seqs, start_seq)
        total = 0
        for subject in self._trie.match(subject_filter):
            total += _count_from(self._subjects[subject], start_seq)
        return total

    def seq_for_time(self, ts_ns: int) -> int | None:
        """First live seq whose ts >= ts_ns (timestamps are non-decreasing in seq)."""
        meta = self._meta
        chunks = self._seqs.chunks()
        # the first chunk whose last message is at or after ts_ns holds the answer
        lo, hi = 0, len(chunks)
        while lo < hi:
            mid = (lo + hi) // 2
            if meta.ts(chunks[mid][-1]) < ts_ns:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(chunks):
            return None
        chunk = chunks[lo]
        lo, hi = 0, len(chunk) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if meta.ts(chunk[mid]) < ts_ns:
                lo = mid + 1
            else:
                hi = mid
        return chunk[lo]

    def multi_last(self, filters: list[str], ceiling: int, limit: int) -> list[int] | None:
        """Last seq <= ceiling of every distinct subject matching any filter, ascending;
        None as soon as more than ``limit`` (> 0) subjects have one."""
        found: set[int] = set()
        seen_subjects: set[str] = set()
        for subject_filter in filters:
            for subject in self.matching_subjects(subject_filter):
                if subject in seen_subjects:
                    continue
                seen_subjects.add(subject)
                last = _floor(self._subjects[subject], ceiling)
                if last is None:
                    continue
                found.add(last)
                if 0 < limit < len(found):
                    return None
        return sorted(found)

    def subjects_state(self, subject_filter: str) -> dict[str, int]:
        """Message count per live subject matching the filter."""
        subjects = self._subjects
        return {s: len(subjects[s]) for s in self.matching_subjects(subject_filter)}
