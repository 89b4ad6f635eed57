"""The schema-checked JSON replies of the LLM path (judges.parsing.parse_json_object) and the
prompts that ask for them."""

from __future__ import annotations

import json

from interpscale.concepts.prompts import CARD_SCHEMA, SCHEMAS, TAG, tag_values
from interpscale.judges.parsing import parse_json_object

TAGS = {"topic": "list", "tone": "list"}


def test_a_reply_is_read_only_when_it_fits_the_schema():
    ok = parse_json_object('Here: {"Topic": ["astronomy", " stars "], "tone": ["neutral"]}', 0, 8, schema=TAGS)
    assert ok is not None and ok.value == {"topic": ["astronomy", "stars"], "tone": ["neutral"]}
    for bad in ['{"topic": ["a"]}',  # a key missing
                '{"topic": ["a"], "tone": ["b"], "extra": ["c"]}',  # a key too many
                '{"topic": "a", "tone": ["b"]}',  # not a list
                '{"topic": [], "tone": ["b"]}',  # empty
                '{"topic": ["a", 3], "tone": ["b"]}',  # not strings
                '{"topic": ["a"], "TOPIC": ["x"], "tone": ["b"]}',  # the same key twice
                '{"topic": ["a"], "tone": ["b"]} {"topic": ["c"], "tone": ["d"]}',  # two answers
                '{"topic": ' + json.dumps(["w"] * 9) + ', "tone": ["b"]}',  # over hi = 8 items
                "{{ not json ]]", "", None]:
        assert parse_json_object(bad, 0, 8, schema=TAGS) is None, bad
    card = parse_json_object('{"name": "Night sky", "description": "Stars and planets."}', schema=CARD_SCHEMA)
    assert card.value == {"name": "Night sky", "description": "Stars and planets."}
    assert parse_json_object('{"name": ["x"], "description": "d"}', schema=CARD_SCHEMA) is None


def test_tag_prompt_names_the_domain_fields():
    for domain, schema in SCHEMAS.items():
        values, kw = tag_values("some text", domain)
        text = "\n".join(m["content"] for m in TAG.render(values))
        assert all(f"- {k}:" in text for k in schema) and json.dumps(list(schema)) in text
        assert kw == {"schema": {k: "list" for k in schema}}
