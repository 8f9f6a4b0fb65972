"""docs/TRANSPORT.md's tag table is the wire format's reference for anyone writing a client or reading a capture:
every tag, message name and field must be the code's (it had drifted by one from tag 28 on, naming a message
that no longer existed)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from esault.transport import wire

DOC = Path(__file__).resolve().parents[2] / "docs" / "TRANSPORT.md"
ROW = re.compile(r"^\| (\d+) \| (.+?) \| (.+) \|$")


def doc_rows() -> dict[int, tuple[str, str]]:
    text = DOC.read_text()
    table = text[text.index("| tag | message | fields |"):]
    table = table[:table.index("\n\n")]
    rows = {}
    for line in table.splitlines()[2:]:
        m = ROW.match(line)
        assert m, f"docs/TRANSPORT.md: a tag table row that does not parse: {line!r}"
        rows[int(m.group(1))] = (m.group(2), m.group(3))
    return rows


def test_every_tag_in_the_table_is_the_codes_message_with_its_fields():
    rows = doc_rows()
    classes = wire._message_classes()
    for name, tag in wire.WIRE_TAGS.items():
        assert tag in rows, f"docs/TRANSPORT.md: no row for tag {tag} ({name})"
        message, fields = rows[tag]
        assert re.match(rf"^`{name}`", message), f"tag {tag}: the doc says {message!r}, the code {name!r}"
        documented = re.findall(r"`(\w+): ", fields)
        actual = [f.name for f in dataclasses.fields(classes[name])]
        assert documented == actual, f"tag {tag} {name}: the doc's fields {documented}, the code's {actual}"
    for tag in wire.RETIRED_TAGS:
        assert tag in rows and rows[tag][0].startswith("retired"), f"retired tag {tag} must stay in the table"
    extra = set(rows) - set(wire.WIRE_TAGS.values()) - set(wire.RETIRED_TAGS)
    assert not extra, f"docs/TRANSPORT.md documents tags no message has: {sorted(extra)}"


def test_the_prose_names_each_tag_by_the_codes_message():
    text = DOC.read_text()
    by_tag = {tag: name for name, tag in wire.WIRE_TAGS.items()}
    mentions = re.findall(r"\b(?:[Tt]ag )?(\d{1,2}) `(\w+)", text)
    checked = 0
    for tag, name in mentions:
        if name in wire.WIRE_TAGS or int(tag) in by_tag:
            assert by_tag.get(int(tag)) == name, f"docs/TRANSPORT.md says tag {tag} is {name}; it is {by_tag.get(int(tag))}"
            checked += 1
    assert checked > 10  # the prose mentions (a regex that stopped matching would check nothing)
