"""The client URLs a cluster node tells its clients about (INFO ``connect_urls``), so that a client
given one node's address learns the others and can fail over to them (nats-server
``getClientConnectURLs``).

A node advertises ``client_advertise`` when it is set (``host`` or ``host:port``, the client port
by default); else, listening on every address (``0.0.0.0`` or ``::``), each global unicast address
of its interfaces (loopback and link-local left out); else its listen address. Each node tells its
peers its own list in the route HELLO; the list a client sees is the node's own followed by those
of the peers whose routes are up, in peer-name order. ``cluster { no_advertise: true }`` keeps
the list out of every INFO.

Must never: trust a peer's list beyond its shape (``peer_client_urls`` checks it), or put a
wildcard address in a URL.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import Any, Final

import psutil

log = logging.getLogger("jetraft.routes")

CLIENT_URLS_MAX: Final = 32  # a peer's HELLO may name this many client URLs
CLIENT_URL_BYTES_MAX: Final = 256
_WILDCARDS: Final = frozenset({"", "0.0.0.0", "::"})


class ClientAdvertiseError(ValueError):
    """``client_advertise`` is not ``host`` or ``host:port``."""


def join_host_port(host: str, port: int) -> str:
    """Go's ``net.JoinHostPort``: IPv6 literals in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_advertise(text: str, default_port: int) -> tuple[str, int]:
    """``host[:port]`` (``[v6]:port``, or a bare IPv6 literal) as (host, port); port 0 or -1 is
    the client port, as in nats-server's ``parseHostPort``."""
    host, port_text = text.strip(), ""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            raise ClientAdvertiseError(f"client_advertise {text!r}: missing ']'")
        rest, host = host[end + 1 :], host[1:end]
        if rest:
            if not rest.startswith(":"):
                raise ClientAdvertiseError(f"client_advertise {text!r}: expected host[:port]")
            port_text = rest[1:]
        _ipv6(host, text)
    elif host.count(":") == 1:
        host, _, port_text = host.partition(":")
    elif ":" in host:
        _ipv6(host, text)  # "nats://host:4222" is not one
    if not host or any(c.isspace() for c in host):
        raise ClientAdvertiseError(f"client_advertise {text!r}: expected host[:port]")
    return host, _port(port_text, default_port, text)


def parse_advertise(text: str, default_port: int) -> str:
    """``client_advertise`` as the URL clients dial (peers take one of at most
    ``CLIENT_URL_BYTES_MAX`` bytes)."""
    url = join_host_port(*split_advertise(text, default_port))
    if len(url.encode()) > CLIENT_URL_BYTES_MAX:
        raise ClientAdvertiseError(f"client_advertise: over {CLIENT_URL_BYTES_MAX} bytes")
    return url


def _ipv6(host: str, whole: str) -> None:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        raise ClientAdvertiseError(f"client_advertise {whole!r}: too many colons") from None


def _port(text: str, default_port: int, whole: str) -> int:
    if text in ("", "0", "-1"):
        return default_port
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ClientAdvertiseError(f"client_advertise {whole!r}: bad port {text!r}")
    return int(text)


def interface_addresses() -> list[str]:
    """Every global unicast address of this machine's interfaces (Go's ``IsGlobalUnicast``:
    private ranges count, loopback, link-local and multicast do not)."""
    found: list[str] = []
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                ip = ipaddress.ip_address(addr.address.split("%", 1)[0])
            except ValueError:
                continue
            if ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified:
                continue
            if ip.version == 4 and ip == ipaddress.IPv4Address("255.255.255.255"):
                continue
            found.append(str(ip))
    return found


def advertised_client_urls(advertise: str, host: str, port: int) -> list[str]:
    """This node's own client URLs (see the module docstring), at most what a peer takes."""
    if advertise:
        return [parse_advertise(advertise, port)]
    if host in _WILDCARDS:
        urls = [join_host_port(ip, port) for ip in interface_addresses()]
        if len(urls) > CLIENT_URLS_MAX:
            log.warning(
                "advertising %d of this machine's %d addresses to clients (set"
                " client_advertise to choose one)",
                CLIENT_URLS_MAX,
                len(urls),
            )
        return urls[:CLIENT_URLS_MAX]
    return [join_host_port(host, port)]


def peer_client_urls(value: Any) -> list[str] | None:
    """A peer's HELLO ``client_urls`` if it has the expected shape (a short list of short
    strings without spaces or control characters), else None."""
    if type(value) is not list or len(value) > CLIENT_URLS_MAX:
        return None
    for url in value:
        if type(url) is not str or not 0 < len(url.encode(errors="surrogatepass")) <= (
            CLIENT_URL_BYTES_MAX
        ):
            return None
        if not url.isprintable() or any(c.isspace() for c in url):
            return None
    return list(value)
