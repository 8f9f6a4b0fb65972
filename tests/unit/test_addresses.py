"""Bound vs advertised addresses: what a process tells its peers."""

import socket

import pytest

from esault.cluster.addresses import advertised, bind_host_toward, is_loopback, split_host_port
from esault.errors import ConfigError


def test_an_advertised_host_without_a_port_keeps_the_bound_port():
    assert advertised("tcp://0.0.0.0:7001", "10.1.2.3") == "tcp://10.1.2.3:7001"
    assert advertised("tcp://0.0.0.0:7001", "gateway.example:9000") == "tcp://gateway.example:9000"


def test_a_specific_bound_host_is_advertised_as_it_is():
    assert advertised("tcp://127.0.0.1:5000") == "tcp://127.0.0.1:5000"


def test_a_wildcard_bind_is_advertised_as_the_route_toward_the_peer_not_the_host_name():
    assert advertised("tcp://0.0.0.0:5000", toward="127.0.0.1") == f"tcp://{socket.gethostname()}:5000"
    address = advertised("tcp://0.0.0.0:5000", toward="10.255.255.1")  # any routable address: no packet is sent
    host = address[len("tcp://"):].rsplit(":", 1)[0]
    assert host != socket.gethostname() and not is_loopback(host)


def test_a_local_driver_keeps_a_worker_on_loopback():
    assert bind_host_toward("127.0.0.1") == "127.0.0.1"
    assert bind_host_toward("localhost") == "127.0.0.1"


@pytest.mark.parametrize("text", ["nohost", "host:", "host:99999", ":5000", "host:port"])
def test_a_malformed_host_port_names_the_option_and_the_form(text):
    with pytest.raises(ConfigError, match=r"--driver .* is not HOST:PORT"):
        split_host_port(text, "--driver")


def test_an_advertised_address_may_omit_the_port():
    assert split_host_port("10.0.0.2", "--advertise", port_required=False) == ("10.0.0.2", None)
    assert split_host_port("[::1]:80", "--advertise") == ("::1", 80)
