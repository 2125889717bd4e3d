"""The JetStream API of a node: ``$JS.API`` requests dispatched, answered and counted.

One implementation for a single server and a cluster: where streams live and which node answers
is the business of the stream authority (``cluster/authority.py``: ``LocalStreams`` or
``MetaStreams``), which the handlers ask. Request subjects are dispatched by their tokens exactly
as nats-server does, including its silences: an unknown API subject, or a stream name containing
a dot, gets no reply at all. The stream subjects are answered here, the consumer subjects by
``cluster/consumer_api.py``, the administrative ones (peers, placement, the meta group, backups)
by ``cluster/admin_api.py``. Decoding, validation and response shapes come from ``protocol/``;
state changes go through the stream host's proposal queue.

Must never: mutate a stream's messages directly, or answer with an error not in the catalogue.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from cluster.admin_api import LEVEL_CHECKED_BY_HANDLER, AdminApi
from cluster.authority import StreamAuthority
from cluster.consumer_api import ConsumerApi
from cluster.router import Router
from engine.entries import DeleteMsgEntry, PurgeEntry, UpdateConfigEntry
from engine.msg_get import answer_msg_get, parse_msg_get_request
from protocol import api_json, gojson
from protocol import errors as E
from protocol.errors import ApiError
from protocol.headers import get_header
from protocol.stream_config import (
    SERVER_API_LEVEL,
    normalize_create,
    normalize_update,
    refuse_unsupported,
)
from protocol.subjects import subjects_overlap
from protocol.timefmt import format_rfc3339nano

log = logging.getLogger("jetraft.jetstream")

API_PREFIX = "$JS.API."
_dumps = gojson.encode  # Go's escaping (<, >, & as \u003c...), so replies match byte for byte


class JetStream:
    def __init__(self, router: Router, authority: StreamAuthority, *, server_id: str) -> None:
        self.router = router
        self.authority = authority
        self.consumers = ConsumerApi(authority)
        self.admin = AdminApi(authority, router, server_id)
        self.api_total = 0
        self.api_errors = 0
        self._tasks: set[asyncio.Task[None]] = set()

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        self.authority.start()
        # nats-server's API import answers (or ignores) every $JS.API subject except Direct Get
        # and pull requests, whose subscriptions belong to the streams and consumers: without
        # one the client gets a no-responders status
        self.router.subscribe_internal(
            API_PREFIX + ">",
            self._on_api,
            exclude=(API_PREFIX + "DIRECT.GET.", API_PREFIX + "CONSUMER.MSG.NEXT."),
        )

    def server_shutdown(self) -> None:
        """The node is stopping: waiting pull requests are told so (``409 Server Shutdown``, see
        ConsumerHost.server_shutdown) while clients and routes can still hear it."""
        for host in list(self.authority.hosts.values()):
            host.consumers.server_shutdown()

    async def close(self) -> None:
        self.server_shutdown()
        for task in list(self._tasks):
            await asyncio.wait({task}, timeout=5)
        await self.authority.close()

    # --- dispatch ------------------------------------------------------------------------
    def _on_api(self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes) -> None:
        if not reply:
            return
        tokens = subject.split(".")
        level = get_header(hdr, "Nats-Required-Api-Level") if hdr else None
        level_ok = level is None or _api_level_ok(level)
        if len(tokens) > 2 and tokens[2] == "CONSUMER":
            handler = self.consumers.route(tokens)
        else:
            handler = self._route(tokens) or self.admin.route(tokens, level_ok)
        if handler is None:
            return  # nats-server stays silent for unknown API subjects
        fn, type_, stream_name, op = handler
        if not self.authority.answers(op, stream_name):
            return
        if not level_ok and op not in LEVEL_CHECKED_BY_HANDLER:
            self._reply_error(reply, type_, ApiError(E.REQUIRED_API_LEVEL))
            return
        task = asyncio.get_running_loop().create_task(
            self._run(fn, type_, stream_name, reply, payload)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _route(self, tokens: list[str]) -> tuple[Any, str, str, str] | None:
        n = len(tokens)
        if n == 3 and tokens[2] == "INFO":
            return self._api_info, api_json.ACCOUNT_INFO_RESPONSE, "", "ACCOUNT_INFO"
        if n < 4 or tokens[2] != "STREAM":
            return None
        op = tokens[3]
        if n == 4 and op == "NAMES":
            return self._api_names, api_json.STREAM_NAMES_RESPONSE, "", op
        if n == 4 and op == "LIST":
            return self._api_list, api_json.STREAM_LIST_RESPONSE, "", op
        if n == 5:
            simple = {
                "CREATE": (self._api_create, api_json.STREAM_CREATE_RESPONSE),
                "UPDATE": (self._api_update, api_json.STREAM_UPDATE_RESPONSE),
                "INFO": (self._api_stream_info, api_json.STREAM_INFO_RESPONSE),
                "DELETE": (self._api_delete, api_json.STREAM_DELETE_RESPONSE),
                "PURGE": (self._api_purge, api_json.STREAM_PURGE_RESPONSE),
            }.get(op)
            if simple is not None:
                return simple[0], simple[1], tokens[4], op
        if n == 6 and op == "LEADER" and tokens[4] == "STEPDOWN":
            return self._api_stepdown, api_json.STREAM_LEADER_STEPDOWN_RESPONSE, tokens[5], op
        if n == 6 and op == "MSG":
            if tokens[4] == "GET":
                return self._api_msg_get, api_json.STREAM_MSG_GET_RESPONSE, tokens[5], op
            if tokens[4] == "DELETE":
                return self._api_msg_delete, api_json.STREAM_MSG_DELETE_RESPONSE, tokens[5], op
        return None

    async def _run(self, fn: Any, type_: str, stream: str, reply: str, payload: bytes) -> None:
        try:
            body = await fn(stream, payload)
            self.api_total += 1  # counted once answered: $JS.API.INFO reports those before it
            if "error" in body:  # an error reply a handler shapes itself
                self.api_errors += 1
        except ApiError as err:
            self._reply_error(reply, type_, err)
            return
        except Exception as exc:
            log.exception("API handler %s failed", type_)
            self._reply_error(reply, type_, self._unexpected_error(exc))
            return
        self.router.publish(reply, None, None, _dumps(body))

    def _unexpected_error(self, exc: Exception) -> ApiError:
        """What a client hears when a handler fails unexpectedly (logged above). In a cluster
        that mostly means leadership moved under the handler: the client retries, as after any
        not-leader answer; a single server has no such excuse."""
        if self.authority.clustered:
            return ApiError(E.CLUSTER_NOT_LEADER)
        return ApiError(E.STREAM_GENERAL, err=f"internal error: {type(exc).__name__}")

    def _reply_error(self, reply: str, type_: str, err: ApiError) -> None:
        self.api_total += 1
        self.api_errors += 1
        self.router.publish(reply, None, None, _dumps(api_json.error_response(type_, err)))

    # --- handlers ------------------------------------------------------------------------
    async def _api_info(self, _stream: str, _payload: bytes) -> dict[str, Any]:
        memory = storage = 0
        configs = self.authority.configs()
        for name, cfg in configs.items():
            info = await self.authority.leader_info(name)
            used = int(info["state"]["bytes"]) if info else 0
            if cfg.storage == "memory":
                memory += used
            else:
                storage += used
        return api_json.account_info(
            memory=memory,
            storage=storage,
            streams=len(configs),
            consumers=sum(len(h.consumers.names()) for h in self.authority.hosts.values()),
            api_level=SERVER_API_LEVEL,
            api_total=self.api_total,
            api_errors=self.api_errors,
        )

    async def _api_create(self, name: str, payload: bytes) -> dict[str, Any]:
        auth = self.authority
        cfg, _pedantic = normalize_create(
            name, payload, existing=auth.configs(), clustered=auth.clustered
        )
        refuse_unsupported(cfg)
        response, created = await auth.create(cfg)
        if created:
            self._advisory("CREATED", name, "create")
        return response

    async def _api_update(self, name: str, payload: bytes) -> dict[str, Any]:
        auth = self.authority
        host = auth.writer(name)
        cfg, _pedantic = normalize_update(
            name, payload, host.config, existing=auth.configs(name), clustered=auth.clustered
        )
        refuse_unsupported(cfg)
        auth.check_update(host.config, cfg)
        outcome = await host.propose(
            UpdateConfigEntry(time.time_ns(), cfg.model_dump_json().encode())
        )
        if isinstance(outcome, ApiError):
            raise outcome
        await auth.updated(host)
        host.refresh_subscriptions()
        self._advisory("UPDATED", name, "modify")
        return auth.host_info(host, api_json.STREAM_UPDATE_RESPONSE)

    async def _api_stream_info(self, name: str, payload: bytes) -> dict[str, Any]:
        deleted_details, subjects_filter, offset = api_json.parse_info_request(payload)
        host = self.authority.writer(name)
        subjects: dict[str, int] | None = None
        paged: dict[str, int] | None = None
        if subjects_filter:
            subjects, paged = api_json.subjects_page(
                host.stream.subjects_state(subjects_filter), offset
            )
        return self.authority.host_info(
            host,
            api_json.STREAM_INFO_RESPONSE,
            deleted_details=deleted_details,
            subjects=subjects,
            paged=paged,
        )

    async def _api_delete(self, name: str, payload: bytes) -> dict[str, Any]:
        api_json.check_empty_request(payload)
        await self.authority.delete(name)
        self._advisory("DELETED", name, "delete")
        return api_json.success_response(api_json.STREAM_DELETE_RESPONSE)

    async def _api_purge(self, name: str, payload: bytes) -> dict[str, Any]:
        host = self.authority.writer(name)
        filt, seq, keep = api_json.parse_purge_request(payload)
        outcome = await host.propose(PurgeEntry(time.time_ns(), filt, seq, keep))
        if isinstance(outcome, ApiError):
            raise outcome
        return api_json.purge_response(outcome)

    async def _api_stepdown(self, name: str, _payload: bytes) -> dict[str, Any]:
        self.authority.step_down(name)
        return api_json.success_response(api_json.STREAM_LEADER_STEPDOWN_RESPONSE)

    async def _api_msg_get(self, name: str, payload: bytes) -> dict[str, Any]:
        # nats-server judges the body before it looks the stream up
        req = parse_msg_get_request(payload)
        if isinstance(req, dict):
            return req
        host = self.authority.writer(name)
        await self.authority.read_barrier(host)
        return answer_msg_get(host.stream, req)

    async def _api_msg_delete(self, name: str, payload: bytes) -> dict[str, Any]:
        host = self.authority.writer(name)
        seq, no_erase = api_json.parse_msg_delete_request(payload)
        outcome = await host.propose(DeleteMsgEntry(time.time_ns(), seq, not no_erase))
        if isinstance(outcome, ApiError):
            raise outcome
        return api_json.success_response(api_json.STREAM_MSG_DELETE_RESPONSE)

    def _matching_names(self, subject_filter: str) -> list[str]:
        configs = self.authority.configs()
        names = sorted(configs)
        if not subject_filter:
            return names
        return [
            n
            for n in names
            if any(subjects_overlap(subject_filter, s) for s in configs[n].subjects or [])
        ]

    async def _api_names(self, _stream: str, payload: bytes) -> dict[str, Any]:
        offset, subject_filter = api_json.parse_names_request(payload)
        return api_json.names_response(self._matching_names(subject_filter), offset)

    async def _api_list(self, _stream: str, payload: bytes) -> dict[str, Any]:
        offset, subject_filter = api_json.parse_list_request(payload)
        names = self._matching_names(subject_filter)
        start, stop = api_json.list_page(len(names), offset)
        infos: list[dict[str, Any]] = []
        missing: list[str] = []  # in a cluster: streams whose leader did not answer in time
        for n in names[start:stop]:
            info = await self.authority.leader_info(n)
            if info is None:
                missing.append(n)
            else:
                infos.append(info)
        out = api_json.list_response(infos, total=len(names), offset=offset)
        if missing:
            out["missing"] = missing
        return out

    def _advisory(self, kind: str, stream: str, action: str) -> None:
        body = {
            "type": "io.nats.jetstream.advisory.v1.stream_action",
            "id": os.urandom(11).hex(),
            "timestamp": format_rfc3339nano(time.time_ns()),
            "stream": stream,
            "action": action,
        }
        self.router.publish(f"$JS.EVENT.ADVISORY.STREAM.{kind}.{stream}", None, None, _dumps(body))


def _api_level_ok(value: str) -> bool:
    try:
        return int(value) <= SERVER_API_LEVEL
    except ValueError:
        return False
