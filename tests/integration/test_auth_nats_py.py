"""nats-py against jetraft with client authentication: a user/password login can use
JetStream; a wrong password is refused with nats-server's Authorization Violation."""

from __future__ import annotations

from pathlib import Path

import nats
import pytest
from nats.errors import Error as NatsError

from tests.servers import HOST, start_jetraft

CONF = """
authorization {
  users: [ { user: app, password: s3cret } ]
}
"""


async def test_user_password_login_uses_jetstream_and_wrong_password_fails(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "auth.conf"
    conf.write_text(CONF)
    with start_jetraft(tmp_path, extra_args=["-c", str(conf)]) as server:
        url = f"nats://{HOST}:{server.port}"
        nc = await nats.connect(url, user="app", password="s3cret", connect_timeout=5)
        try:
            js = nc.jetstream()
            await js.add_stream(name="AUTH", subjects=["auth.>"])
            ack = await js.publish("auth.one", b"hello")
            assert ack.seq == 1
            info = await js.stream_info("AUTH")
            assert info.state.messages == 1
            msg = await js.get_msg("AUTH", 1)
            assert msg.data == b"hello"
        finally:
            await nc.close()
        errors: list[Exception] = []

        async def on_error(e: Exception) -> None:
            errors.append(e)

        with pytest.raises((NatsError, OSError)):
            await nats.connect(
                url,
                user="app",
                password="wrong",
                connect_timeout=2,
                allow_reconnect=False,
                max_reconnect_attempts=0,
                error_cb=on_error,
            )
        assert any("authorization violation" in str(e).lower() for e in errors), errors
