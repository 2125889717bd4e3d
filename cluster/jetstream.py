"""JetStream on one node: the streams it hosts, their on-disk layout, and the ``$JS.API`` handlers.

Request subjects are dispatched by their tokens exactly as nats-server does, including its
silences: an unknown API subject, or a stream name containing a dot, gets no reply at all.
Decoding, validation and response shapes come from ``protocol/``; state changes go through the
stream host's proposal queue; reads (INFO, MSG.GET) are answered from the local engine.

Must never: mutate a stream's messages directly, or answer with an error not in the catalogue.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from cluster import sync_ledger
from cluster.batching import BatchContext
from cluster.extension_loader import attach_all, load_attachers
from cluster.router import Router
from cluster.stream_host import StreamHost
from engine.batch import BatchLimits
from engine.entries import DeleteMsgEntry, PurgeEntry, UpdateConfigEntry
from engine.filestore import FileStore, segment_bytes_for
from engine.memstore import MemoryStore
from engine.msg_get import answer_msg_get, parse_msg_get_request
from engine.store import MessageStore
from engine.stream import Stream
from protocol import api_json, gojson
from protocol import errors as E
from protocol.errors import ApiError
from protocol.headers import get_header
from protocol.models import StreamConfig
from protocol.stream_config import SERVER_API_LEVEL, normalize_create, normalize_update
from protocol.subjects import subjects_overlap

log = logging.getLogger("jetraft.jetstream")

API_PREFIX = "$JS.API."
STREAM_NAMES_LIMIT = 1024
STREAM_LIST_LIMIT = 256
CONFIG_FILE = "config.json"
MSGS_DIR = "msgs"


_dumps = gojson.encode  # Go's escaping (<, >, & as \u003c...), so replies match byte for byte


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file, whole."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        sync_ledger.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        sync_ledger.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class JetStream:
    def __init__(
        self,
        router: Router,
        store_dir: Path,
        server_name: str,
        batch_limits: BatchLimits | None = None,
    ) -> None:
        self.router = router
        # atomic batch limits and the count of open batches, shared by all streams
        self.batch_context = BatchContext(batch_limits or BatchLimits())
        self.server_name = server_name
        self.streams_dir = store_dir / "jetstream" / "streams"
        self.streams: dict[str, StreamHost] = {}
        self.created_ns: dict[str, int] = {}
        self.api_total = 0
        self.api_errors = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.attachers = load_attachers()  # stream extensions (mirror/): cluster/extensions.py

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        self.streams_dir.mkdir(parents=True, exist_ok=True)
        for stream_dir in sorted(self.streams_dir.iterdir()):
            cfg_path = stream_dir / CONFIG_FILE
            if not cfg_path.is_file():
                continue
            try:
                doc = json.loads(cfg_path.read_bytes())
                cfg = StreamConfig.model_validate(doc["config"])
                self._open_stream(cfg, stream_dir, int(doc["created_ns"]))
            except Exception:
                log.exception("stream in %s could not be opened; skipping it", stream_dir)
        # nats-server's API import answers (or ignores) every $JS.API subject except Direct Get,
        # whose absence of responders must surface as a 503 to the client
        self.router.subscribe_internal(
            API_PREFIX + ">", self._on_api, exclude=API_PREFIX + "DIRECT.GET."
        )

    async def close(self) -> None:
        for task in list(self._tasks):
            await asyncio.wait({task}, timeout=5)
        for host in list(self.streams.values()):
            await host.close()
        self.streams.clear()

    def _open_stream(self, cfg: StreamConfig, stream_dir: Path, created_ns: int) -> StreamHost:
        store: MessageStore
        if cfg.storage == "file":
            store = FileStore(
                stream_dir / MSGS_DIR,
                meta_commits=True,
                segment_bytes_max=segment_bytes_for(cfg.max_bytes),
            )
        else:
            store = MemoryStore()
        stream = Stream(cfg, store, created_ns)
        host = StreamHost(
            stream,
            store,
            self.router,
            durable=cfg.storage == "file",
            batch_context=self.batch_context,
            node_name=self.server_name,
        )
        self.streams[cfg.name] = host
        self.created_ns[cfg.name] = created_ns
        host.start()
        attach_all(host, self.attachers)
        for note in store.recovery_notes():
            log.warning("stream %s: %s", cfg.name, note)
        for bad in store.corrupt_records():
            log.error("stream %s: corrupt record %s (%s)", cfg.name, bad.location, bad.reason)
        return host

    def _persist_config(self, cfg: StreamConfig, created_ns: int) -> Path:
        stream_dir = self.streams_dir / cfg.name
        stream_dir.mkdir(parents=True, exist_ok=True)
        doc = {"config": cfg.model_dump(mode="json"), "created_ns": created_ns}
        write_atomic(stream_dir / CONFIG_FILE, _dumps(doc))
        return stream_dir

    # --- dispatch ------------------------------------------------------------------------
    def _on_api(self, subject: str, reply: str | None, hdr: bytes | None, payload: bytes) -> None:
        if not reply:
            return
        tokens = subject.split(".")
        handler = self._route(tokens)
        if handler is None:
            return  # nats-server stays silent for unknown API subjects
        fn, type_, stream_name = handler
        op = "ACCOUNT_INFO" if tokens[2] == "INFO" else tokens[3]
        if not self._answers(op, stream_name):
            return
        level = get_header(hdr, "Nats-Required-Api-Level") if hdr else None
        if level is not None and not _api_level_ok(level):
            self._reply_error(reply, type_, ApiError(E.REQUIRED_API_LEVEL))
            return
        task = asyncio.get_running_loop().create_task(
            self._run(fn, type_, stream_name, reply, payload)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _answers(self, _op: str, _stream_name: str) -> bool:
        """Whether this node answers the request (a standalone server answers everything; in a
        cluster only the node nats-server would answer from does)."""
        return True

    def _route(self, tokens: list[str]) -> tuple[Any, str, str] | None:
        n = len(tokens)
        if n == 3 and tokens[2] == "INFO":
            return self._api_info, api_json.ACCOUNT_INFO_RESPONSE, ""
        if n < 4 or tokens[2] != "STREAM":
            return None
        op = tokens[3]
        if n == 4 and op == "NAMES":
            return self._api_names, api_json.STREAM_NAMES_RESPONSE, ""
        if n == 4 and op == "LIST":
            return self._api_list, api_json.STREAM_LIST_RESPONSE, ""
        if n == 5:
            simple = {
                "CREATE": (self._api_create, api_json.STREAM_CREATE_RESPONSE),
                "UPDATE": (self._api_update, api_json.STREAM_UPDATE_RESPONSE),
                "INFO": (self._api_stream_info, api_json.STREAM_INFO_RESPONSE),
                "DELETE": (self._api_delete, api_json.STREAM_DELETE_RESPONSE),
                "PURGE": (self._api_purge, api_json.STREAM_PURGE_RESPONSE),
            }.get(op)
            if simple is not None:
                return simple[0], simple[1], tokens[4]
        if n == 6 and op == "MSG":
            if tokens[4] == "GET":
                return self._api_msg_get, api_json.STREAM_MSG_GET_RESPONSE, tokens[5]
            if tokens[4] == "DELETE":
                return self._api_msg_delete, api_json.STREAM_MSG_DELETE_RESPONSE, tokens[5]
        return None

    async def _run(self, fn: Any, type_: str, stream: str, reply: str, payload: bytes) -> None:
        try:
            body = await fn(stream, payload)
            self.api_total += 1  # counted once answered: $JS.API.INFO reports those before it
        except ApiError as err:
            self._reply_error(reply, type_, err)
            return
        except Exception as exc:
            log.exception("API handler %s failed", type_)
            self._reply_error(reply, type_, self._unexpected_error(exc))
            return
        self.router.publish(reply, None, None, _dumps(body))

    def _unexpected_error(self, exc: Exception) -> ApiError:
        """What a client hears when a handler fails unexpectedly (a bug, logged above)."""
        return ApiError(E.STREAM_GENERAL, err=f"internal error: {type(exc).__name__}")

    def _reply_error(self, reply: str, type_: str, err: ApiError) -> None:
        self.api_total += 1
        self.api_errors += 1
        self.router.publish(reply, None, None, _dumps(api_json.error_response(type_, err)))

    def _host(self, name: str) -> StreamHost:
        host = self.streams.get(name)
        if host is None:
            raise ApiError(E.STREAM_NOT_FOUND)
        return host

    def _info(
        self,
        host: StreamHost,
        type_: str,
        *,
        deleted_details: bool = False,
        subjects: dict[str, int] | None = None,
        **kw: Any,
    ) -> dict[str, Any]:
        stream = host.stream
        st = stream.state()
        corrupt = host.store.corrupt_records()
        state = api_json.state_json(
            messages=st.messages,
            bytes=st.bytes,
            first_seq=st.first_seq,
            first_ts_ns=st.first_ts_ns,
            last_seq=st.last_seq,
            last_ts_ns=st.last_ts_ns,
            num_subjects=st.num_subjects,
            num_deleted=st.num_deleted,
            deleted=stream.deleted_seqs() if deleted_details else None,
            subjects=subjects,
            # records that failed their checksum are reported as nats-server reports lost data
            lost_msgs=sorted(c.seq for c in corrupt if c.seq is not None) or None,
        )
        for key, value in host.attachment_info().items():
            kw.setdefault(key, value)
        return api_json.stream_info(
            host.config,
            state,
            self.created_ns[host.name],
            time.time_ns(),
            self.server_name,
            type_=type_,
            **kw,
        )

    # --- handlers ------------------------------------------------------------------------
    async def _api_info(self, _stream: str, _payload: bytes) -> dict[str, Any]:
        memory = storage = 0
        for host in self.streams.values():
            b = host.stream.state().bytes
            if host.config.storage == "memory":
                memory += b
            else:
                storage += b
        return api_json.account_info(
            memory=memory,
            storage=storage,
            streams=len(self.streams),
            consumers=0,
            api_level=SERVER_API_LEVEL,
            api_total=self.api_total,
            api_errors=self.api_errors,
        )

    async def _api_create(self, name: str, payload: bytes) -> dict[str, Any]:
        configs = {n: h.config for n, h in self.streams.items()}
        cfg, _pedantic = normalize_create(name, payload, existing=configs)
        existing = self.streams.get(name)
        if existing is not None:  # normalize_create raised 10058 unless the config is identical
            return self._info(existing, api_json.STREAM_CREATE_RESPONSE, did_create=True)
        created_ns = time.time_ns()
        stream_dir = self._persist_config(cfg, created_ns)
        host = self._open_stream(cfg, stream_dir, created_ns)
        self._advisory("CREATED", name, "create")
        return self._info(host, api_json.STREAM_CREATE_RESPONSE, did_create=True)

    async def _api_update(self, name: str, payload: bytes) -> dict[str, Any]:
        host = self._host(name)
        others = {n: h.config for n, h in self.streams.items() if n != name}
        cfg, _pedantic = normalize_update(name, payload, host.config, existing=others)
        outcome = await host.propose(
            UpdateConfigEntry(time.time_ns(), cfg.model_dump_json().encode())
        )
        if isinstance(outcome, ApiError):
            raise outcome
        self._persist_config(host.config, self.created_ns[name])
        host.refresh_subscriptions()
        self._advisory("UPDATED", name, "modify")
        return self._info(host, api_json.STREAM_UPDATE_RESPONSE)

    async def _api_stream_info(self, name: str, payload: bytes) -> dict[str, Any]:
        deleted_details, subjects_filter, offset = api_json.parse_info_request(payload)
        host = self._host(name)
        subjects: dict[str, int] | None = None
        paged: dict[str, int] | None = None
        if subjects_filter:
            subjects, paged = api_json.subjects_page(
                host.stream.subjects_state(subjects_filter), offset
            )
        return self._info(
            host,
            api_json.STREAM_INFO_RESPONSE,
            deleted_details=deleted_details,
            subjects=subjects,
            paged=paged,
        )

    async def _api_delete(self, name: str, payload: bytes) -> dict[str, Any]:
        api_json.check_empty_request(payload)
        host = self._host(name)
        del self.streams[name]
        await host.close()
        shutil.rmtree(self.streams_dir / name, ignore_errors=True)
        self._advisory("DELETED", name, "delete")
        return api_json.success_response(api_json.STREAM_DELETE_RESPONSE)

    async def _api_purge(self, name: str, payload: bytes) -> dict[str, Any]:
        host = self._host(name)
        filt, seq, keep = api_json.parse_purge_request(payload)
        outcome = await host.propose(PurgeEntry(time.time_ns(), filt, seq, keep))
        if isinstance(outcome, ApiError):
            raise outcome
        return api_json.purge_response(outcome)

    async def _api_msg_get(self, name: str, payload: bytes) -> dict[str, Any]:
        # a standalone nats-server judges the body before it looks the stream up
        req = parse_msg_get_request(payload)
        if isinstance(req, dict):
            return req
        return answer_msg_get(self._host(name).stream, req)

    async def _api_msg_delete(self, name: str, payload: bytes) -> dict[str, Any]:
        host = self._host(name)
        seq, no_erase = api_json.parse_msg_delete_request(payload)
        outcome = await host.propose(DeleteMsgEntry(time.time_ns(), seq, not no_erase))
        if isinstance(outcome, ApiError):
            raise outcome
        return api_json.success_response(api_json.STREAM_MSG_DELETE_RESPONSE)

    def _matching_names(self, subject_filter: str) -> list[str]:
        names = sorted(self.streams)
        if not subject_filter:
            return names
        return [
            n
            for n in names
            if any(subjects_overlap(subject_filter, s) for s in self.streams[n].config.subjects)
        ]

    async def _api_names(self, _stream: str, payload: bytes) -> dict[str, Any]:
        offset, subject_filter = api_json.parse_names_request(payload)
        return api_json.names_response(self._matching_names(subject_filter), offset)

    async def _api_list(self, _stream: str, payload: bytes) -> dict[str, Any]:
        offset, subject_filter = api_json.parse_list_request(payload)
        names = self._matching_names(subject_filter)
        start, stop = api_json.list_page(len(names), offset)
        infos = [self._info(self.streams[n], "", dynamic_metadata=False) for n in names[start:stop]]
        return api_json.list_response(infos, total=len(names), offset=offset)

    def _advisory(self, kind: str, stream: str, action: str) -> None:
        from protocol.timefmt import format_rfc3339nano

        body = {
            "type": "io.nats.jetstream.advisory.v1.stream_action",
            "id": os.urandom(11).hex(),
            "timestamp": format_rfc3339nano(time.time_ns()),
            "stream": stream,
            "action": action,
        }
        self.router.publish(f"$JS.EVENT.ADVISORY.STREAM.{kind}.{stream}", None, None, _dumps(body))

    # --- monitoring ----------------------------------------------------------------------
    def jsz(self) -> dict[str, Any]:
        streams = []
        for host in self.streams.values():
            st = host.stream.state()
            streams.append(
                {
                    "name": host.name,
                    "messages": st.messages,
                    "bytes": st.bytes,
                    "first_seq": st.first_seq,
                    "last_seq": st.last_seq,
                    "corrupt_records": [
                        {"seq": c.seq, "location": c.location, "reason": c.reason}
                        for c in host.store.corrupt_records()
                    ],
                }
            )
        return {
            "server_name": self.server_name,
            "streams": len(self.streams),
            "api": {"level": SERVER_API_LEVEL, "total": self.api_total, "errors": self.api_errors},
            "account_details": streams,
        }


def _api_level_ok(value: str) -> bool:
    try:
        return int(value) <= SERVER_API_LEVEL
    except ValueError:
        return False
