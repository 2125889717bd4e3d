"""Stream configuration: strict decoding, defaulting, validation and its JSON form.

A port of nats-server's ``jsStreamCreateRequest`` / ``jsStreamUpdateRequest`` preambles,
``checkStreamCfgLocked`` and ``configUpdateCheckLocked`` (server/stream.go, v2.15), in their
order, so that a bad config gets the same err_code *and* the same text as from nats-server — the
first failing check wins, so the order is part of the contract. Pure functions: the caller
(the meta leader in ``cluster/``) passes the existing streams in and applies the result.

Known gaps (documented, not silent): account limits (max streams, max bytes required) belong to
the caller.

Must never: do I/O, read clocks, or mutate the configs it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from protocol import errors
from protocol.errors import ApiError, ErrorSpec
from protocol.gojson import GoJsonError, decode, go_quote
from protocol.models import (
    GoStruct,
    Placement,
    StreamConfig,
    StreamConfigRequest,
    StreamSource,
)
from protocol.subject_index import SubjectIndex
from protocol.subject_transform import SubjectTransform, TransformError, validate_mapping
from protocol.subjects import is_valid_subject
from protocol.timefmt import NS_PER_MS, NS_PER_S

M = TypeVar("M", bound=GoStruct)

# --- Limits (server/jetstream_api.go, stream.go) -------------------------------------------------
STREAM_NAME_BYTES_MAX = 255
DESCRIPTION_BYTES_MAX = 4 * 1024
METADATA_BYTES_MAX = 128 * 1024
REPLICAS_MAX = 5
MAX_AGE_MIN_NS = 100 * NS_PER_MS
DUPLICATE_WINDOW_MIN_NS = 100 * NS_PER_MS
DUPLICATE_WINDOW_DEFAULT_NS = 120 * NS_PER_S
SUBJECT_DELETE_MARKER_TTL_MIN_NS = NS_PER_S
SERVER_API_LEVEL = 5
SERVER_VERSION = "2.15.1"

# Metadata keys nats-server manages (server/jetstream_versioning.go).
REQUIRED_LEVEL_KEY = "_nats.req.level"
SERVER_VERSION_KEY = "_nats.ver"
SERVER_LEVEL_KEY = "_nats.level"

_NAME_FORBIDDEN = frozenset(" \t\r\n\f.*>\\/")
_PATH_SEPARATORS = frozenset("\\/")
_JS_API_PREFIX = "$JS.API"
_API_NAMESPACES = ("$JS.>", "$JSC.>", "$NRG.>")


def _invalid(text: str) -> ApiError:
    return ApiError(errors.STREAM_INVALID_CONFIG, err=text)


def _pedantic(text: str) -> ApiError:
    return ApiError(errors.PEDANTIC, err=text)


# --- Decoding ------------------------------------------------------------------------------------


def decode_strict(body: bytes, model: type[M]) -> M:
    """Decode an API request body with nats-server's strict semantics (see ``gojson``).

    Field names match case-insensitively (Go's rule: exact match first, then case folding);
    unknown fields are rejected. Errors: ``ApiError(INVALID_JSON, err=<Go's text>)``.
    """
    try:
        return decode(body, model)
    except GoJsonError as exc:
        raise ApiError(errors.INVALID_JSON, err=str(exc)) from None


# --- Subjects, with nats-server's exact collision quirks (server/sublist.go) ---------------------


def _analyze(tokens: list[str]) -> tuple[bool, bool]:
    return "*" in tokens, ">" in tokens


def _tokens_can_match(t1: str, t2: str) -> bool:
    if not t1 or not t2:
        return False
    if t1[0] in "*>" or t2[0] in "*>":
        return True
    return t1 == t2


def _is_subset_match_tokens(tokens: list[str], test: list[str]) -> bool:
    for i, t2 in enumerate(test):
        if i >= len(tokens):
            return False
        if not t2:
            return False
        if t2 == ">":
            return True
        t1 = tokens[i]
        if not t1 or t1 == ">":
            return False
        if t1 == "*":
            if t2 != "*":
                return False
            continue
        if t2[0] != "*" and t1 != t2:
            return False
    return len(tokens) == len(test)


def subject_is_subset_match(subject: str, test: str) -> bool:
    """nats-server ``subjectIsSubsetMatch``: is every subject ``subject`` matches in ``test``?"""
    return _is_subset_match_tokens(subject.split("."), test.split("."))


def subjects_collide(subj1: str, subj2: str) -> bool:
    """nats-server ``SubjectsCollide``: could one literal subject match both?"""
    if subj1 == subj2:
        return True
    toks1, toks2 = subj1.split("."), subj2.split(".")
    pwc1, fwc1 = _analyze(toks1)
    pwc2, fwc2 = _analyze(toks2)
    lit1, lit2 = not (pwc1 or fwc1), not (pwc2 or fwc2)
    if lit1 and lit2:
        return False
    if lit1 and not lit2:
        return _is_subset_match_tokens(toks1, toks2)
    if lit2 and not lit1:
        return _is_subset_match_tokens(toks2, toks1)
    if not fwc1 and not fwc2 and len(toks1) != len(toks2):
        return False
    if len(toks1) != len(toks2) and (
        (len(toks1) < len(toks2) and not fwc1) or (len(toks2) < len(toks1) and not fwc2)
    ):
        return False
    return all(_tokens_can_match(a, b) for a, b in zip(toks1, toks2, strict=False))


def _is_literal(subject: str) -> bool:
    return "*" not in subject.split(".") and ">" not in subject.split(".")


def _is_valid_publish_subject(subject: str) -> bool:
    return is_valid_subject(subject) and _is_literal(subject)


def is_valid_stream_name(name: str) -> bool:
    """nats-server ``isValidAssetName``: non-empty, none of `` \\t\\r\\n\\f.*>\\/``."""
    return bool(name) and _NAME_FORBIDDEN.isdisjoint(name)


# --- API level metadata --------------------------------------------------------------------------


def required_api_level(cfg: StreamConfig) -> int:
    """The API level a server needs to run this stream (``setStaticStreamMetadata``)."""
    level = 0
    if cfg.allow_msg_ttl or cfg.subject_delete_marker_ttl > 0:
        level = 1
    if cfg.allow_msg_counter or cfg.allow_atomic or cfg.allow_msg_schedules:
        level = max(level, 2)
    if cfg.persist_mode == "async":
        level = max(level, 2)
    if cfg.allow_batched:
        level = max(level, 4)
    return level


def _with_static_metadata(cfg: StreamConfig) -> StreamConfig:
    """Drop the dynamic keys a client may have echoed back and store ``_nats.req.level``."""
    metadata = dict(cfg.metadata or {})
    metadata.pop(SERVER_VERSION_KEY, None)
    metadata.pop(SERVER_LEVEL_KEY, None)
    metadata[REQUIRED_LEVEL_KEY] = str(required_api_level(cfg))
    return cfg.model_copy(update={"metadata": metadata})


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


# --- checkStreamCfgLocked ------------------------------------------------------------------------

_UNLIMITED_FIELDS = ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size")


def _check_names_and_sizes(cfg: StreamConfig) -> None:
    if not is_valid_stream_name(cfg.name):
        raise _invalid("stream name is required and can not contain '.', '*', '>', '\\', '/'")
    if _utf8_len(cfg.name) > STREAM_NAME_BYTES_MAX:
        raise _invalid(f"stream name is too long, maximum allowed is {STREAM_NAME_BYTES_MAX}")
    if _utf8_len(cfg.description) > DESCRIPTION_BYTES_MAX:
        raise _invalid(
            f"stream description is too long, maximum allowed is {DESCRIPTION_BYTES_MAX}"
        )
    metadata_bytes = sum(_utf8_len(k) + _utf8_len(v) for k, v in (cfg.metadata or {}).items())
    if metadata_bytes > METADATA_BYTES_MAX:
        raise _invalid(f"stream metadata exceeds maximum size of {METADATA_BYTES_MAX} bytes")


def _normalize_limits(u: dict[str, Any], pedantic: bool) -> None:
    if u["num_replicas"] == 0:
        u["num_replicas"] = 1
    if u["num_replicas"] > REPLICAS_MAX:
        raise _invalid(f"maximum replicas is {REPLICAS_MAX}")
    if u["num_replicas"] < 0:
        raise ApiError(errors.REPLICAS_COUNT_CANNOT_BE_NEGATIVE)
    for name in (*_UNLIMITED_FIELDS, "max_consumers"):
        if u[name] == 0 or u[name] < -1:
            if pedantic and u[name] < -1:
                raise _pedantic(f"{name} must be set to -1")
            u[name] = -1
    if u["max_age"] < 0:
        raise _invalid("max age can not be negative")
    if u["max_age"] != 0 and u["max_age"] < MAX_AGE_MIN_NS:
        raise _invalid("max age needs to be >= 100ms")


def _normalize_duplicates(u: dict[str, Any], pedantic: bool) -> None:
    max_age, window = u["max_age"], u["duplicate_window"]
    if window == 0 and u["mirror"] is None and not u["sources"]:
        if max_age != 0 and max_age < DUPLICATE_WINDOW_DEFAULT_NS:
            if pedantic:
                raise _pedantic("duplicate window cannot be bigger than max age")
            window = max_age
        else:
            window = DUPLICATE_WINDOW_DEFAULT_NS
    if window < 0:
        raise _invalid("duplicates window can not be negative")
    if max_age != 0 and window > max_age:
        raise _invalid("duplicates window can not be larger then max age")
    if 0 < window < DUPLICATE_WINDOW_MIN_NS:
        raise _invalid("duplicates window needs to be >= 100ms")
    u["duplicate_window"] = window


def _check_feature_flags(u: dict[str, Any], pedantic: bool) -> None:
    if u["deny_purge"] and u["allow_rollup_hdrs"]:
        raise _invalid("roll-ups require the purge permission")
    if u["allow_msg_counter"]:
        if u["discard"] == "new":
            raise _invalid("counter stream cannot use discard new")
        if u["allow_msg_ttl"]:
            raise _invalid("counter stream cannot use message TTLs")
        if u["allow_msg_schedules"]:
            raise _invalid("counter stream cannot use message schedules")
        if u["retention"] != "limits":
            raise _invalid("counter stream can only use limits retention")
    _check_discard_new_per_subject(u)
    sdm_ttl = u["subject_delete_marker_ttl"]
    if sdm_ttl > 0:
        if sdm_ttl < SUBJECT_DELETE_MARKER_TTL_MIN_NS:
            raise _invalid("subject delete marker TTL must be at least 1 second")
        if not u["allow_msg_ttl"]:
            if pedantic:
                raise _invalid("subject delete marker cannot be set if message TTLs are disabled")
            u["allow_msg_ttl"] = True
        if not u["allow_rollup_hdrs"]:
            if pedantic:
                raise _invalid("subject delete marker cannot be set if roll-ups are disabled")
            u["allow_rollup_hdrs"], u["deny_purge"] = True, False
    elif sdm_ttl < 0:
        raise _invalid("subject delete marker TTL must not be negative")
    if u["allow_msg_schedules"]:
        if u["discard"] == "new":
            raise _invalid("message scheduling cannot use discard new")
        if not u["allow_rollup_hdrs"]:
            if pedantic:
                raise _invalid("message scheduling cannot be set if roll-ups are disabled")
            u["allow_rollup_hdrs"], u["deny_purge"] = True, False
    if u["persist_mode"] == "async":
        if u["storage"] != "file":
            raise _invalid("async persist mode is only supported on file storage")
        if u["num_replicas"] > 1:
            raise _invalid("async persist mode is not supported on replicated streams")
        if u["allow_atomic"]:
            raise _invalid("async persist mode is not supported with atomic batch publish")


def _check_discard_new_per_subject(u: Mapping[str, Any]) -> None:
    if u["discard_new_per_subject"]:
        if u["discard"] != "new":
            raise _invalid("discard new per subject requires discard new policy to be set")
        if u["max_msgs_per_subject"] <= 0:
            raise _invalid("discard new per subject requires max msgs per subject > 0")


class _Prefixes:
    """External deliver/api prefixes and visible upstream subjects collected from mirror/sources."""

    def __init__(self) -> None:
        self.stream_subjects: list[str] = []
        self.deliver: list[str] = []
        self.api: list[str] = []

    def add_external(self, src: StreamSource) -> None:
        assert src.external is not None
        if src.external.deliver:
            self.deliver.append(src.external.deliver)
        if src.external.api:
            self.api.append(src.external.api)


def _check_transform_sources(
    src: StreamSource,
    invalid_filter: ErrorSpec,
    invalid_dest: ErrorSpec,
    overlapping: ErrorSpec,
    use_subset: bool,
) -> None:
    transforms = src.subject_transforms or []
    for tr in transforms:
        if tr.src and not is_valid_subject(tr.src):
            raise ApiError(invalid_filter, err=f"invalid subject {tr.src}")
        try:
            validate_mapping(tr.src, tr.dest)
        except TransformError as exc:
            raise ApiError(invalid_dest, err=str(exc)) from None
    for i, outer in enumerate(transforms):
        for j, inner in enumerate(transforms):
            if i == j:
                continue
            hit = (
                subject_is_subset_match(outer.src, inner.src)
                if use_subset
                else subjects_collide(outer.src, inner.src)
            )
            if hit:
                raise ApiError(overlapping)


def _check_mirror(
    u: dict[str, Any],
    pedantic: bool,
    existing: Mapping[str, StreamConfig],
    prefixes: _Prefixes,
) -> None:
    mirror: StreamSource = u["mirror"]
    if u["first_seq"] > 0:
        raise ApiError(errors.MIRROR_WITH_FIRST_SEQ)
    if u["subjects"]:
        raise ApiError(errors.MIRROR_WITH_SUBJECTS)
    if u["sources"]:
        raise ApiError(errors.MIRROR_WITH_SOURCES)
    for flag, spec in (
        ("allow_msg_counter", errors.MIRROR_WITH_COUNTERS),
        ("allow_atomic", errors.MIRROR_WITH_ATOMIC_PUBLISH),
        ("allow_batched", errors.MIRROR_WITH_BATCH_PUBLISH),
        ("allow_msg_schedules", errors.MIRROR_WITH_MSG_SCHEDULES),
    ):
        if u[flag]:
            raise ApiError(spec)
    consumer = mirror.consumer
    if consumer is not None and (
        not is_valid_stream_name(consumer.name)
        or not _is_literal(consumer.deliver_subject)
        or not is_valid_subject(consumer.deliver_subject)
        or mirror.opt_start_seq != 0
        or mirror.opt_start_time is not None
        or mirror.filter_subject
    ):
        raise ApiError(errors.MIRROR_DURABLE_CONSUMER_CFG_INVALID)
    if mirror.filter_subject and mirror.subject_transforms:
        raise ApiError(errors.MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED)
    if u["subject_delete_marker_ttl"] > 0:
        raise _invalid("subject delete markers forbidden on mirrors")
    _check_transform_sources(
        mirror,
        errors.MIRROR_INVALID_SUBJECT_FILTER,
        errors.MIRROR_INVALID_TRANSFORM_DESTINATION,
        errors.MIRROR_OVERLAPPING_SUBJECT_FILTERS,
        False,
    )
    if mirror.external is not None:
        prefixes.add_external(mirror)
        return
    if not is_valid_stream_name(mirror.name):
        raise ApiError(errors.MIRROR_INVALID_STREAM_NAME)
    origin = existing.get(mirror.name)
    if origin is None:
        return
    prefixes.stream_subjects.extend(origin.subjects)
    if (
        u["max_msg_size"] > 0
        and origin.max_msg_size > 0
        and u["max_msg_size"] < origin.max_msg_size
    ):
        raise ApiError(errors.MIRROR_MAX_MESSAGE_SIZE_TOO_BIG)
    if pedantic and u["mirror_direct"] != origin.allow_direct:
        raise _pedantic("origin stream has direct get set, mirror has it disabled")
    u["mirror_direct"] = origin.allow_direct


def source_index_name(src: StreamSource) -> str:
    """nats-server's ``iname``: ``name[:api][:C=consumer] <filters> <destinations>``; it names a
    source in ``Nats-Stream-Source`` headers and in the sourcing stream's positions."""
    name = src.name
    if src.external is not None:
        name += ":" + src.external.api
    if src.consumer is not None:
        name += ":C=" + src.consumer.name
    if not src.subject_transforms:
        source, dest = src.filter_subject or ">", ">"
    else:
        source = "\f".join(tr.src or ">" for tr in src.subject_transforms)
        dest = "\f".join(tr.dest or ">" for tr in src.subject_transforms)
    return f"{name} {source} {dest}"


def _check_sources(
    u: dict[str, Any], existing: Mapping[str, StreamConfig], prefixes: _Prefixes
) -> None:
    sources: list[StreamSource] = u["sources"] or []
    if sources and u["allow_msg_schedules"]:
        raise ApiError(errors.SOURCE_WITH_MSG_SCHEDULES)
    index_names: set[str] = set()
    consumer_names: set[str] = set()
    for src in sources:
        if not is_valid_stream_name(src.name):
            raise ApiError(errors.SOURCE_INVALID_STREAM_NAME)
        iname = source_index_name(src)
        if iname in index_names:
            raise ApiError(errors.SOURCE_DUPLICATE_DETECTED)
        index_names.add(iname)
        if src.filter_subject and src.subject_transforms:
            raise ApiError(errors.SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED)
        _check_transform_sources(
            src,
            errors.SOURCE_INVALID_SUBJECT_FILTER,
            errors.SOURCE_INVALID_TRANSFORM_DESTINATION,
            errors.SOURCE_OVERLAPPING_SUBJECT_FILTERS,
            True,
        )
        consumer = src.consumer
        if consumer is not None:
            if (
                not is_valid_stream_name(consumer.name)
                or not _is_literal(consumer.deliver_subject)
                or not is_valid_subject(consumer.deliver_subject)
                or src.opt_start_seq != 0
                or src.opt_start_time is not None
                or src.filter_subject
            ):
                raise ApiError(errors.SOURCE_DURABLE_CONSUMER_CFG_INVALID)
            cname = f"{src.name}:{src.external.api if src.external else ''} {consumer.name}"
            if cname in consumer_names:
                raise ApiError(errors.SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED)
            consumer_names.add(cname)
        if src.external is not None:
            prefixes.add_external(src)
            continue
        origin = existing.get(src.name)
        if origin is None:
            continue
        prefixes.stream_subjects.extend(origin.subjects)
        size = u["max_msg_size"]
        if size > 0 and origin.max_msg_size > 0 and size < origin.max_msg_size:
            raise ApiError(errors.SOURCE_MAX_MESSAGE_SIZE_TOO_BIG)


def _check_prefixes(prefixes: _Prefixes) -> None:
    for pfx in prefixes.deliver:
        if not _is_valid_publish_subject(pfx):
            raise ApiError(errors.STREAM_INVALID_EXTERNAL_DELIVERY_SUBJ, prefix=pfx)
        for sub in prefixes.stream_subjects:
            if subjects_collide(sub, f"{pfx}.{sub}"):
                raise ApiError(errors.STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS, prefix=pfx, subject=sub)
    for api in prefixes.api:
        if not _is_valid_publish_subject(api):
            raise _invalid(
                f"stream external api prefix {go_quote(api)} must be a valid subject "
                "without wildcards"
            )
        if subjects_collide(api, _JS_API_PREFIX):
            raise ApiError(errors.STREAM_EXTERNAL_API_OVERLAP, prefix=api, subject=_JS_API_PREFIX)


def _check_cycles(
    cfg_name: str, u: Mapping[str, Any], existing: Mapping[str, StreamConfig]
) -> None:
    """nats-server's breadth-first cycle check through sources and mirrors."""
    to_visit: list[tuple[str, list[str], list[StreamSource], StreamSource | None]] = [
        (cfg_name, list(u["subjects"] or []), list(u["sources"] or []), u["mirror"])
    ]
    visited: set[str] = set()
    while to_visit:
        name, subjects, sources, mirror = to_visit.pop(0)
        visited.add(name)
        for src in sources:
            if src.external is not None:
                continue
            if src.name in visited:
                if not src.filter_subject or any(
                    subjects_collide(s, src.filter_subject) for s in subjects
                ):
                    raise _invalid("detected cycle")
            elif (other := existing.get(src.name)) is not None:
                to_visit.append(_visit_entry(other))
        if mirror is not None and mirror.external is None:
            if mirror.name in visited:
                raise _invalid("detected cycle")
            if (other := existing.get(mirror.name)) is not None:
                to_visit.append(_visit_entry(other))


def _visit_entry(
    cfg: StreamConfig,
) -> tuple[str, list[str], list[StreamSource], StreamSource | None]:
    return cfg.name, list(cfg.subjects), list(cfg.sources or []), cfg.mirror


def _check_subjects(u: dict[str, Any]) -> None:
    subjects: list[str] = u["subjects"] or []
    if not subjects:
        if u["mirror"] is None and not u["sources"]:
            u["subjects"] = [u["name"]]
        return
    if u["mirror"] is not None:
        raise ApiError(errors.MIRROR_WITH_SUBJECTS)
    seen: set[str] = set()
    index = SubjectIndex(subjects)
    for i, subj in enumerate(subjects):
        if not is_valid_subject(subj):
            raise _invalid("invalid subject")
        if subj in seen:
            raise _invalid("duplicate subjects detected")
        if subj == ">":
            if not u["no_ack"]:
                raise _invalid("capturing all subjects requires no-ack to be true")
            if u["num_replicas"] != 1:
                raise _invalid("capturing all subjects requires replicas of 1")
        if not u["no_ack"]:
            for namespace in _API_NAMESPACES:
                if subjects_collide(subj, namespace) and not subject_is_subset_match(
                    subj, "$JS.EVENT.>"
                ):
                    raise _invalid(
                        "subjects that overlap with jetstream api require no-ack to be true"
                    )
            if subjects_collide(subj, "$SYS.>") and not subject_is_subset_match(
                subj, "$SYS.ACCOUNT.>"
            ):
                raise _invalid("subjects that overlap with system api require no-ack to be true")
        j = index.first_collision(subj, subjects_collide, after=i)
        if j is not None:
            raise _invalid(f"subject {go_quote(subj)} overlaps with {go_quote(subjects[j])}")
        seen.add(subj)


def _check_transform_and_republish(u: dict[str, Any], pedantic: bool) -> None:
    transform = u["subject_transform"]
    if transform is not None and transform.src and not is_valid_subject(transform.src):
        raise ApiError(
            errors.STREAM_TRANSFORM_INVALID_SOURCE, err=f"invalid subject {transform.src}"
        )
    if transform is not None:
        try:
            validate_mapping(transform.src, transform.dest)
        except TransformError as exc:
            raise ApiError(errors.STREAM_TRANSFORM_INVALID_DESTINATION, err=str(exc)) from None
    republish = u["republish"]
    if republish is None:
        return
    src, dest = republish.src, republish.dest
    if not src:
        if pedantic:
            raise _pedantic("republish source can not be empty")
        src = ">"
    subjects: list[str] = u["subjects"] or []
    if (
        dest == ">"
        and src == ">"
        and transform is not None
        and len(subjects) == 1
        and transform.src == subjects[0]
    ):
        if pedantic:
            raise _pedantic("implicit republish based on subject transform")
        src = dest = transform.dest
    if any(subjects_collide(dest, s) for s in subjects):
        raise _invalid("stream configuration for republish destination forms a cycle")
    try:
        SubjectTransform.compile(src, dest)
    except TransformError:
        raise _invalid(
            f"stream configuration for republish with transform from '{src}' to '{dest}' not valid"
        ) from None
    u["republish"] = republish.model_copy(update={"src": src, "dest": dest})


def check_stream_config(
    cfg: StreamConfig, *, pedantic: bool, existing: Mapping[str, StreamConfig]
) -> StreamConfig:
    """``checkStreamCfgLocked``: fill in defaults and validate, in nats-server's order.

    ``existing`` maps stream names to their configs: mirrors/sources read their origins from
    it (mirror_direct inheritance, max_msg_size, cycles). Raises ApiError.
    """
    _check_names_and_sizes(cfg)
    u: dict[str, Any] = dict(cfg)
    _normalize_limits(u, pedantic)
    _normalize_duplicates(u, pedantic)
    _check_feature_flags(u, pedantic)
    prefixes = _Prefixes()
    if u["mirror"] is not None:
        _check_mirror(u, pedantic, existing, prefixes)
    _check_sources(u, existing, prefixes)
    _check_prefixes(prefixes)
    _check_cycles(cfg.name, u, existing)
    _check_subjects(u)
    _check_transform_and_republish(u, pedantic)
    placement = u["placement"]
    if placement == Placement():  # Go drops a placement equal to its zero value
        u["placement"] = placement = None
    if placement is not None and placement.preferred:
        raise _invalid("preferred server not permitted in placement")
    return StreamConfig.model_construct(**u)


# --- Create --------------------------------------------------------------------------------------


def _config_of(req: StreamConfigRequest) -> StreamConfig:
    fields = dict(req)
    fields.pop("pedantic")
    return StreamConfig.model_construct(**fields)


def _check_filters_on_add(cfg: StreamConfig) -> None:
    """addStream's mirror/source filter checks; plain errors there become 10049."""
    mirror = cfg.mirror
    if mirror is not None and not mirror.subject_transforms:
        if mirror.filter_subject and not is_valid_subject(mirror.filter_subject):
            raise ApiError(
                errors.STREAM_CREATE,
                err=f"subject filter '{mirror.filter_subject}' for the mirror invalid subject",
            )
    elif mirror is not None:
        for tr in mirror.subject_transforms or []:
            if tr.src and not is_valid_subject(tr.src):
                raise ApiError(
                    errors.STREAM_CREATE,
                    err=f"invalid subject transform source '{tr.src}' for the mirror: "
                    "invalid subject",
                )
    for src in cfg.sources or []:
        filters = [tr.src for tr in src.subject_transforms or []] or [src.filter_subject]
        for filt in filters:
            if filt and not is_valid_subject(filt):
                raise ApiError(
                    errors.STREAM_CREATE,
                    err=f"subject filter '{filt}' for the source: invalid subject",
                )


def _overlaps_other_stream(
    cfg: StreamConfig, existing: Mapping[str, StreamConfig], skip: str | None
) -> bool:
    index: SubjectIndex | None = None
    for name, other in existing.items():
        if name == skip:
            continue
        for subj in other.subjects:
            index = index or SubjectIndex(cfg.subjects)
            if index.first_collision(subj, subjects_collide) is not None:
                return True
    return False


def normalize_create(
    req_subject_stream: str,
    body: bytes,
    *,
    existing: Mapping[str, StreamConfig],
    clustered: bool = False,
) -> tuple[StreamConfig, bool]:
    """Validate a ``$JS.API.STREAM.CREATE.<stream>`` body; return (config, pedantic).

    The returned config is normalized and carries ``_nats.req.level`` in its metadata (no
    dynamic keys; ``config_to_json`` adds those). If a stream of that name exists with an
    identical config, that existing config is returned (nats-server answers ``did_create:true``
    in standalone mode); a different one raises 10058. ``clustered`` lifts the standalone
    "replicas > 1" rejection (10074); peer placement is the cluster layer's job.
    """
    req = decode_strict(body, StreamConfigRequest)
    pedantic = req.pedantic
    cfg = _with_static_metadata(_config_of(req))
    if req_subject_stream != cfg.name:
        raise ApiError(errors.STREAM_MISMATCH)
    if not _PATH_SEPARATORS.isdisjoint(req_subject_stream):
        raise ApiError(errors.STREAM_NAME_CONTAINS_PATH_SEPARATORS)
    if cfg.sealed:
        raise _invalid("stream configuration for create can not be sealed")
    if cfg.mirror_direct and cfg.mirror is None:
        raise _invalid("stream has no mirror but does have mirror direct")
    cfg = check_stream_config(cfg, pedantic=pedantic, existing=existing)
    if not clustered and cfg.num_replicas > 1:
        raise ApiError(errors.STREAM_REPLICAS_NOT_SUPPORTED)
    old = existing.get(cfg.name)
    if old is not None:
        if _same_config(cfg, old):
            return old, pedantic
        raise ApiError(errors.STREAM_NAME_EXIST)
    _check_filters_on_add(cfg)
    if _overlaps_other_stream(cfg, existing, skip=None):
        raise ApiError(errors.STREAM_SUBJECT_OVERLAP)
    return cfg, pedantic


def refuse_unsupported(cfg: StreamConfig) -> None:
    """Settings nats-server acts on that jetraft does not (yet): refused with an error naming
    them, after every check nats-server makes, so a config nats-server refuses gets its answer.
    Never accepted and ignored."""
    mirror = cfg.mirror
    sources = cfg.sources or []
    unsupported = [
        ("sources[].external", any(src.external is not None for src in sources)),
        ("sources[].consumer", any(src.consumer is not None for src in sources)),
        ("allow_batched", cfg.allow_batched),
        ("mirror.external", mirror is not None and mirror.external is not None),
        ("mirror.consumer", mirror is not None and mirror.consumer is not None),
    ]
    for name, used in unsupported:
        if used:
            raise _invalid(f"stream setting {name!r} is not supported by jetraft yet")


def _same_config(cfg: StreamConfig, old: StreamConfig) -> bool:
    """``reflect.DeepEqual`` after ``copyStreamMetadata``: the stored required level wins."""
    metadata = dict(cfg.metadata or {})
    old_level = (old.metadata or {}).get(REQUIRED_LEVEL_KEY)
    if old_level is None:
        metadata.pop(REQUIRED_LEVEL_KEY, None)
    else:
        metadata[REQUIRED_LEVEL_KEY] = old_level
    candidate = cfg.model_copy(update={"metadata": metadata or None})
    return _comparable(candidate) == _comparable(old)


def _comparable(cfg: StreamConfig) -> dict[str, Any]:
    return cfg.model_dump()


# --- Update --------------------------------------------------------------------------------------


def _update_checks(new: StreamConfig, old: StreamConfig, *, clustered: bool) -> None:
    """``configUpdateCheckLocked``'s restrictions, in order (all 10052 unless noted)."""
    if new.name != old.name:
        raise _invalid("stream configuration name must match original")
    if not clustered and new.num_replicas > 1:
        raise ApiError(errors.STREAM_REPLICAS_NOT_SUPPORTED)
    if new.storage != old.storage:
        raise _invalid("stream configuration update can not change storage type")
    if new.retention != old.retention and "workqueue" in (old.retention, new.retention):
        raise _invalid(
            "stream configuration update can not change retention policy to/from workqueue"
        )
    if not new.sealed and old.sealed:
        raise _invalid("stream configuration update can not unseal a sealed stream")
    if not new.deny_delete and old.deny_delete:
        raise _invalid("stream configuration update can not cancel deny message deletes")
    if not new.deny_purge and old.deny_purge:
        raise _invalid("stream configuration update can not cancel deny purge")
    if new.mirror is not None and new.mirror != old.mirror:
        raise ApiError(errors.STREAM_MIRROR_NOT_UPDATABLE)
    _check_discard_new_per_subject(dict(new))
    if old.allow_msg_ttl and not new.allow_msg_ttl:
        raise _invalid("message TTL status can not be disabled")
    if new.allow_msg_counter != old.allow_msg_counter:
        raise _invalid("stream configuration update can not change message counter setting")
    if old.allow_msg_schedules and not new.allow_msg_schedules:
        raise _invalid("message schedules can not be disabled")
    if old.persist_mode != new.persist_mode:
        raise _invalid("stream configuration update can not change persist mode")


def _sealed(cfg: StreamConfig) -> StreamConfig:
    """Sealing forces these (``configUpdateCheckLocked``), pedantic or not."""
    if not cfg.sealed:
        return cfg
    return cfg.model_copy(
        update={
            "max_age": 0,
            "discard": "new",
            "deny_delete": True,
            "deny_purge": True,
            "allow_rollup_hdrs": False,
        }
    )


def normalize_update(
    req_subject_stream: str,
    body: bytes,
    old: StreamConfig | None,
    *,
    existing: Mapping[str, StreamConfig],
    clustered: bool = False,
) -> tuple[StreamConfig, bool]:
    """Validate a ``$JS.API.STREAM.UPDATE.<stream>`` body against the current config.

    Order as nats-server: decode (10025), ``checkStreamCfg`` on the request (so an invalid
    body is reported even for a missing stream), name vs subject (10056), then a missing stream
    (``old is None`` → 10059), then the update restrictions (10052 / 10055 / 10074), then
    overlap with other streams (10065). Returns the new config with ``_nats.req.level`` set.
    """
    req = decode_strict(body, StreamConfigRequest)
    pedantic = req.pedantic
    cfg = check_stream_config(_config_of(req), pedantic=pedantic, existing=existing)
    if req_subject_stream != cfg.name:
        raise ApiError(errors.STREAM_MISMATCH)
    if old is None:
        raise ApiError(errors.STREAM_NOT_FOUND)
    cfg = _with_static_metadata(cfg)
    cfg = check_stream_config(cfg, pedantic=pedantic, existing=existing)
    _update_checks(cfg, old, clustered=clustered)
    cfg = _sealed(cfg)
    if _overlaps_other_stream(cfg, existing, skip=old.name):
        raise ApiError(errors.STREAM_SUBJECT_OVERLAP)
    return cfg, pedantic


# --- JSON form -----------------------------------------------------------------------------------


def _source_json(src: StreamSource) -> dict[str, Any]:
    out: dict[str, Any] = {"name": src.name}
    if src.opt_start_seq:
        out["opt_start_seq"] = src.opt_start_seq
    if src.opt_start_time is not None:
        out["opt_start_time"] = src.opt_start_time
    if src.filter_subject:
        out["filter_subject"] = src.filter_subject
    if src.subject_transforms:
        out["subject_transforms"] = [
            {"src": tr.src, "dest": tr.dest} for tr in src.subject_transforms
        ]
    if src.external is not None:
        out["external"] = {"api": src.external.api, "deliver": src.external.deliver}
    if src.consumer is not None:
        consumer: dict[str, Any] = {}
        if src.consumer.name:
            consumer["name"] = src.consumer.name
        if src.consumer.deliver_subject:
            consumer["deliver_subject"] = src.consumer.deliver_subject
        out["consumer"] = consumer
    return out


def _omit_empty(out: dict[str, Any], key: str, value: Any) -> None:
    if value:
        out[key] = value


def config_to_json(
    cfg: StreamConfig,
    *,
    server_version: str = SERVER_VERSION,
    api_level: int = SERVER_API_LEVEL,
    dynamic_metadata: bool = True,
) -> dict[str, Any]:
    """The ``config`` object of a StreamInfo, in nats-server's key order and omitempty rules.

    ``metadata`` holds the stored keys (user keys and ``_nats.req.level``) plus, with
    ``dynamic_metadata``, ``_nats.ver`` and ``_nats.level``; Go sorts map keys.
    """
    out: dict[str, Any] = {"name": cfg.name}
    _omit_empty(out, "description", cfg.description)
    _omit_empty(out, "subjects", list(cfg.subjects))
    out["retention"] = cfg.retention
    out["max_consumers"] = cfg.max_consumers
    out["max_msgs"] = cfg.max_msgs
    out["max_bytes"] = cfg.max_bytes
    out["max_age"] = cfg.max_age
    out["max_msgs_per_subject"] = cfg.max_msgs_per_subject
    _omit_empty(out, "max_msg_size", cfg.max_msg_size)
    out["discard"] = cfg.discard
    out["storage"] = cfg.storage
    out["num_replicas"] = cfg.num_replicas
    _omit_empty(out, "no_ack", cfg.no_ack)
    _omit_empty(out, "duplicate_window", cfg.duplicate_window)
    if cfg.placement is not None:
        placement: dict[str, Any] = {}
        _omit_empty(placement, "cluster", cfg.placement.cluster)
        _omit_empty(placement, "tags", list(cfg.placement.tags or []))
        _omit_empty(placement, "preferred", cfg.placement.preferred)
        out["placement"] = placement
    if cfg.mirror is not None:
        out["mirror"] = _source_json(cfg.mirror)
    if cfg.sources:
        out["sources"] = [_source_json(s) for s in cfg.sources]
    out["compression"] = cfg.compression
    _omit_empty(out, "first_seq", cfg.first_seq)
    if cfg.subject_transform is not None:
        out["subject_transform"] = {
            "src": cfg.subject_transform.src,
            "dest": cfg.subject_transform.dest,
        }
    if cfg.republish is not None:
        republish: dict[str, Any] = {}
        _omit_empty(republish, "src", cfg.republish.src)
        republish["dest"] = cfg.republish.dest
        _omit_empty(republish, "headers_only", cfg.republish.headers_only)
        out["republish"] = republish
    out["allow_direct"] = cfg.allow_direct
    out["mirror_direct"] = cfg.mirror_direct
    _omit_empty(out, "discard_new_per_subject", cfg.discard_new_per_subject)
    out["sealed"] = cfg.sealed
    out["deny_delete"] = cfg.deny_delete
    out["deny_purge"] = cfg.deny_purge
    out["allow_rollup_hdrs"] = cfg.allow_rollup_hdrs
    limits: dict[str, Any] = {}
    _omit_empty(limits, "inactive_threshold", cfg.consumer_limits.inactive_threshold)
    _omit_empty(limits, "max_ack_pending", cfg.consumer_limits.max_ack_pending)
    out["consumer_limits"] = limits
    out["allow_msg_ttl"] = cfg.allow_msg_ttl
    _omit_empty(out, "subject_delete_marker_ttl", cfg.subject_delete_marker_ttl)
    _omit_empty(out, "allow_msg_counter", cfg.allow_msg_counter)
    _omit_empty(out, "allow_atomic", cfg.allow_atomic)
    _omit_empty(out, "allow_msg_schedules", cfg.allow_msg_schedules)
    if cfg.persist_mode == "async":
        out["persist_mode"] = "async"
    _omit_empty(out, "allow_batched", cfg.allow_batched)
    metadata = dict(cfg.metadata or {})
    if dynamic_metadata:
        metadata[SERVER_VERSION_KEY] = server_version
        metadata[SERVER_LEVEL_KEY] = str(api_level)
    if metadata:
        out["metadata"] = dict(sorted(metadata.items()))
    return out


def check_restorable(cfg: StreamConfig, existing: Mapping[str, StreamConfig]) -> None:
    """A restored stream (STREAM.RESTORE, once its upload is whole) must not take a name or
    subjects another stream took meanwhile."""
    if cfg.name in existing:
        raise ApiError(errors.STREAM_NAME_EXIST_RESTORE_FAILED)
    if _overlaps_other_stream(cfg, existing, skip=None):
        raise ApiError(errors.STREAM_SUBJECT_OVERLAP)
