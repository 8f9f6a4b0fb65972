"""ListSpout, the testing kit's rewindable source: its position only moves forward, whatever limit() says."""

from esault.testing import ListSpout


class Limited(ListSpout):
    def __init__(self, items, limits):
        super().__init__(items, per_call=4)
        self.limits = limits

    def limit(self) -> int:
        return self.limits.pop(0) if len(self.limits) > 1 else self.limits[0]


def emitted_by(spout, calls):
    out = []
    spout.emit = lambda key, value, msg_id=None: out.append(msg_id)
    for _ in range(calls):
        spout.next_tuple()
    return out


def test_a_limit_that_goes_down_holds_the_spout_back_and_never_rewinds_it():
    # a limit read from a file being rewritten can read 0 for a moment: the position must not go back to 0
    spout = Limited([("k", i) for i in range(12)], [8, 8, 0, 12, 12, 12])
    assert emitted_by(spout, 6) == list(range(12))
    assert spout.position == 12


def test_an_empty_list_spout_finishes_at_once():
    spout = ListSpout([])
    finished = []
    spout.finish = lambda: finished.append(True)
    spout.next_tuple()
    assert finished
