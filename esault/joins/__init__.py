"""Stream joins (S2J): a chain of join workers that R tuples cross one way and S tuples the other."""

from esault.joins.chain import ChainChangeError, JoinChain
from esault.joins.controller import JoinController
from esault.joins.protocol import Ack, Joined, SizeChange, TupleBlock
from esault.joins.queries import JoinQuery
from esault.joins.shedding import ShedPolicy

__all__ = [
    "Ack", "ChainChangeError", "JoinChain", "JoinController", "JoinQuery", "Joined", "ShedPolicy", "SizeChange",
    "TupleBlock",
]
