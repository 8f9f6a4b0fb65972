"""TableMeta's file: written once, verified on every read."""

from __future__ import annotations

import pytest

from esault.errors import SinkFileDamaged
from spark_sink.schema import Column, TableSchema
from spark_sink.table_meta import TableMeta, load_meta, store_meta

META = TableMeta(TableSchema((Column("word", "STRING"), Column("count", "BIGINT"))), (Column("event_date", "DATE"),))


def test_stored_metadata_reads_back_the_same(tmp_path):
    assert store_meta(tmp_path / "schema.json", META) == META
    assert load_meta(tmp_path / "schema.json") == META


@pytest.mark.parametrize("change", [(b'"BIGINT"', b'"STRING"'), (b'"word"', b'"wurd"')])
def test_metadata_changed_into_other_valid_json_fails_its_crc_naming_the_file_and_the_ways_out(tmp_path, change):
    path = tmp_path / "schema.json"
    store_meta(path, META)
    path.write_bytes(path.read_bytes().replace(*change, 1))
    with pytest.raises(SinkFileDamaged, match=rf"table metadata {path} is damaged: its content fails its CRC.*"
                                              r"put back a copy.*delete it and run again"):
        load_meta(path)


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
def test_truncated_metadata_is_damage_naming_the_file(tmp_path, keep):
    path = tmp_path / "schema.json"
    store_meta(path, META)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(SinkFileDamaged, match=rf"table metadata {path} is damaged"):
        load_meta(path)


def test_metadata_written_before_checksums_is_read_as_before(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text('{"version": 1, "columns": [["word", "STRING", true]], "partitions": []}')
    assert load_meta(path).columns.columns[0].name == "word"
