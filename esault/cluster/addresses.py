"""Which address a process listens on and which one it tells others: the two differ across hosts.

A process binds a local interface and advertises an address its peers can
reach. On one machine both are 127.0.0.1. Across hosts the host name is a
poor default: Debian maps it to 127.0.1.1 in /etc/hosts, so a peer that
connects to it reaches itself. The default here is the local address the
kernel routes toward the process we talk to (the driver, for a worker or a
status client): reachable from there by construction, no DNS involved.
`--advertise HOST[:PORT]` overrides it (NAT, port forwarding, a DNS name).
"""

from __future__ import annotations

import ipaddress
import socket

from esault.errors import ConfigError

WILDCARD_HOSTS = ("0.0.0.0", "*", "::", "")


def split_host_port(text: str, what: str, port_required: bool = True) -> tuple[str, int | None]:
    """(host, port) of "HOST:PORT" or "tcp://HOST:PORT" (port optional unless `port_required`)."""
    bare = text[len("tcp://"):] if text.startswith("tcp://") else text
    host, sep, port = bare.rpartition(":")
    if not sep:
        host, port = bare, ""
    host = host.strip("[]")
    if not host or (port and not (port.isdigit() and 0 <= int(port) < 65536)) or (port_required and not port):
        form = "HOST:PORT" if port_required else "HOST[:PORT]"
        raise ConfigError(f"{what} {text!r} is not {form}, e.g. {what} 10.0.0.5:{5555 if port_required else 7001}")
    return host, int(port) if port else None


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and names that resolve only there (localhost)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError):
            return False
        return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def route_source(remote_host: str) -> str:
    """The local IP the kernel would use to reach `remote_host` (a UDP connect: no packet is sent)."""
    family = socket.AF_INET6 if ":" in remote_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((remote_host, 9))
        except OSError as exc:
            raise ConfigError(f"no route from this host to {remote_host!r} ({exc.strerror or exc}); pass "
                              "--bind-host and --advertise with an address the other side can reach") from None
        return probe.getsockname()[0]


def bind_host_toward(remote_host: str) -> str:
    """Where to listen when the only peer we know is `remote_host`: loopback stays loopback."""
    return "127.0.0.1" if is_loopback(remote_host) else route_source(remote_host)


def advertised(bound: str, advertise: str | None = None, toward: str | None = None) -> str:
    """tcp://HOST:PORT that others should connect to, for a socket bound at `bound` (tcp://HOST:PORT).

    `advertise` (HOST[:PORT], port defaulting to the bound one) wins. A
    wildcard bind is advertised as the route source toward `toward`, else as
    this machine's host name (a container's service name in docker-compose).
    """
    host, port = split_host_port(bound, "bound address")
    if advertise:
        a_host, a_port = split_host_port(advertise, "--advertise", port_required=False)
        return f"tcp://{_bracket(a_host)}:{a_port or port}"
    if host in WILDCARD_HOSTS:
        host = route_source(toward) if toward and not is_loopback(toward) else socket.gethostname()
    return f"tcp://{_bracket(host)}:{port}"


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
