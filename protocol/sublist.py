"""A subscription index: which subscribers does a published subject reach?

Owns matching with nats-server's sublist semantics: ``*`` matches one token, ``>`` one or more
trailing tokens, a ``*``/``>`` token in a *published* subject is matched literally, and a
published subject with an empty token matches nothing. Literal subscriptions live in a dict
(one lookup), wildcard ones in a token trie (``matchLevel``); queue subscribers are grouped by
queue name across all matching nodes, as ``addNodeToResults`` does. Results are cached per
subject because the publish path calls :meth:`Sublist.match` for every message; the cache is
invalidated precisely for literal changes and wholesale for wildcard changes.

Must never: choose a queue member (the caller decides, it knows about routes and weights), or
hand out a cached result that a later insert/remove mutates. Results are shared: callers must
not mutate them.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Generic, TypeVar

T = TypeVar("T")

MATCH_CACHE_ENTRIES_MAX = 4096
_PWC = "*"
_FWC = ">"


class MatchResult(Generic[T]):
    """Subscribers reached by one subject: plain ones, and queue members by queue name."""

    __slots__ = ("plain", "queues")

    def __init__(self, plain: list[T], queues: dict[str, list[T]]) -> None:
        self.plain = plain
        self.queues = queues

    def __bool__(self) -> bool:
        return bool(self.plain) or bool(self.queues)

    def __repr__(self) -> str:
        return f"MatchResult(plain={self.plain!r}, queues={self.queues!r})"


class _Subs(Generic[T]):
    """Subscribers on one subject: identity-keyed, insertion-ordered."""

    __slots__ = ("plain", "queues")

    def __init__(self) -> None:
        self.plain: dict[int, T] = {}
        self.queues: dict[str, dict[int, T]] = {}

    def add(self, queue: str | None, sub: T) -> bool:
        """True if ``sub`` was not there yet."""
        members = self.plain if queue is None else self.queues.setdefault(queue, {})
        key = id(sub)
        if key in members:
            return False
        members[key] = sub
        return True

    def discard(self, queue: str | None, sub: T) -> bool:
        if queue is None:
            return self.plain.pop(id(sub), None) is not None
        members = self.queues.get(queue)
        if members is None or members.pop(id(sub), None) is None:
            return False
        if not members:
            del self.queues[queue]
        return True

    def empty(self) -> bool:
        return not self.plain and not self.queues

    def add_to(self, plain: list[T], queues: dict[str, list[T]]) -> None:
        plain.extend(self.plain.values())
        for name, members in self.queues.items():
            found = queues.get(name)
            if found is None:
                queues[name] = list(members.values())
            else:
                found.extend(members.values())


def _members(subs: _Subs[T]) -> Iterator[T]:
    yield from subs.plain.values()
    for members in subs.queues.values():
        yield from members.values()


class _Node(Generic[T]):
    __slots__ = ("next", "subs")

    def __init__(self) -> None:
        self.next: _Level[T] | None = None
        self.subs: _Subs[T] = _Subs()


class _Level(Generic[T]):
    __slots__ = ("fwc", "nodes", "pwc")

    def __init__(self) -> None:
        self.nodes: dict[str, _Node[T]] = {}
        self.pwc: _Node[T] | None = None
        self.fwc: _Node[T] | None = None

    def empty(self) -> bool:
        return not self.nodes and self.pwc is None and self.fwc is None


def _check_subject(subject: str) -> list[str]:
    tokens = subject.split(".")
    if "" in tokens:
        raise ValueError(f"invalid subject {subject!r}: empty token")
    if _FWC in tokens and tokens.index(_FWC) != len(tokens) - 1:
        raise ValueError(f"invalid subject {subject!r}: '>' must be the last token")
    return tokens


def _collect(
    level: _Level[T] | None,
    tokens: list[str],
    start: int,
    plain: list[T],
    queues: dict[str, list[T]],
) -> None:
    pwc: _Node[T] | None = None
    node: _Node[T] | None = None
    for i in range(start, len(tokens)):
        if level is None:
            return
        if level.fwc is not None:
            level.fwc.subs.add_to(plain, queues)
        pwc = level.pwc
        if pwc is not None:
            _collect(pwc.next, tokens, i + 1, plain, queues)
        node = level.nodes.get(tokens[i])
        level = node.next if node is not None else None
    if node is not None:
        node.subs.add_to(plain, queues)
    if pwc is not None:
        pwc.subs.add_to(plain, queues)


def _bounded(cache: dict[str, MatchResult[T]]) -> dict[str, MatchResult[T]]:
    """``cache``, or its newer half once it is full (dropping half at once: deleting the first
    key one at a time makes every next(iter(dict)) walk the deleted slots in front of it)."""
    if len(cache) < MATCH_CACHE_ENTRIES_MAX:
        return cache
    return dict(islice(cache.items(), len(cache) // 2, None))


class Sublist(Generic[T]):
    """Subscriptions by subject (and queue group), with a per-subject match cache."""

    __slots__ = (
        "_cache",
        "_count",
        "_inserts",
        "_literal",
        "_literal_prefixes",
        "_prefix_cache",
        "_removes",
        "_root",
        "_wild_literal_last",
        "_wild_literal_last_by_head",
    )

    def __init__(self) -> None:
        self._literal: dict[str, _Subs[T]] = {}
        self._root: _Level[T] = _Level()
        self._cache: dict[str, MatchResult[T]] = {}
        self._count = 0
        # nats-server's num_inserts / num_removes (monitoring); matches are not counted, which
        # would cost every publish
        self._inserts = 0
        self._removes = 0
        # The prefix cache: one result shared by every subject that differs from another only
        # in its last token. Sound while no subscription can tell two last tokens apart: no
        # literal subscription under that prefix (counted per prefix) and no wildcard pattern
        # ending in a literal token that could reach it. Such patterns are counted by their
        # first token when it is literal (``$SYS.REQ.ACCOUNT.*.CONNS`` concerns only subjects
        # under ``$SYS``), else in one count that turns the prefix cache off for every subject.
        # Reply subjects (``_INBOX.<id>.<n>``, each used once) then cost a dict lookup instead
        # of a trie walk, and do not churn ``_cache``.
        self._prefix_cache: dict[str, MatchResult[T]] = {}
        self._literal_prefixes: dict[str, int] = {}
        self._wild_literal_last = 0
        self._wild_literal_last_by_head: dict[str, int] = {}

    def count(self) -> int:
        return self._count

    def insert(self, subject: str, queue: str | None, sub: T) -> None:
        """Add ``sub``; raises ValueError for a subject nats-server's sublist rejects."""
        tokens = _check_subject(subject)
        literal = _PWC not in tokens and _FWC not in tokens
        if literal:
            subs = self._literal.get(subject)
            if subs is None:
                subs = self._literal[subject] = _Subs()
            self._cache.pop(subject, None)
        else:
            subs = self._trie_node(tokens).subs
            self._cache.clear()
        if subs.add(queue, sub):
            self._count += 1
            self._inserts += 1
            self._prefix_cache.clear()
            if literal:
                prefix = subject.rpartition(".")[0]
                self._literal_prefixes[prefix] = self._literal_prefixes.get(prefix, 0) + 1
            elif tokens[-1] not in (_PWC, _FWC):
                self._count_wild_literal_last(tokens[0], 1)

    def remove(self, subject: str, queue: str | None, sub: T) -> bool:
        """Remove ``sub`` (matched by identity); False if it was not there."""
        tokens = subject.split(".")
        if _PWC not in tokens and _FWC not in tokens:
            subs = self._literal.get(subject)
            if subs is None or not subs.discard(queue, sub):
                return False
            if subs.empty():
                del self._literal[subject]
            self._cache.pop(subject, None)
            prefix = subject.rpartition(".")[0]
            left = self._literal_prefixes[prefix] - 1
            if left:
                self._literal_prefixes[prefix] = left
            else:
                del self._literal_prefixes[prefix]
        else:
            if not self._trie_remove(tokens, queue, sub):
                return False
            self._cache.clear()
            if tokens[-1] not in (_PWC, _FWC):
                self._count_wild_literal_last(tokens[0], -1)
        self._prefix_cache.clear()
        self._count -= 1
        self._removes += 1
        return True

    def _count_wild_literal_last(self, head: str, change: int) -> None:
        if head in (_PWC, _FWC):
            self._wild_literal_last += change
            return
        left = self._wild_literal_last_by_head.get(head, 0) + change
        if left:
            self._wild_literal_last_by_head[head] = left
        else:
            del self._wild_literal_last_by_head[head]

    def match(self, subject: str) -> MatchResult[T]:
        """Everything ``subject`` reaches. The result is cached and shared: do not mutate it."""
        cached = self._cache.get(subject)
        if cached is not None:
            return cached
        dot = subject.rfind(".")
        if 0 < dot < len(subject) - 1 and not self._wild_literal_last:
            prefix = subject[:dot]
            by_head = self._wild_literal_last_by_head
            if prefix not in self._literal_prefixes and (
                not by_head or subject[: subject.find(".")] not in by_head
            ):
                shared = self._prefix_cache.get(prefix)
                if shared is None:
                    shared = self._walk(subject)
                    self._prefix_cache = _bounded(self._prefix_cache)
                    self._prefix_cache[prefix] = shared
                return shared
        result = self._walk(subject)
        self._cache = _bounded(self._cache)
        self._cache[subject] = result
        return result

    def _walk(self, subject: str) -> MatchResult[T]:
        """Everything ``subject`` reaches, looked up in the literal dict and the trie."""
        plain: list[T] = []
        queues: dict[str, list[T]] = {}
        if subject and subject[0] != "." and subject[-1] != "." and ".." not in subject:
            root = self._root
            if not root.empty():
                _collect(root, subject.split("."), 0, plain, queues)
            # nats-server's trie walk reaches the all-literal path last, so exact subscribers
            # come after every wildcard one (delivery order is visible to clients)
            literal = self._literal.get(subject)
            if literal is not None:
                literal.add_to(plain, queues)
        return MatchResult(plain, queues)

    def has_interest(self, subject: str) -> bool:
        return bool(self.match(subject))

    # ----------------------------------------------------------------- inspection

    def cache_count(self) -> int:
        """How many match results are cached (nats-server ``CacheCount``). For monitoring and
        tests: each of the two caches stays within ``MATCH_CACHE_ENTRIES_MAX`` however many
        subjects churn."""
        return len(self._cache) + len(self._prefix_cache)

    def changes(self) -> tuple[int, int]:
        """(inserts, removes) since the sublist was made (nats-server ``num_inserts``,
        ``num_removes``)."""
        return self._inserts, self._removes

    def fanout(self) -> tuple[int, float]:
        """(max, average) fanout over the cached match results, counting each plain subscriber
        and each queue group once, as nats-server's ``SublistStats`` does (0, 0.0 when the cache
        is empty). For monitoring: it walks the cache."""
        results = (*self._cache.values(), *self._prefix_cache.values())
        sizes = [len(r.plain) + len(r.queues) for r in results]
        if not sizes:
            return 0, 0.0
        return max(sizes), sum(sizes) / len(sizes)

    def subscribers(self) -> Iterator[T]:
        """Every subscriber, literal subjects first, then the wildcard trie. For monitoring."""
        for subs in self._literal.values():
            yield from _members(subs)
        levels = [self._root]
        while levels:
            level = levels.pop()
            for node in (*level.nodes.values(), level.pwc, level.fwc):
                if node is not None:
                    yield from _members(node.subs)
                    if node.next is not None:
                        levels.append(node.next)

    def wildcard_nodes(self) -> int:
        """How many trie nodes the wildcard subscriptions occupy. For tests and memory
        inspection: removal prunes the trie, so this is 0 once no wildcard subscription is left
        (nats-server tests pruning with ``numLevels``)."""
        count = 0
        levels = [self._root]
        while levels:
            level = levels.pop()
            for node in (*level.nodes.values(), level.pwc, level.fwc):
                if node is not None:
                    count += 1
                    if node.next is not None:
                        levels.append(node.next)
        return count

    # ----------------------------------------------------------------- trie

    def _trie_node(self, tokens: list[str]) -> _Node[T]:
        """The node for a wildcard subject, created along the way."""
        level = self._root
        node: _Node[T] | None = None
        for token in tokens:
            if token == _PWC:
                node = level.pwc
                if node is None:
                    node = level.pwc = _Node()
            elif token == _FWC:
                node = level.fwc
                if node is None:
                    node = level.fwc = _Node()
            else:
                node = level.nodes.get(token)
                if node is None:
                    node = level.nodes[token] = _Node()
            if node.next is None:
                node.next = _Level()
            level = node.next
        assert node is not None, "a subject has at least one token"
        return node

    def _trie_remove(self, tokens: list[str], queue: str | None, sub: T) -> bool:
        path: list[tuple[_Level[T], str, _Node[T]]] = []
        level: _Level[T] | None = self._root
        node: _Node[T] | None = None
        for token in tokens:
            if level is None:
                return False
            if token == _PWC:
                node = level.pwc
            elif token == _FWC:
                node = level.fwc
            else:
                node = level.nodes.get(token)
            if node is None:
                return False
            path.append((level, token, node))
            level = node.next
        if node is None or not node.subs.discard(queue, sub):
            return False
        # Prune nodes left with no subscribers and no children, bottom up.
        for parent, token, child in reversed(path):
            if not child.subs.empty() or (child.next is not None and not child.next.empty()):
                break
            if token == _PWC:
                parent.pwc = None
            elif token == _FWC:
                parent.fwc = None
            else:
                del parent.nodes[token]
        return True
