"""The consumer half of the JetStream API: ``$JS.API.CONSUMER.*``.

Requests are answered by the node that writes the stream (a single server; in a cluster the
stream's Raft leader, since consumer operations are entries of the stream's log), through the
stream host's ``ConsumerHost``. Checks and shapes are nats-server's (``protocol/consumer_config``);
``MSG.NEXT`` is not a JSON request: its replies are the messages or status messages.

Must never: change consumer state other than through the stream host's proposals.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from cluster.authority import StreamAuthority
from cluster.stream_host import AnyStreamHost
from protocol import api_json
from protocol import consumer_config as CC
from protocol import errors as E
from protocol.api_json import (
    CONSUMER_CREATE_RESPONSE,
    CONSUMER_DELETE_RESPONSE,
    CONSUMER_INFO_RESPONSE,
    CONSUMER_LIST_RESPONSE,
    CONSUMER_NAMES_RESPONSE,
    CONSUMER_PAUSE_RESPONSE,
    CONSUMER_RESET_RESPONSE,
    CONSUMER_STEPDOWN_RESPONSE,
    CONSUMER_UNPIN_RESPONSE,
)
from protocol.consumer_models import (
    ConsumerNamesRequest,
    PauseRequest,
    ResetRequest,
    UnpinRequest,
)
from protocol.errors import ApiError
from protocol.gojson import GoJsonError, unmarshal
from protocol.stream_config import (
    SERVER_API_LEVEL,
    SERVER_LEVEL_KEY,
    SERVER_VERSION,
    SERVER_VERSION_KEY,
    decode_strict,
)
from protocol.timefmt import format_rfc3339nano, parse_rfc3339

NAMES_LIMIT: Final = 1024  # JSApiNamesLimit
LIST_LIMIT: Final = 256  # JSApiListLimit
EPHEMERAL_NAME_CHARS: Final = 8
_NAME_ALPHABET: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_GROUP_NAME: Final = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")  # nats-server validGroupName

Handler = Callable[[str, bytes], Awaitable[dict[str, Any]]]


def ephemeral_name() -> str:
    """A random name for an ephemeral consumer (nats-server: 8 characters of a hash)."""
    raw = os.urandom(EPHEMERAL_NAME_CHARS)
    return "".join(_NAME_ALPHABET[b % len(_NAME_ALPHABET)] for b in raw)


class ConsumerApi:
    def __init__(self, authority: StreamAuthority) -> None:
        self.authority = authority

    def route(self, tokens: list[str]) -> tuple[Handler, str, str, str] | None:
        """(handler, response type, stream, op for ``authority.answers``) for a
        ``$JS.API.CONSUMER`` subject, or None (nats-server stays silent)."""
        n = len(tokens)
        if n < 5:
            return None
        op = tokens[3]
        if op == "CREATE" and n >= 5:

            async def create(stream: str, body: bytes) -> dict[str, Any]:
                return await self._create(tokens, body)

            return create, CONSUMER_CREATE_RESPONSE, tokens[4], "CONSUMER_CREATE"
        if op == "DURABLE" and n == 7 and tokens[4] == "CREATE":

            async def durable(stream: str, body: bytes) -> dict[str, Any]:
                return await self._create(tokens, body)

            return durable, CONSUMER_CREATE_RESPONSE, tokens[5], "CONSUMER_CREATE"
        if op in ("NAMES", "LIST") and n == 5:
            if op == "NAMES":
                return self._names, CONSUMER_NAMES_RESPONSE, tokens[4], "CONSUMER_NAMES"
            return self._list, CONSUMER_LIST_RESPONSE, tokens[4], "CONSUMER_LIST"
        if op in ("INFO", "DELETE", "PAUSE") and n == 6:
            name = tokens[5]

            async def one(stream: str, body: bytes) -> dict[str, Any]:
                if op == "INFO":
                    return self._info(stream, name, body)
                if op == "DELETE":
                    return await self._delete(stream, name, body)
                return await self._pause(stream, name, body)

            types = {
                "INFO": CONSUMER_INFO_RESPONSE,
                "DELETE": CONSUMER_DELETE_RESPONSE,
                "PAUSE": CONSUMER_PAUSE_RESPONSE,
            }
            return one, types[op], tokens[4], "CONSUMER_" + op
        if op == "LEADER" and n == 7 and tokens[4] == "STEPDOWN":
            consumer = tokens[6]

            async def stepdown(stream: str, body: bytes) -> dict[str, Any]:
                return self._stepdown(stream, consumer)

            return stepdown, CONSUMER_STEPDOWN_RESPONSE, tokens[5], "CONSUMER_STEPDOWN"
        if op == "UNPIN" and n == 6:
            pinned = tokens[5]

            async def unpin(stream: str, body: bytes) -> dict[str, Any]:
                return self._unpin(stream, pinned, body)

            return unpin, CONSUMER_UNPIN_RESPONSE, tokens[4], "CONSUMER_UNPIN"
        if op == "RESET" and n == 6:
            target = tokens[5]
            host = self.authority.hosts.get(tokens[4])
            if host is None or host.consumers.config_obj(target) is None:
                return None  # nats-server: the consumer's own subscription answers, or nobody

            async def reset(stream: str, body: bytes) -> dict[str, Any]:
                return await self._reset(stream, target, body)

            return reset, CONSUMER_RESET_RESPONSE, tokens[4], "CONSUMER_RESET"
        return None

    # --- handlers ------------------------------------------------------------------------
    async def _create(self, tokens: list[str], body: bytes) -> dict[str, Any]:
        req = CC.parse_create(tokens, body)
        auth = self.authority
        if req.config.num_replicas > 1 and not auth.clustered:
            raise ApiError(E.STREAM_REPLICAS_NOT_SUPPORTED)
        host = auth.writer(req.stream)
        name = req.name or req.config.durable_name or ephemeral_name()
        consumers = host.consumers
        others = {n: c for n in consumers.names() if (c := consumers.config_obj(n)) is not None}
        config = CC.config_obj(CC.normalize(req, name, host.config, others))
        existing = others.get(name)
        if existing is not None:
            if req.action == "create" and existing != config:
                raise ApiError(E.CONSUMER_ALREADY_EXISTS)
            error = CC.update_error(existing, config)
            if error is not None:
                raise error
            old_deliver = existing.get("deliver_subject", "")
            if old_deliver and old_deliver != config.get("deliver_subject"):
                if host.router.has_literal_interest(old_deliver):
                    raise ApiError(E.CONSUMER_NAME_EXIST)
        elif req.action == "update":
            raise ApiError(E.CONSUMER_DOES_NOT_EXIST)
        else:
            limit = host.config.max_consumers
            if limit > 0 and len(others) >= limit:
                raise ApiError(E.MAXIMUM_CONSUMERS_LIMIT)
        await consumers.create(name, config, req.action)
        return self._one_info(CONSUMER_CREATE_RESPONSE, host, name)

    def _cluster(self, host: AnyStreamHost) -> dict[str, Any] | None:
        """The stream's cluster object, which a consumer's info shows (its group is the
        stream's)."""
        cluster: dict[str, Any] | None = self.authority.host_info(host, "").get("cluster")
        return cluster

    def _one_info(self, type_: str, host: AnyStreamHost, name: str) -> dict[str, Any]:
        """A CREATE or INFO reply: the ConsumerInfo with the dynamic metadata."""
        info = host.consumers.info(name, self._cluster(host))
        if info is None:
            raise ApiError(E.CONSUMER_NOT_FOUND)
        return {"type": type_, **_dynamic(info)}

    def _info(self, stream: str, name: str, body: bytes) -> dict[str, Any]:
        api_json.check_empty_request(body)
        return self._one_info(CONSUMER_INFO_RESPONSE, self.authority.writer(stream), name)

    async def _delete(self, stream: str, name: str, body: bytes) -> dict[str, Any]:
        api_json.check_empty_request(body)
        host = self.authority.writer(stream)
        await host.consumers.delete(name)
        return {"type": CONSUMER_DELETE_RESPONSE, "success": True}

    async def _pause(self, stream: str, name: str, body: bytes) -> dict[str, Any]:
        """CONSUMER.PAUSE: an update of the consumer's ``pause_until`` (an empty body, or Go's
        zero time, resumes it)."""
        pause_until: str | None = None
        if api_json.is_json_object_or_array(body):
            pause_until = decode_strict(body, PauseRequest).pause_until
        host = self.authority.writer(stream)
        existing = host.consumers.config_obj(name)
        if existing is None:
            raise ApiError(E.CONSUMER_NOT_FOUND)
        config = CC.with_pause(existing, pause_until)
        await host.consumers.create(name, config, "update")
        until_ns = parse_rfc3339(pause_until) if pause_until not in (None, CC.ZERO_TIME) else 0
        out: dict[str, Any] = {
            "type": CONSUMER_PAUSE_RESPONSE,
            "paused": until_ns > time.time_ns(),
            "pause_until": format_rfc3339nano(until_ns),
        }
        if out["paused"]:
            out["pause_remaining"] = until_ns - time.time_ns()
        return out

    def _stepdown(self, stream: str, name: str) -> dict[str, Any]:
        """A consumer's leader is its stream's (its operations are the stream's log entries):
        stepping it down hands the stream's leadership over."""
        auth = self.authority
        if not auth.clustered:
            raise ApiError(E.CLUSTER_REQUIRED)
        self._consumer_host(stream, name)
        auth.step_down(stream)
        return api_json.success_response(CONSUMER_STEPDOWN_RESPONSE)

    def _unpin(self, stream: str, name: str, body: bytes) -> dict[str, Any]:
        """CONSUMER.UNPIN (``jsConsumerUnpinRequest``): nats-server's checks in its order (in a
        cluster the stream and consumer are looked up first; the body is read with Go's
        ``json.Unmarshal``). jetraft refuses priority groups, so no consumer has the group."""
        auth = self.authority
        if auth.clustered:
            self._consumer_host(stream, name)
        try:
            group = unmarshal(body, UnpinRequest).group
        except GoJsonError as exc:
            raise ApiError(E.INVALID_JSON, err=str(exc)) from None
        if not group:
            raise ApiError(E.INVALID_JSON, err="consumer group not specified")
        if not _GROUP_NAME.fullmatch(group):
            raise ApiError(E.CONSUMER_INVALID_GROUP_NAME)
        self._consumer_host(stream, name)
        raise ApiError(E.CONSUMER_INVALID_PRIORITY_GROUP)

    async def _reset(self, stream: str, name: str, body: bytes) -> dict[str, Any]:
        """CONSUMER.RESET (``processResetReq``): a non-empty body is read with Go's
        ``json.Unmarshal``; a ``seq`` the consumer's deliver policy does not allow is refused as
        nats-server refuses it; then the reset goes through the stream's log (every replica
        resets the consumer at the same position) and the reply is the consumer's info and
        ``reset_seq``, where delivery starts again."""
        host = self._consumer_host(stream, name)
        seq = 0
        if body:
            try:
                seq = unmarshal(body, ResetRequest).seq
            except GoJsonError as exc:
                raise ApiError(E.INVALID_JSON, err=str(exc)) from None
        config = host.consumers.config_obj(name) or {}
        policy = config.get("deliver_policy")
        if seq and policy == "by_start_sequence" and seq < config.get("opt_start_seq", 0):
            raise ApiError(E.CONSUMER_INVALID_RESET, err="below start seq")
        if seq and policy == "by_start_time":
            stream_ = host.stream
            start = stream_.seq_for_time(parse_rfc3339(config.get("opt_start_time", "")))
            if seq < (start or stream_.state().last_seq + 1):
                raise ApiError(E.CONSUMER_INVALID_RESET, err="below start time")
        elif seq and policy not in ("all", "by_start_sequence"):
            raise ApiError(E.CONSUMER_INVALID_RESET, err="not allowed")
        reset_seq = await host.consumers.reset(name, seq)
        reply = self._one_info(CONSUMER_RESET_RESPONSE, host, name)
        reply["reset_seq"] = reset_seq
        return reply

    def _consumer_host(self, stream: str, name: str) -> AnyStreamHost:
        """The host of ``stream`` holding consumer ``name``; else 10059 or 10014."""
        host = self.authority.writer(stream)
        if host.consumers.config_obj(name) is None:
            raise ApiError(E.CONSUMER_NOT_FOUND)
        return host

    def _page(self, body: bytes, total: int, limit: int) -> tuple[int, int]:
        offset = decode_strict(body, ConsumerNamesRequest).offset if body.strip() else 0
        start = min(max(offset, 0), total)
        return start, min(start + limit, total)

    async def _names(self, stream: str, body: bytes) -> dict[str, Any]:
        host = self.authority.writer(stream)
        names = host.consumers.names()
        start, stop = self._page(body, len(names), NAMES_LIMIT)
        return {
            "type": CONSUMER_NAMES_RESPONSE,
            "total": len(names),
            "offset": start,
            "limit": NAMES_LIMIT,
            "consumers": names[start:stop],
        }

    async def _list(self, stream: str, body: bytes) -> dict[str, Any]:
        host = self.authority.writer(stream)
        names = host.consumers.names()
        start, stop = self._page(body, len(names), LIST_LIMIT)
        cluster = self._cluster(host)  # once for the page: every consumer shares the stream's
        infos = []
        for name in names[start:stop]:
            info = host.consumers.info(name, cluster)
            if info is not None:
                infos.append(info)
        return {
            "type": CONSUMER_LIST_RESPONSE,
            "total": len(names),
            "offset": start,
            "limit": LIST_LIMIT,
            "consumers": infos,
        }


def _dynamic(info: dict[str, Any]) -> dict[str, Any]:
    """CREATE and INFO replies carry the server's version and API level in the config's
    metadata (nats-server setDynamicConsumerMetadata); LIST entries do not."""
    config = dict(info["config"])
    metadata = dict(config.get("metadata") or {})
    metadata[SERVER_LEVEL_KEY] = str(SERVER_API_LEVEL)
    metadata[SERVER_VERSION_KEY] = SERVER_VERSION
    config["metadata"] = dict(sorted(metadata.items()))
    return {**info, "config": config}
