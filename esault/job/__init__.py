"""The job's control: the driver side of one running topology.

`Job` (start, status, scale, wait, stop), one `UnitActor` per spout or bolt (its SPUs and their
routing table), the control thread (`coordinator`: reconfigurations, checkpoints, rollbacks, one at
a time) and its atomic groups (`group`), operations checked into requests (`requests`), the latency
prober (`prober`), how a run ended (`outcome`), the GC policy while jobs run (`gc_policy`). The
controllers it runs live in esault.control; the SPUs it starts, in esault.datapath.
"""
