"""RayProvider's checks that need no Ray cluster: its actor options, what it takes of an actor's answer, the
address forms, and the keys a Ray actor is handed."""

from __future__ import annotations

import pytest

from esault.cluster.credentials import WorkerKeys
from esault.cluster.providers.ray import _actor_options, _checked_info, _host_port
from esault.errors import ConfigError, ResourceError


def test_the_actor_options_carry_cpus_memory_resources_and_labels():
    assert _actor_options(1, None, None, None) == {"num_cpus": 1}
    assert _actor_options(0.5, 2**30, {"esault": 1}, {"zone": "a"}) == {
        "num_cpus": 0.5, "memory": 2**30, "resources": {"esault": 1}, "label_selector": {"zone": "a"}}


@pytest.mark.parametrize("args, message", [
    ((0, None, None, None), r"num_cpus=\.\.\.\) must be a positive number of CPUs per worker, got 0"),
    ((True, None, None, None), r"num_cpus.*got True"),
    ((1, 1.5, None, None), r"memory=\.\.\.\) is bytes per worker \(a positive int, e.g. 2 \* 2\*\*30\), got 1.5"),
    ((1, None, {"esault": 0}, None), r"resources=\.\.\.\) maps custom resource names to positive amounts"),
    ((1, None, {"CPU": 2}, None), r"give CPUs and memory as num_cpus= and memory="),
    ((1, None, None, {"zone": 1}), r"label_selector=\.\.\.\) maps node label names to values"),
])
def test_a_bad_actor_option_is_refused_naming_it_and_the_right_form(args, message):
    with pytest.raises(ConfigError, match=message):
        _actor_options(*args)


def test_an_actors_answer_is_taken_only_as_far_as_it_is_plausible():
    assert _checked_info({"node": "ff01", "ip": "127.0.0.1", "pid": 42}) == ("ff01", "127.0.0.1", 42)
    assert _checked_info({"node": "x" * 65, "ip": "1.2.3.4; rm -rf", "pid": True}) == ("unknown", "unknown", 0)
    assert _checked_info(["not", "a", "dict"]) == ("unknown", "unknown", 0)


@pytest.mark.parametrize("address", ["nonsense", "host:", "ray://host:99999", ":6379"])
def test_an_address_that_is_no_host_and_port_is_refused_with_the_forms_that_work(address):
    with pytest.raises(ResourceError, match=r"is not HOST:PORT, ray://HOST:PORT or 'auto'.*ray start --head"):
        _host_port(address, "start one with `ray start --head`")
    assert _host_port("ray://10.0.0.5:10001", "") == ("10.0.0.5", 10001)


def test_keys_handed_to_a_ray_actor_that_are_not_keys_name_where_they_came_from():
    with pytest.raises(ConfigError, match=r"worker keys on the Ray actor of worker r1 are not \{public, secret"):
        WorkerKeys.from_json("{}", source="the Ray actor of worker r1")
    with pytest.raises(ConfigError, match=r"worker keys on stdin are not"):
        WorkerKeys.from_json("not json")
