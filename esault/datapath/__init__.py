"""The data path: the actors tuples flow through, and their parts.

Spout SPUs (`spout_spu`) and bolt SPUs (`bolt_spu`), started per unit by `actors`, which picks a bolt
SPU's processing part (`processing`): a bolt's PEs (`keyed`) or a join chain's worker (`chain_spu`); their
parts: the mailbox (`inbox`), the PE table and its services (`pe_manager`,
`pe_services`, `pe_ticks`, `parking`), checkpoint participation (`barriers`), a giver's steps (`giver`), the emit path (`sender`, `emitter`, `chain` for fused bolts, `load_feed`), user errors
on a tuple (`faults`), deferred acks (`anchors`), where acks go (`ack_router`); the ack server (`acker`), the ticker (`ticker`) and
what every actor of one job shares (`context`). Nothing here imports the job's control (esault.job).
"""
