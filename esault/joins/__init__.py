"""Stream joins (S2J): a chain of join workers that R tuples cross one way and S tuples the other.

The package's names are the pure chain and its vocabulary only: importing a join declaration
(esault.dsl.join_bolt) runs this file first, and the runtime's JoinController
(esault.joins.controller) sits floors above the declarations.
"""

from esault.joins.chain import ChainChangeError, JoinChain
from esault.joins.protocol import Ack, Joined, SizeChange, TupleBlock
from esault.joins.queries import JoinQuery
from esault.joins.shedding import ShedPolicy

__all__ = ["Ack", "ChainChangeError", "JoinChain", "JoinQuery", "Joined", "ShedPolicy", "SizeChange", "TupleBlock"]
