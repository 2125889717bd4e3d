"""A hosted stream's StreamInfo, as the JetStream API and the cluster's info requests send it.

Must never: read anything but the host's own engine, store and attachments (no I/O, no waiting).
"""

from __future__ import annotations

import time
from typing import Any

from cluster.stream_host import AnyStreamHost
from protocol import api_json


def host_info(
    host: AnyStreamHost,
    server_name: str,
    type_: str,
    *,
    deleted_details: bool = False,
    subjects: dict[str, int] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """``type_`` and ``kw`` as for ``api_json.stream_info``; attachments (a mirror's ``mirror``
    object) add their keys unless the caller gave them."""
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
        consumer_count=len(stream.consumers),
        # records that failed their checksum are reported as nats-server reports lost data
        lost_msgs=sorted(c.seq for c in corrupt if c.seq is not None) or None,
    )
    for key, value in host.attachment_info().items():
        kw.setdefault(key, value)
    return api_json.stream_info(
        host.config,
        state,
        stream.created_ns,
        time.time_ns(),
        server_name,
        type_=type_,
        **kw,
    )
