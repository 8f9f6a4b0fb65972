"""StorageLocation: a checkpoint_storage setting read the usual AWS way, and bad ones refused with the fix."""

from __future__ import annotations

import pytest

from esault.config import JobConfig
from esault.errors import ConfigError
from esault.storage import ObjectStore, StorageLocation


def test_a_local_path_or_file_url_is_a_local_folder(tmp_path):
    for value in (str(tmp_path / "ck"), f"file://{tmp_path}/ck"):
        location = StorageLocation.parse(value)
        assert location.is_local and location.root == str(tmp_path / "ck")


def test_an_s3_url_takes_its_endpoint_from_the_query_or_the_aws_variables(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio:9000")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    location = StorageLocation.parse("s3://bucket/some/prefix/")
    assert location.kind == "s3" and location.root == "bucket/some/prefix"
    assert dict(location.options) == {"endpoint_override": "minio:9000", "scheme": "http", "region": "eu-west-1"}
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://s3.example:443")
    assert dict(StorageLocation.parse("s3://b").options)["endpoint_override"] == "s3.example:443"
    given = StorageLocation.parse("s3://b/p?endpoint_override=127.0.0.1:9&scheme=http&request_timeout=2.5")
    assert dict(given.options)["endpoint_override"] == "127.0.0.1:9" and dict(given.options)["request_timeout"] == 2.5
    assert given.url == "s3://b/p", "messages never show the query (it may hold credentials)"
    assert given.child("job").root == "b/p/job" and given.child("job").url == "s3://b/p/job"


@pytest.mark.parametrize(("value", "match"), [
    ("gs://bucket/x", "the scheme 'gs' is not supported; use a local path, or s3://bucket/prefix"),
    ("s3:///prefix", "names no bucket: write s3://bucket/prefix"),
    ("s3://b/p?endpoint=x", "unknown option 'endpoint' in its query; known: access_key, connect_timeout"),
    ("s3://b/p?request_timeout=soon", "request_timeout='soon' must be seconds"),
    ("  ", "must be a local path or s3://bucket/prefix"),
])
def test_a_bad_setting_is_refused_at_config_time_saying_what_to_write(value, match):
    with pytest.raises(ConfigError, match=match):
        JobConfig(checkpoint_storage=value)


def test_objects_on_a_local_folder_are_written_whole_listed_and_deleted(tmp_path):
    objects = ObjectStore(str(tmp_path / "store"))
    objects.put("a/b/one", b"1")
    objects.put("a/two", b"22")
    (tmp_path / "store" / "a" / ".cut.tmp").write_bytes(b"a write a crash cut short")
    assert [(o.name, o.size) for o in objects.list("a")] == [("a/b/one", 1), ("a/two", 2)]
    assert objects.get("a/two") == b"22" and objects.exists("a/b/one")
    objects.delete(["a/b/one", "a/b/one"])
    assert [o.name for o in objects.list()] == ["a/two"]
    with pytest.raises(FileNotFoundError, match=r"object .*a/b/one is missing"):
        objects.get("a/b/one")
    with pytest.raises(ValueError, match="without '..'"):
        objects.put("../escape", b"x")
    objects.check_writable()
