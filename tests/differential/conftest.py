"""Fixtures for the differential suite: one reference nats-server and one candidate server.

The candidate is jetraft by default. `JETRAFT_DIFF_AGAINST=nats` runs a second nats-server
instead, which must make every scenario pass: that proves the masking hides only what really
differs between two servers and that each scenario is deterministic.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.differential.diff_harness import DIFF_AGAINST_ENV, Differ
from tests.servers import ServerProc, start_jetraft, start_nats_server

CANDIDATES = ("jetraft", "nats")

_uids = itertools.count(1)


def candidate_kind() -> str:
    kind = os.environ.get(DIFF_AGAINST_ENV, "jetraft")
    if kind not in CANDIDATES:
        raise pytest.UsageError(f"{DIFF_AGAINST_ENV} must be one of {CANDIDATES}, not {kind!r}")
    return kind


def candidate_side() -> str:
    """The candidate's name in transcripts and diffs."""
    return "jetraft" if candidate_kind() == "jetraft" else "nats-b"


def start_candidate(tmp_path: Path, name: str) -> ServerProc:
    if candidate_kind() == "nats":
        return start_nats_server(tmp_path, name=name)
    return start_jetraft(tmp_path, name=name)


@pytest.fixture(scope="session")
def oracle_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    """The reference nats-server shared by the whole session."""
    server = start_nats_server(tmp_path_factory.mktemp("oracle"), name="oracle")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def candidate_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    """The server under test (jetraft, or a second nats-server), shared by the session."""
    server = start_candidate(tmp_path_factory.mktemp("candidate"), "candidate")
    yield server
    server.stop()


@pytest.fixture
def diff(oracle_server: ServerProc, candidate_server: ServerProc) -> Differ:
    """A Differ on the session's shared servers, with a fresh unique name prefix."""
    return Differ(
        oracle_server.port, candidate_server.port, candidate_side(), f"D{next(_uids):03d}"
    )


@contextlib.contextmanager
def server_pair(
    start_oracle: Callable[[], ServerProc], start_other: Callable[[], ServerProc]
) -> Iterator[tuple[ServerProc, ServerProc]]:
    """Two servers started for one test (the oracle is stopped if the other fails to start),
    both stopped afterwards."""
    oracle = start_oracle()
    try:
        candidate = start_other()
    except BaseException:
        oracle.stop()
        raise
    try:
        yield oracle, candidate
    finally:
        candidate.stop()
        oracle.stop()


@pytest.fixture
def fresh_diff(tmp_path: Path) -> Iterator[Differ]:
    """A Differ on servers started for this test alone (for account-wide counters)."""
    with server_pair(
        lambda: start_nats_server(tmp_path / "oracle", name="oracle"),
        lambda: start_candidate(tmp_path / "candidate", "candidate"),
    ) as (oracle, candidate):
        yield Differ(oracle.port, candidate.port, candidate_side(), "F001")


# --- nats-server with a system account ------------------------------------------------------------

SYS_USER = "sys"  # nats-server's system account user (password the same)
ANONYMOUS_USER = "g"  # the user clients without credentials get (no_auth_user)


def _users(*names: str) -> str:
    """An authorization block with these users (password = name) and ANONYMOUS_USER."""
    users = ", ".join(f"{{user: {n}, password: {n}}}" for n in (ANONYMOUS_USER, *names))
    return f"authorization {{ users [{users}] }}\nno_auth_user: {ANONYMOUS_USER}\n"


def _config(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "system.conf"
    path.write_text(text)
    return path


def start_with_system(tmp_path: Path, name: str) -> ServerProc:
    """nats-server (JetStream on) with a system account (user ``SYS_USER``) beside the global
    account, which anonymous clients get (ANONYMOUS_USER), as every jetraft client does."""
    conf = _config(
        tmp_path / name,
        f"accounts {{ SYS {{ users [{{user: {SYS_USER}, password: {SYS_USER}}}] }} }}\n"
        f"system_account: SYS\n{_users()}",
    )
    return start_nats_server(tmp_path / name, name=name, extra_args=["-c", str(conf)])


def start_jetraft_with_users(tmp_path: Path, name: str) -> ServerProc:
    """jetraft with the same users, all in its one account: ANONYMOUS_USER and ``SYS_USER``,
    who is an ordinary user there."""
    conf = _config(tmp_path / name, _users(SYS_USER))
    return start_jetraft(tmp_path / name, name=name, extra_args=["-c", str(conf)])


def system_url(server: ServerProc) -> str:
    """A client URL for ``server`` as ``SYS_USER`` (nats-server's system account user)."""
    return f"nats://{SYS_USER}:{SYS_USER}@127.0.0.1:{server.port}"


@pytest.fixture
def system_pair(tmp_path: Path) -> Iterator[tuple[ServerProc, ServerProc]]:
    """nats-server with a system account, and the candidate with the same users (jetraft; or
    the same nats-server setup when the suite runs nats-server against itself)."""

    def start_other() -> ServerProc:
        if candidate_kind() == "nats":
            return start_with_system(tmp_path, "candidate")
        return start_jetraft_with_users(tmp_path, "candidate")

    with server_pair(lambda: start_with_system(tmp_path, "oracle"), start_other) as pair:
        yield pair
