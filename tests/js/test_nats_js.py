"""nats.js 3.x (``@nats-io/transport-node``, ``/jetstream``, ``/kv``, ``/obj``) against nats-server
and jetraft: ``smoke.mjs`` creates a stream, publishes, and reads back with MSG.GET and Direct
Get; ``consumers.mjs`` reads with consumers; ``kv_obj.mjs`` uses a bucket and an object store.

Skipped unless ``node`` is on PATH and ``npm ci --prefix tests/js`` has installed the pinned
packages into ``tests/js/node_modules``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import ServerProc, start_jetraft, start_nats_server

pytestmark = pytest.mark.integration

JS_DIR = Path(__file__).resolve().parent
SCRIPT = JS_DIR / "smoke.mjs"
NODE_RUN_TIMEOUT_S = 60.0
STARTERS: dict[str, Callable[[Path], ServerProc]] = {
    "nats": start_nats_server,
    "jetraft": start_jetraft,
}


@pytest.fixture
def node() -> str:
    """The node binary; skips the test (before any server starts) when node or the packages
    are missing."""
    path = shutil.which("node")
    if path is None:
        pytest.skip("node is not installed")
    if not (JS_DIR / "node_modules" / "@nats-io" / "jetstream").is_dir():
        pytest.skip("tests/js/node_modules missing: run `npm ci --prefix tests/js`")
    return path


@pytest.fixture(params=sorted(STARTERS))
def server(node: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProc]:
    proc = STARTERS[request.param](tmp_path)
    try:
        yield proc
    finally:
        proc.stop()


def _run_script(node: str, url: str, script: Path = SCRIPT) -> dict[str, Any]:
    """Run one of the scripts against ``url``; its JSON output."""
    done = subprocess.run(
        [node, str(script), url],
        capture_output=True,
        text=True,
        timeout=NODE_RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _std_headers(msg: dict[str, Any]) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = msg["headers"]
    return {k: v for k, v in headers.items() if k != "Nats-Time-Stamp"}


def test_nats_js_stream_publish_and_get(node: str, server: ServerProc) -> None:
    out = _run_script(node, server.url)

    assert out["created"] == {"name": "JSSMOKE", "allow_direct": True, "storage": "file"}
    assert out["acks"] == [
        {"stream": "JSSMOKE", "seq": seq, "duplicate": False} for seq in (1, 2, 3)
    ]

    msg_get = out["msg_get"]
    assert (msg_get["subject"], msg_get["seq"], msg_get["data"]) == ("smoke.b", 2, "two")
    assert msg_get["has_time"] is True
    last = out["msg_get_last"]
    assert (last["subject"], last["seq"], last["data"]) == ("smoke.a", 3, "three")

    direct_seq = out["direct_seq"]
    assert (direct_seq["subject"], direct_seq["seq"], direct_seq["data"]) == ("smoke.a", 1, "one")
    assert direct_seq["has_time"] is True
    assert _std_headers(direct_seq) == {
        "Foo": ["bar"],
        "Nats-Stream": ["JSSMOKE"],
        "Nats-Subject": ["smoke.a"],
        "Nats-Sequence": ["1"],
    }
    assert list(direct_seq["headers"]) == [
        "Foo",
        "Nats-Stream",
        "Nats-Subject",
        "Nats-Sequence",
        "Nats-Time-Stamp",
    ]
    direct_last = out["direct_last"]
    assert (direct_last["seq"], direct_last["data"]) == (3, "three")
    assert out["direct_missing"] is None

    state = out["state"]
    assert (state["messages"], state["first_seq"], state["last_seq"]) == (3, 1, 3)
    assert state["num_subjects"] == 2


CONSUMERS_SCRIPT = JS_DIR / "consumers.mjs"


def test_nats_js_consumers(node: str, server: ServerProc) -> None:
    """consume(), fetch() with ackAck, and an ordered consumer, as nats.js drives them."""
    out = _run_script(node, server.url, CONSUMERS_SCRIPT)
    assert [(m["seq"], m["data"]) for m in out["consumed"]] == [
        (s, f"m{s - 1}") for s in range(1, 7)
    ]
    fetched = [m["seq"] for m in out["fetched"]]
    # consume() may have pulled 7 and 8 ahead into its buffer; fetch() continues after them
    assert fetched and fetched == list(range(fetched[0], 11)) and fetched[0] >= 7
    assert [m["seq"] for m in out["ordered"]] == [2, 4, 6, 8, 10]
    assert all(m["subject"] == "cons.odd" for m in out["ordered"])
    info = out["info"]
    assert info["delivered"] == 10 and info["num_pending"] == 0
    assert info["ack_floor"] == (10 if fetched[0] == 7 else 6)
    assert info["num_ack_pending"] == fetched[0] - 7


KV_OBJ_SCRIPT = JS_DIR / "kv_obj.mjs"


def test_nats_js_key_value_and_object_store(node: str, server: ServerProc) -> None:
    """@nats-io/kv keys/history/watch/purgeDeletes and @nats-io/obj put/get/list/info/delete."""
    out = _run_script(node, server.url, KV_OBJ_SCRIPT)
    kv = out["kv"]
    assert kv["keys"] == ["a"]  # b was deleted
    assert [(e["value"], e["revision"]) for e in kv["history"]] == [("1", 1), ("3", 3)]
    assert [(e["key"], e["operation"], e["revision"]) for e in kv["watched"]] == [
        ("a", "PUT", 3),
        ("b", "DEL", 4),
        ("c", "PUT", 5),
        ("c", "DEL", 6),
    ]
    assert kv["purged"] == 4 and kv["a"] == "3"
    assert out["obj"] == {
        "same": True,
        "listed": ["blob"],
        "size": 300_000,
        "chunks": 3,
        "deleted": True,
    }
