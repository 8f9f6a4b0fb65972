"""A chain SPU's busy time counts its link work: a middle SPU gets no entries, only its neighbours' blocks, and
its busy fraction (job.status(), and the tau that shedding reads) must still show the joining it does."""

from __future__ import annotations

from esault.testing import reset_collected
from test_join_chain_spus import STAGES, chain_topology, make_stream


def test_a_middle_chain_spu_that_only_receives_link_messages_reports_busy_time(cluster, config):
    lefts, rights = make_stream(300, 3), make_stream(300, 4)
    STAGES["busy"] = 0
    job = cluster.submit(chain_topology(lefts, rights, 15, "busy", [300], spus=3).build(),
                         config.replace(guarantee="none"))
    assert job.wait(60), job.status()
    job.stop()
    reset_collected("out")  # the pairs are not this test's point; later tests read "out" afresh
    spus = job.final_status["units"]["j"]["spus"]
    middle = sorted(spus)[1]
    assert spus[middle]["processed"] == 0  # no entries: R enters the head, S the tail
    assert spus[middle]["busy_us"] > 0, spus
