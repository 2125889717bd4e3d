"""Nemeses: the faults the chaos harness injects into a running ``ClusterDB``, and their heals.

Each nemesis has ``async start(db, rng) -> action`` (inject) and ``async stop(db, rng) ->
action`` (heal), where ``action`` is ``{"f": "<name>-start" | "<name>-stop", "value": {...}}``,
ready to be recorded in the history as an op of process ``"nemesis"``. Every random choice comes
from the ``rng`` passed in (``random.Random(seed)``), and each ``start`` advances it by exactly
one fixed-size draw (``fork_rng``), so a seed fixes the schedule of faults; the cluster's answers
(who leads, which files exist) are recorded in the action.

* ``kill``: SIGKILL one node, a minority, a majority or the stream leader; stop restarts them.
* ``pause``: SIGSTOP the same kinds of targets; stop sends SIGCONT.
* ``partition``: random halves, the stream leader isolated, or a ring (5+ nodes: every node
  sees only its ring neighbours, each a different majority; 3-4 nodes: a bridge, one pair cut
  and a third node seeing both); stop heals every link.
* ``delay``: latency with jitter on every link; stop removes it.
* ``clock``: skew the wall clocks of a random subset of nodes (libfaketime); stop resets them.
* ``power``: power loss on every node at once (unsynced data lost, see ``ClusterDB.power_loss``);
  the start action includes the restart, stop does nothing.
* ``corrupt``: kill a node never corrupted before, corrupt one of its data files, restart it; at
  most ``(n - 1) // 2`` nodes per run, so a majority always keeps intact files; stop does nothing.

A fault the system or machine cannot take (``clock`` without libfaketime or on nats-server,
``power`` on nats-server) is an action with ``"unsupported"`` in its value, not an error. A node
that does not come back in time is reported in the stop action's ``"errors"``, so the run goes on
and the verdict can mention it.

Must never: touch processes, files or links except through ``ClusterDB``; use a random source
other than the ``rng`` it is given.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any, Protocol

from jepsen_like.contract import CLOCK_NEMESIS
from jepsen_like.db import NODE_READY_TIMEOUT_S, ClusterDB, DBError, UnsupportedFault
from jepsen_like.net import Link

Action = dict[str, Any]

TARGET_MODES = ("one", "minority", "majority", "leader")
PARTITION_MODES = ("halves", "leader", "ring")
DELAY_MEANS_MS = (10.0, 50.0, 100.0, 200.0)
DELAY_JITTER_FRACTION = 0.5
CLOCK_OFFSETS_S = (-60.0, -5.0, -1.0, 1.0, 5.0, 60.0)
RING_MIN_NODES = 5
RNG_FORK_BITS = 64
RESTART_TIMEOUT_S = NODE_READY_TIMEOUT_S


class Nemesis(Protocol):
    name: str

    async def start(self, db: ClusterDB, rng: random.Random) -> Action: ...

    async def stop(self, db: ClusterDB, rng: random.Random) -> Action: ...


def _action(f: str, **value: Any) -> Action:
    return {"f": f, "value": value}


def fork_rng(rng: random.Random) -> random.Random:
    """A child generator seeded by one fixed-size draw: whatever the cluster's state makes an
    action draw (how many nodes are alive, how many files exist), the caller's ``rng`` advances
    by the same amount, so later actions do not depend on earlier answers."""
    return random.Random(rng.getrandbits(RNG_FORK_BITS))


def minority_size(n: int) -> int:
    return (n - 1) // 2


def majority_size(n: int) -> int:
    return n // 2 + 1


def links_between(groups: Sequence[Sequence[str]]) -> list[Link]:
    """Every directed link from a node of one group to a node of another (a full cut)."""
    links: list[Link] = []
    for i, group in enumerate(groups):
        for j, other in enumerate(groups):
            if i != j:
                links.extend((a, b) for a in group for b in other)
    return sorted(links)


def ring_cut(order: Sequence[str]) -> list[Link]:
    """Links to block so that, around the ring ``order``, each node keeps only the nodes within
    ``majority // 2`` steps: with itself at least a majority, never everyone (5+ nodes), and a
    different set for each node."""
    n = len(order)
    reach = majority_size(n) // 2
    cut: list[Link] = []
    for i, a in enumerate(order):
        for j, b in enumerate(order):
            distance = min((i - j) % n, (j - i) % n)
            if a != b and distance > reach:
                cut.append((a, b))
    return sorted(cut)


async def choose_targets(
    db: ClusterDB, rng: random.Random, stream: str | None, mode: str | None = None
) -> tuple[str, list[str]]:
    """(mode, sorted target names) for kill and pause, among nodes that are alive and running."""
    live = sorted(name for name in db.names if db.alive(name) and not db.paused(name))
    chosen = mode if mode is not None else rng.choice(TARGET_MODES)
    if not live:
        return chosen, []
    n = len(db.names)
    if chosen == "leader":
        leader = await db.stream_leader(stream) if stream is not None else None
        if leader in live:
            return chosen, [str(leader)]
        chosen = "one"
    count = {
        "one": 1,
        "minority": max(1, minority_size(n)),
        "majority": majority_size(n),
    }[chosen]
    return chosen, sorted(rng.sample(live, min(count, len(live))))


async def restart_nodes(db: ClusterDB, names: Sequence[str]) -> dict[str, str]:
    """Restart the named dead nodes concurrently; {name: error} for those that did not come back.

    While links are blocked a restarted node may be unable to join, so then it only has to come
    up (speak the protocol), not be healthy."""
    wait_healthy = not db.proxies.blocked

    async def one(name: str) -> tuple[str, str | None]:
        try:
            await db.restart(name, wait_healthy=wait_healthy, timeout_s=RESTART_TIMEOUT_S)
        except DBError as exc:
            return name, str(exc).splitlines()[0]
        return name, None

    results = await asyncio.gather(*(one(name) for name in names))
    return {name: error for name, error in results if error is not None}


class KillNemesis:
    name = "kill"

    def __init__(self, stream: str | None = None) -> None:
        self.stream = stream

    async def start(self, db: ClusterDB, rng: random.Random) -> Action:
        rng = fork_rng(rng)
        mode, targets = await choose_targets(db, rng, self.stream)
        for name in targets:
            db.kill(name)
        return _action("kill-start", mode=mode, nodes=targets)

    async def stop(self, db: ClusterDB, rng: random.Random) -> Action:
        dead = [name for name in db.names if not db.alive(name)]
        errors = await restart_nodes(db, dead)
        return _action("kill-stop", nodes=dead, errors=errors)


class PauseNemesis:
    name = "pause"

    def __init__(self, stream: str | None = None) -> None:
        self.stream = stream

    async def start(self, db: ClusterDB, rng: random.Random) -> Action:
        rng = fork_rng(rng)
        mode, targets = await choose_targets(db, rng, self.stream)
        for name in targets:
            db.pause(name)
        return _action("pause-start", mode=mode, nodes=targets)

    async def stop(self, db: ClusterDB, rng: random.Random) -> Action:
        paused = [name for name in db.names if db.paused(name)]
        for name in paused:
            db.resume(name)
        return _action("pause-stop", nodes=paused)


class PartitionNemesis:
    name = "partition"

    def __init__(self, stream: str | None = None) -> None:
        self.stream = stream

    async def start(self, db: ClusterDB, rng: random.Random) -> Action:
        rng = fork_rng(rng)
        mode = rng.choice(PARTITION_MODES)
        names = list(db.names)
        if mode == "leader":
            leader = await db.stream_leader(self.stream) if self.stream is not None else None
            isolated = leader if leader is not None else rng.choice(names)
            groups = [[isolated], sorted(n for n in names if n != isolated)]
            links = links_between(groups)
            db.proxies.block(links)
            return _action("partition-start", mode=mode, groups=groups, leader=leader)
        rng.shuffle(names)
        if mode == "halves":
            half = len(names) // 2
            groups = [sorted(names[:half]), sorted(names[half:])]
            links = links_between(groups)
            db.proxies.block(links)
            return _action("partition-start", mode=mode, groups=groups)
        if len(names) >= RING_MIN_NODES:
            links = ring_cut(names)
            db.proxies.block(links)
            return _action("partition-start", mode="ring", order=names, cut=_pairs(links))
        if len(names) < 3:
            # no third node to bridge through: a plain cut between the two
            groups = [sorted(names[:1]), sorted(names[1:])]
            links = links_between(groups)
            db.proxies.block(links)
            return _action("partition-start", mode="halves", groups=groups)
        a, b, bridge = names[0], names[1], names[2]
        links = sorted([(a, b), (b, a)])
        db.proxies.block(links)
        return _action("partition-start", mode="bridge", cut=_pairs(links), bridge=bridge)

    async def stop(self, db: ClusterDB, rng: random.Random) -> Action:
        healed = sorted(db.proxies.blocked)
        db.proxies.unblock_all()
        return _action("partition-stop", healed=_pairs(healed))


def _pairs(links: Sequence[Link]) -> list[list[str]]:
    return [[a, b] for a, b in links]


class DelayNemesis:
    name = "delay"

    async def start(self, db: ClusterDB, rng: random.Random) -> Action:
        rng = fork_rng(rng)
        mean = rng.choice(DELAY_MEANS_MS)
        jitter = mean * DELAY_JITTER_FRACTION
        db.proxies.set_delay(mean, jitter)
        return _action("delay-start", mean_ms=mean, jitter_ms=jitter)

    async def stop(self, db: ClusterDB, rng: random.Random) -> Action:
        db.proxies.set_delay(0.0, 0.0)
        return _action("delay-stop")


class ClockNemesis:
    name = CLOCK_NEMESIS  # in run.json's nemeses, it tells the checks node clocks were skewed

    async def start(self, db: ClusterDB, rng: random.Random) -> Action:
        rng = fork_rng(rng)
        if not db.clock_supported:
            return _action("clock-start", unsupported=f"no libfaketime for {db.system} here")
        targets = sorted(rng.sample(db.names, rng.randint(1, len(db.names))))
        offsets = {name: rng.choice(CLOCK_OFFSETS_S) for name in targets}
        for name, seconds in offsets.items():
            db.set_clock_offset(name, seconds)
        return _action("clock-start", offsets_s=offsets)

    async def stop(self, db: ClusterDB, rng: random.Random) -> Action:
        if not db.clock_supported:
            return _action("clock-stop", unsupported=f"no libfaketime for {db.system} here")
        for name in db.names:
            db.set_clock_offset(name, 0.0)
        return _action("clock-stop", nodes=list(db.names))


class PowerNemesis:
    name = "power"

    async def start(self, db: ClusterDB, rng: random.Random) -> Action:
        rng = fork_rng(rng)
        try:
            result = await db.power_loss()
        except UnsupportedFault as exc:
            return _action("power-start", unsupported=str(exc))
        except DBError as exc:
            return _action("power-start", errors={"cluster": str(exc).splitlines()[0]})
        return _action("power-start", **result)

    async def stop(self, db: ClusterDB, rng: random.Random) -> Action:
        return _action("power-stop")


class CorruptNemesis:
    name = "corrupt"

    def __init__(self) -> None:
        self.corrupted: list[str] = []

    async def start(self, db: ClusterDB, rng: random.Random) -> Action:
        rng = fork_rng(rng)
        budget = minority_size(len(db.names))
        candidates = sorted(n for n in db.names if n not in self.corrupted)
        if len(self.corrupted) >= budget or not candidates:
            return _action(
                "corrupt-start", skipped=f"{len(self.corrupted)} of at most {budget} corrupted"
            )
        victim = rng.choice(candidates)
        self.corrupted.append(victim)
        if db.paused(victim):
            db.resume(victim)
        db.kill(victim)
        change = db.corrupt(victim, rng)
        errors = await restart_nodes(db, [victim])
        return _action("corrupt-start", **change, errors=errors)

    async def stop(self, db: ClusterDB, rng: random.Random) -> Action:
        return _action("corrupt-stop")


NEMESES = ("kill", "pause", "partition", "delay", CLOCK_NEMESIS, "power", "corrupt")


def make_nemesis(name: str, stream: str | None = None) -> Nemesis:
    """The nemesis called ``name``; ``stream`` lets the leader-targeting modes find the leader."""
    if name == "kill":
        return KillNemesis(stream)
    if name == "pause":
        return PauseNemesis(stream)
    if name == "partition":
        return PartitionNemesis(stream)
    if name == "delay":
        return DelayNemesis()
    if name == CLOCK_NEMESIS:
        return ClockNemesis()
    if name == "power":
        return PowerNemesis()
    if name == "corrupt":
        return CorruptNemesis()
    raise ValueError(f"unknown nemesis {name!r}; known: {', '.join(NEMESES)}")
