"""Where everything durable lives: a local directory or an object store (S3 and S3-compatible), one seam.

`StorageLocation.parse(...)` turns a `checkpoint_storage` setting into a pyarrow filesystem and a root;
`ObjectStore` gives the rest of esault immutable named objects on it (put once, read, list, delete), which
is all an object store can promise. The checkpoint store (esault.checkpoint.object_store) and the sinks'
staging build on it: docs/CHECKPOINTS.md, "Where durable state lives".
"""

from esault.storage.location import StorageLocation
from esault.storage.objects import ObjectInfo, ObjectStore, StorageError

__all__ = ["ObjectInfo", "ObjectStore", "StorageError", "StorageLocation"]
