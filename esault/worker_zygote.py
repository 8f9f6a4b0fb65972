"""The warm zygote's process: `python -m esault.worker_zygote FD`, started by the driver (cluster/forker.py).

It imports everything a worker runs (the CLI, the worker, its credentials) once, then serves fork requests
(cluster/zygote.py); each child runs the CLI's main with its own argv. It sits on the entry-point floor
because it names the CLI: the zygote's protocol below it gets the CLI's main handed in.
"""

from __future__ import annotations

import sys

import esault.cluster.credentials  # noqa: F401 - imported once here, for every forked worker
import esault.cluster.worker  # noqa: F401
from esault.cli import main as cli_main
from esault.cluster.zygote import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv, cli_main))
