"""Hosts of their own for the system tests: network namespaces on one bridge, linked to this host.

`network` (a fixture) makes a bridge in a namespace of its own, with this host's side at SUBNET.1; each
`network.host()` is a fresh namespace on it at the next address. Processes started in a host's namespace
(`ip netns exec NAME ...`) reach this host, and each other, only through the bridge, as separate machines do.
Needs root / CAP_NET_ADMIN and iproute2 (.ci/run installs it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.system.test_across_hosts import _ip


@dataclass
class Network:
    """A bridge in a namespace of its own; the test's side has address .1 on it, each host the next one."""

    hub: str
    subnet: str
    hosts: list[str] = field(default_factory=list)

    @property
    def services(self) -> str:
        return f"{self.subnet}.1"

    def host(self) -> tuple[str, str]:
        """A fresh host: (its namespace, its address)."""
        n = len(self.hosts) + 2
        name = f"{self.hub}h{n}"
        for step in (("netns", "add", name), ("link", "add", f"{name}v", "type", "veth", "peer", "name", f"{name}p"),
                     ("link", "set", f"{name}v", "netns", name), ("link", "set", f"{name}p", "netns", self.hub),
                     ("-n", self.hub, "link", "set", f"{name}p", "master", "br0"),
                     ("-n", self.hub, "link", "set", f"{name}p", "up"),
                     ("-n", name, "addr", "add", f"{self.subnet}.{n}/24", "dev", f"{name}v"),
                     ("-n", name, "link", "set", f"{name}v", "up"), ("-n", name, "link", "set", "lo", "up")):
            done = _ip(*step)
            assert done.returncode == 0, f"ip {' '.join(step)}: {done.stderr}"
        self.hosts.append(name)
        return name, f"{self.subnet}.{n}"


@pytest.fixture
def network() -> Iterator[Network]:
    tag = f"ens{os.getpid() % 100000}"
    subnet = f"10.{150 + os.getpid() % 50}.{os.getpid() % 250}"
    made = _ip("netns", "add", tag)
    if made.returncode != 0:
        pytest.fail(f"cannot create network namespaces here (needs root / CAP_NET_ADMIN and iproute2, which "
                    f".ci/run installs): {made.stderr.strip()}")
    net = Network(tag, subnet)
    outside = f"{tag}o"
    try:
        for step in (("-n", tag, "link", "add", "br0", "type", "bridge"), ("-n", tag, "link", "set", "br0", "up"),
                     ("link", "add", outside, "type", "veth", "peer", "name", f"{tag}op"),
                     ("link", "set", f"{tag}op", "netns", tag),
                     ("-n", tag, "link", "set", f"{tag}op", "master", "br0"), ("-n", tag, "link", "set", f"{tag}op", "up"),
                     ("addr", "add", f"{subnet}.1/24", "dev", outside), ("link", "set", outside, "up")):
            done = _ip(*step)
            assert done.returncode == 0, f"ip {' '.join(step)}: {done.stderr}"
        yield net
    finally:
        _ip("link", "del", outside)
        for name in net.hosts:
            _ip("netns", "del", name)
        _ip("netns", "del", tag)
