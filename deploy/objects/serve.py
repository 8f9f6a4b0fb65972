"""moto's S3 server on 0.0.0.0:9000 with the buckets named in OBJECTS_BUCKETS made at its start, so the
esault services find their bucket as they would on a real store (the compose file's `objects` service)."""

import os
import signal
import threading

import boto3
from moto.server import ThreadedMotoServer

PORT = int(os.environ.get("OBJECTS_PORT", "9000"))
server = ThreadedMotoServer(ip_address="0.0.0.0", port=PORT)
server.start()
client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{PORT}", region_name="us-east-1",
                      aws_access_key_id="setup", aws_secret_access_key="setup")
for bucket in os.environ.get("OBJECTS_BUCKETS", "esault").split(","):
    client.create_bucket(Bucket=bucket.strip())
    print(f"objects: bucket {bucket.strip()!r} ready on :{PORT}", flush=True)
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: done.set())
signal.signal(signal.SIGINT, lambda *_: done.set())
done.wait()
server.stop()
