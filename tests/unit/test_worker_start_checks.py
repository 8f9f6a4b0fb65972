"""What is checked before a worker joins or a unit is sent to one: each mistake is one clear error."""

from __future__ import annotations

import threading

import pytest

from esault import Bolt, TopologyBuilder
from esault.cluster.unit_wire import check_sendable
from esault.cluster.worker import driver_endpoint
from esault.errors import ConfigError, UnitStartError
from esault.testing import ListSpout


@pytest.mark.parametrize("given", ["nohost", "10.0.0.5", ":5555", "host:port", "host:70000", "tcp://h"])
def test_a_driver_address_without_host_and_port_says_what_to_give(given: str) -> None:
    with pytest.raises(ConfigError, match=rf"--driver '{given}' is not HOST:PORT: give the address `esault run` "
                                          r"prints as 'driver listening on HOST:PORT'"):
        driver_endpoint(given)


def test_a_driver_host_that_does_not_resolve_is_one_line_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"--driver 'nohost\.invalid:5555': cannot resolve host 'nohost\.invalid' "
                                          r"\(.+\); check the name, or give the driver's IP address"):
        driver_endpoint("nohost.invalid:5555")


def test_a_good_driver_address_becomes_a_tcp_endpoint() -> None:
    assert driver_endpoint("127.0.0.1:5555") == "tcp://127.0.0.1:5555"
    assert driver_endpoint("tcp://localhost:1") == "tcp://localhost:1"


class Holder(Bolt):
    def __init__(self, lock=None, path="x"):
        self.lock, self.path = lock, path

    def process(self, tup):
        pass


def test_a_param_that_cannot_reach_a_worker_names_the_bolt_and_the_param() -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout, params={"items": [[1, "a"]]})
    b.set_bolt("hold", Holder, params={"lock": threading.Lock(), "path": "p"}, chain=False).shuffle_grouping("src")
    topology = b.build()
    check_sendable(topology.unit("src"))
    with pytest.raises(UnitStartError, match=r"bolt 'hold': param 'lock' \(lock\) cannot be sent to the worker "
                                             r"processes \(.*lock.*\)\. Give plain data in params .* or run every "
                                             r"unit in one process with `--cluster threads`"):
        check_sendable(topology.unit("hold"))


def test_a_chained_bolts_params_are_checked_with_its_head() -> None:
    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout, params={"items": [[1, "a"]]})
    b.set_bolt("hold", Holder, params={"lock": threading.Lock()}, elastic=False).shuffle_grouping("src")  # chained
    topology = b.build()
    assert topology.chained("hold")
    with pytest.raises(UnitStartError, match=r"bolt 'hold': param 'lock'"):
        check_sendable(topology.unit("src"))


def test_a_class_typed_into_an_interactive_session_is_refused_for_the_workers_naming_the_way_out(monkeypatch) -> None:
    from esault.cluster import unit_wire

    class Typed(Bolt):
        def process(self, tup):
            pass

    Typed.__module__ = "__main__"
    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout, params={"items": [[1, "a"]]})
    b.set_bolt("typed", Typed, chain=False).shuffle_grouping("src")
    b.set_bolt("here", Typed, placement="driver").shuffle_grouping("typed")
    topology = b.build()
    monkeypatch.setattr(unit_wire, "_main_file", lambda: "/jobs/script.py")
    check_sendable(topology.unit("typed"))  # a script run with `python file.py`: the workers load the file
    monkeypatch.setattr(unit_wire, "_main_file", lambda: "")  # a REPL or notebook: no file to load
    with pytest.raises(UnitStartError, match=r"bolt 'typed': its class .*Typed is defined in an interactive session "
                                             r"\(__main__ has no file\), which worker processes cannot import\. Put "
                                             r"the class in a \.py file .* or run every unit in one process"):
        check_sendable(topology.unit("typed"))
    check_sendable(topology.unit("here"))  # it runs in the driver: nothing to import elsewhere


def test_a_worker_warns_when_importing_a_topology_module_is_slow_naming_the_module_and_the_way_out(
        tmp_path, monkeypatch, caplog) -> None:
    import logging
    import sys

    from esault.cluster import unit_wire

    (tmp_path / "slow_topology_module.py").write_text(
        "from esault import Bolt\nclass Up(Bolt):\n    def process(self, tup):\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import slow_topology_module

    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout, params={"items": [[1, "a"]]})
    b.set_bolt("up", slow_topology_module.Up).shuffle_grouping("src")
    wire = unit_wire.unit_to_wire(b.build().unit("up"))
    monkeypatch.delitem(sys.modules, "slow_topology_module")  # as in a fresh worker: not imported yet
    monkeypatch.setattr(unit_wire, "SLOW_IMPORT_SECONDS", -1.0)  # any import counts as slow
    with caplog.at_level(logging.WARNING, logger="esault.worker"):
        assert unit_wire.unit_from_wire(wire).cls.__name__ == "Up"
        unit_wire.unit_from_wire(wire)  # imported now: no second warning
    warnings = [r.getMessage() for r in caplog.records if "runs in every worker process" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("importing slow_topology_module for unit 'up' took")
    assert "esault.in_worker()" in warnings[0]
