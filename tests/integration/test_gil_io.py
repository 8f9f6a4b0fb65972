"""The I/O thread's non-blocking zmq calls (esault.transport.gil_io) on real sockets: ZmqIO, which keeps the GIL,
reads and writes exactly what pyzmq's own calls do; their speed is bench/io_thread_gil.py's."""

from __future__ import annotations

import contextlib
import itertools
import socket
import sys

import pytest
import zmq
from hypothesis import given, settings, strategies as st
from zmq.auth.thread import ThreadAuthenticator

from esault.testing import wait_until
from esault.transport.gil_io import PyzmqIO, ZmqIO, loaded_libzmq, nonblocking_io

_IDS = itertools.count()
IOS = ["pyzmq", "libzmq"]


def libzmq() -> str:
    """pyzmq's libzmq, as the endpoint finds it: a pip wheel on Linux (CI's, this machine's) ships it apart."""
    library = loaded_libzmq()
    assert library is not None, "pyzmq's libzmq is not in /proc/self/maps: the endpoint would use pyzmq's calls"
    return library


def make_io(kind: str):
    return PyzmqIO() if kind == "pyzmq" else ZmqIO(libzmq())


@contextlib.contextmanager
def router_and_dealer():
    """A ROUTER and a DEALER of the shared context, closed at the end; the test binds and connects them."""
    ctx = zmq.Context.instance()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    try:
        yield router, dealer
    finally:
        router.close(linger=0)
        dealer.close(linger=0)


@pytest.fixture
def curve_pair():
    """A ROUTER (Curve server, any client key admitted: User-Id is the client's key) and a DEALER into it."""
    ctx = zmq.Context()
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY)
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    router = ctx.socket(zmq.ROUTER)
    router.curve_server, router.curve_publickey, router.curve_secretkey = True, server_public, server_secret
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer = ctx.socket(zmq.DEALER)
    dealer.curve_publickey, dealer.curve_secretkey, dealer.curve_serverkey = client_public, client_secret, server_public
    dealer.connect(f"tcp://127.0.0.1:{port}")
    yield router, dealer, client_public.decode()
    for sock in (router, dealer):
        sock.close(linger=0)
    auth.stop()
    ctx.term()


def received_all(io, router, n: int) -> list:
    got: list = []

    def more() -> bool:
        while router.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            got.append(io.recv_multipart(router))
        return len(got) >= n

    wait_until(more, 10.0, message=f"{n} messages")
    return got


@pytest.mark.parametrize("kind", IOS)
def test_a_message_arrives_whole_with_the_key_its_connection_proved(curve_pair, kind):
    router, dealer, client_key = curve_pair
    io = make_io(kind)
    assert io.recv_multipart(router) is None  # nothing waits: None, not an error
    sent = [[b"spu-1", b""], [b"spu-2", b"\x00" * 3], [b"a", b"b" * 1_000_000], [b"x"]]
    for parts in sent:
        assert io.send_multipart(dealer, parts)
    got = received_all(io, router, len(sent))
    assert [parts[1:] for parts, _ in got] == sent  # [routing id, *parts]
    assert {user for _, user in got} == {client_key}
    assert io.recv_multipart(router) is None


@settings(max_examples=40, deadline=None)
@given(messages=st.lists(st.lists(st.binary(max_size=300), min_size=1, max_size=4), min_size=1, max_size=6))
def test_the_libzmq_calls_read_and_write_what_pyzmqs_do(messages):
    library = libzmq()
    address = f"inproc://gil-io-{next(_IDS)}"
    with router_and_dealer() as (router, dealer):
        router.bind(address)
        dealer.connect(address)
        fast, plain = ZmqIO(library), PyzmqIO()
        for i, parts in enumerate(messages):  # the two write in turn, the two read in turn
            assert (fast if i % 2 else plain).send_multipart(dealer, parts)
        got = [(fast if i % 2 else plain).recv_multipart(router) for i in range(len(messages))]
        assert [parts[1:] for parts, _ in got] == messages
        assert {user for _, user in got} == {""}  # no Curve: no User-Id
        assert fast.recv_multipart(router) is None and plain.recv_multipart(router) is None


@pytest.mark.parametrize("kind", IOS)
def test_a_socket_that_would_block_takes_nothing_and_says_so(kind):
    """No peer yet (IMMEDIATE): the send would block, returns False, and no part of it is queued."""
    io = make_io(kind)
    with socket.socket() as probe:  # a port nobody listens on, for now
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    with router_and_dealer() as (router, dealer):
        dealer.setsockopt(zmq.IMMEDIATE, 1)
        dealer.connect(address)
        assert not io.send_multipart(dealer, [b"refused", b"1"])
        router.bind(address)
        wait_until(lambda: io.send_multipart(dealer, [b"taken", b"2"]), 10.0, message="the peer to connect")
        parts, _ = received_all(io, router, 1)[0]
        assert parts[1:] == [b"taken", b"2"]
        assert io.recv_multipart(router) is None  # nothing of the refused message arrived


@pytest.mark.parametrize("kind", IOS)
def test_drain_reads_every_waiting_message_and_a_closed_socket_raises_instead_of_crashing(kind):
    io = make_io(kind)
    ctx = zmq.Context.instance()
    address = f"inproc://gil-io-{next(_IDS)}"
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind(address)
    b.connect(address)
    for _ in range(5):
        b.send(b"")
    io.drain(a)
    assert not a.getsockopt(zmq.EVENTS) & zmq.POLLIN
    a.close(linger=0)
    b.close(linger=0)
    with pytest.raises(zmq.ZMQError):
        io.recv_multipart(a)
    with pytest.raises(zmq.ZMQError):
        io.send_multipart(b, [b"x"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the library is found in /proc/self/maps")
def test_on_linux_the_endpoint_calls_the_libzmq_pyzmq_loaded():
    library = loaded_libzmq()
    assert library is not None and "libzmq" in library
    assert isinstance(nonblocking_io(), ZmqIO)
