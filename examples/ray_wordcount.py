"""The word count on Ray: every esault worker a Ray actor, asked of Ray as the job needs them.

Run it:  pip install -e '.[ray]' && python examples/ray_wordcount.py
With RAY_ADDRESS=HOST:PORT (a Ray cluster's GCS) it runs there; without, it starts a local Ray autoscaling
cluster of its own (esault.testing.ray_cluster: a head with no CPU, up to 2 nodes of 1 CPU that Ray's
autoscaler adds for the workers and removes when they are given back) and stops it at the end.
The same job from the command line: `esault run examples/wordcount.py --cluster ray://auto`.
It prints where each worker ran, the top words, and whether every count matches a plain Counter.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

TOTAL = int(os.environ.get("RAY_WORDCOUNT_SENTENCES", "20000"))


def main() -> int:
    from esault.testing.ray_cluster import ray_cluster, use_loopback

    own = not os.environ.get("RAY_ADDRESS")
    if own:
        use_loopback()  # the local cluster binds 127.0.0.1 only: so must this process's Ray
    import wordcount

    from esault import JobConfig, LocalCluster

    with ExitStack() as stack:
        address = stack.enter_context(ray_cluster(max_nodes=2)).address if own else os.environ["RAY_ADDRESS"]
        data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="esault-ray-wordcount-")))
        cluster = stack.enter_context(LocalCluster(ray=address, spus_per_worker=2))
        job = cluster.submit(wordcount.build_topology(total=TOTAL, sink="pyarrow"),
                             JobConfig(data_dir=data, elasticity=False))
        done = job.wait(300)
        workers = job.status()["capacity"]["workers"]
        job.stop()
        print(f"Ray cluster at {address}: {len(workers)} worker(s)")
        for row in workers:
            print(f"  {row['worker']}: {row['provider']} {row['node']}, {row['spus']} SPU(s)")
        print(wordcount.summarize(job))
        path = Path(job.data_dir) / "wordcount.json"  # the 'latest' bolt's file, on its worker's disk
        if not path.exists():  # a Ray cluster on other hosts: the check is there
            return 0 if done else 1
        exact = done and json.loads(path.read_text()) == dict(wordcount.oracle(TOTAL))
        print(f"every count exact: {exact}")
        return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
