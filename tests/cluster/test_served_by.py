"""A Direct Get that asks (``Jetraft-Served-By`` request header) learns which replica answered;
one that does not ask gets nats-server's reply unchanged."""

from __future__ import annotations

from pathlib import Path

import nats

from tests.cluster.inprocess import InProcessCluster, wait_for


async def test_direct_get_names_the_replica_only_when_asked(tmp_path: Path) -> None:
    c = InProcessCluster(tmp_path, 3)
    await c.start()
    try:
        nc = await nats.connect(c.urls[0])
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="S", subjects=["s"], num_replicas=3, allow_direct=True)
        await js.publish("s", b"x")

        def all_serve() -> bool:
            return all(
                (h := c.replica(i, "S")) is not None and h.direct.serving("S") for i in c.live()
            )

        await wait_for(all_serve, "every replica to answer Direct Get")
        ask = {"Jetraft-Served-By": "1"}
        seen = set()
        for _ in range(60):
            m = await nc.request("$JS.API.DIRECT.GET.S", b'{"seq":1}', headers=ask)
            assert m.headers is not None and m.headers["Nats-Sequence"] == "1"
            seen.add(m.headers["Jetraft-Served-By"])
        assert seen == {"n0", "n1", "n2"}
        missing = await nc.request("$JS.API.DIRECT.GET.S", b'{"seq":9}', headers=ask)
        assert missing.headers is not None and missing.headers["Status"] == "404"
        assert missing.headers["Jetraft-Served-By"] in seen
        plain = await nc.request("$JS.API.DIRECT.GET.S", b'{"seq":1}')
        assert plain.headers is not None and "Jetraft-Served-By" not in plain.headers
        await nc.close()
    finally:
        await c.stop()
