"""An attacker process: well-formed esault frames sent to a cluster's sockets from raw pyzmq.

Usage: python attacker.py '<json plan>'. The plan names the target addresses,
how to connect ("none": no Curve at all; "wrong": a Curve key nobody admitted;
"admitted": a given key pair) and the attacks. It prints one JSON line:
what it sent and whether any reply ever came back.
"""

from __future__ import annotations

import json
import sys
import time

import zmq

from esault.messages.acking import AckFail
from esault.messages.cluster import Shutdown, StartSpu, StatusRequest, SubmitJob, WorkerHeartbeat, WorkerHello
from esault.messages.control import SpuConfig
from esault.messages.data import DataBatch
from esault.datapath.context import job_actor
from esault.transport.address import Address
from esault.transport.wire import encode_frame


def dealer(ctx: zmq.Context, plan: dict, address: str, server_key: str, name: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, plan.get("linger_ms", 2000))  # a flood needs longer: a slow target reads it late
    sock.setsockopt(zmq.ROUTING_ID, name.encode())
    sock.setsockopt(zmq.SNDHWM, 100_000)
    sock.setsockopt(zmq.SNDTIMEO, 10_000)  # a send no connection takes gives up (counted) instead of hanging the run
    if plan["auth"] != "none":
        if plan["auth"] == "wrong":
            public, secret = zmq.curve_keypair()
        else:
            public, secret = plan["public"].encode(), plan["secret"].encode()
        sock.curve_publickey, sock.curve_secretkey = public, secret
        sock.curve_serverkey = server_key.encode()
    sock.connect(address)
    return sock


def attacks(plan: dict, reply_address: str) -> dict[str, list[tuple[str, object]]]:
    """Per target process: (actor, message) pairs, the attacks of issue #9."""
    unit = {"name": "pwn", "module": "os", "qualname": "system", "folder": "", "main_file": "",
            "parallelism": 1, "is_spout": False, "params": {"command": f"touch {plan['canary']}"},
            "inputs": [], "pe_idle_timeout": 1.0, "max_pending": 1, "elasticity": {}, "chain": False,
            "stages": [], "placement": "worker"}
    spu = SpuConfig("pwn", "pwn", 999, None, ())
    worker = [
        ("host", SubmitJob("pwn", [unit], {})),
        ("host", StartSpu("pwn", "pwn", spu)),
        ("host", Shutdown()),
        *((f"spu-{i}", DataBatch(0, plan["source"], [plan["forged_key"]], [1], [], [])) for i in plan["spus"]),
    ]
    driver = [
        ("cluster", WorkerHello(plan["name"], reply_address, 1)),
        ("cluster", WorkerHeartbeat(plan["name"], [(plan["topology"], "count", 1, {"processed": 1})])),
        ("cluster", StatusRequest(1, Address(plan["name"], "status"), reply_address)),
        *((f"spu-{i}", DataBatch(0, plan["source"], [plan["forged_key"]], [1], [], [])) for i in plan["spus"]),
        (job_actor(plan["topology"], "acker"), AckFail(0, "forged")),
    ]
    return {"worker": worker, "driver": [a for a in driver if a is not None]}


def main() -> None:
    plan = json.loads(sys.argv[1])
    ctx = zmq.Context()
    inbox = ctx.socket(zmq.ROUTER)  # where replies would come (status, peer lists)
    if plan["auth"] != "none":
        inbox.curve_server = True
        public, secret = zmq.curve_keypair() if plan["auth"] == "wrong" else (plan["public"].encode(),
                                                                                  plan["secret"].encode())
        inbox.curve_publickey, inbox.curve_secretkey = public, secret
    port = inbox.bind_to_random_port("tcp://127.0.0.1")
    reply_address = f"tcp://127.0.0.1:{port}"
    sent = unsent = 0

    def send(sock: zmq.Socket, parts: list[bytes]) -> None:
        nonlocal sent, unsent
        sent += 1
        try:
            sock.send_multipart(parts)
        except zmq.Again:  # no connection took it within SNDTIMEO: it reached nobody
            unsent += 1

    plans = attacks(plan, reply_address)
    for target in plan["targets"]:
        sock = dealer(ctx, plan, target["address"], target["key"], plan["name"])
        for actor, message in plans[target["kind"]]:
            send(sock, [actor.encode(), encode_frame(message)])
        for i in range(plan.get("flood", 0)):  # valid-looking frames to actors that do not exist
            batch = DataBatch(0, "x", [f"k{i}"], ["v" * plan.get("flood_bytes", 1024)], [], [])
            send(sock, [f"spu-{10**6 + i}".encode(), encode_frame(batch)])
        sock.close()  # linger: what was accepted goes out
    replies = 0
    poller = zmq.Poller()
    poller.register(inbox, zmq.POLLIN)
    listen = int(plan.get("listen_ms", 1500))
    give_up = time.monotonic() + 10 * listen / 1000  # a reply stream that never pauses fails the check anyway
    while time.monotonic() < give_up and poller.poll(listen):  # a negative check: nothing may arrive in the window
        inbox.recv_multipart()
        replies += 1
    inbox.close(0)
    ctx.term()
    print(json.dumps({"sent": sent, "unsent": unsent, "replies": replies}))


if __name__ == "__main__":
    main()
