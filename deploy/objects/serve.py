"""moto's S3 server on 0.0.0.0:9000, with the buckets named in OBJECTS_BUCKETS made before it listens, so
the esault services find their bucket as on a real store, however fast they start (the compose file's
`objects` service; a job whose bucket is missing fails at its start, as it must)."""

import os
import signal
import threading

from moto.core import DEFAULT_ACCOUNT_ID
from moto.s3.models import s3_backends
from moto.server import ThreadedMotoServer

PORT = int(os.environ.get("OBJECTS_PORT", "9000"))
backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]  # the server answers every access key from this account
for bucket in os.environ.get("OBJECTS_BUCKETS", "esault").split(","):
    backend.create_bucket(bucket.strip(), "us-east-1")
server = ThreadedMotoServer(ip_address="0.0.0.0", port=PORT)
server.start()
print(f"objects: S3 on :{PORT}, buckets {os.environ.get('OBJECTS_BUCKETS', 'esault')}", flush=True)
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: done.set())
signal.signal(signal.SIGINT, lambda *_: done.set())
done.wait()
server.stop()
