"""Prompts of the LLM path: structured tagging (stage 1) and the semantic card (stage 2).

The wording is ours; what they ask for follows §4.2: domain-aware schemas of 4 fields,
each a list of tags from broad to narrow, 10–15 tags per chunk in all (§4.2.1), and a
1–6 word label with a one-sentence description from a cluster's representative tags
(§4.2.2). Replies are JSON objects checked against the schema (``json_object``); a reply
that does not fit gets the client's one re-ask, then counts as a parse failure.
"""

from __future__ import annotations

import json

from interpscale.judges import PromptTemplate

# §4.2.1: what a chunk is about, what role it plays, how it is expressed, what else is in it
SCHEMAS: dict[str, dict[str, str]] = {
    "prose": {"topic": "what the text is about", "purpose": "what the text is for",
              "tone": "how it is written", "minor": "secondary entities, events or details"},
    "code": {"language": "programming language and libraries", "pattern": "design pattern or idiom",
             "algorithm": "algorithmic structure", "role": "software-engineering role and documentation style"},
    "maths": {"topic": "mathematical object or topic", "problem": "problem type",
              "technique": "solution or proof technique", "notation": "notation conventions and difficulty"},
}
MAX_TAGS_PER_FIELD = 8

TAG = PromptTemplate(
    name="concept_tags", version="concept_tags-v1", output="json_object", lo=0, hi=MAX_TAGS_PER_FIELD,
    max_tokens=300,
    system=("You annotate short passages of a training corpus with free-form tags for a concept "
            "library. Tags are short lower-case words or phrases. Aim for recall: include every "
            "topic, role and stylistic trait the passage shows, from broad to narrow."),
    user=("Tag the passage below. Fill each field with 2-{max_per_field} tags ordered from broad to "
          "narrow, about 10-15 tags in all.\n\nFields:\n{fields}\n\n=== PASSAGE ===\n{chunk}\n\n"
          "Reply with one JSON object whose keys are exactly {keys} and whose values are lists of "
          "strings. No other text."),
    reask="That reply was not a JSON object with exactly the requested keys and lists of strings. "
          "Reply again with only that JSON object.")

CARD = PromptTemplate(
    name="concept_card", version="concept_card-v1", output="json_object", lo=0, hi=0, max_tokens=120,
    system="You name clusters of tags that an annotator assigned to passages of text.",
    user=("These tags were grouped together, most representative first:\n{tags}\n\n"
          "Give the concept they share: a label of 1-6 words and a one-sentence description. "
          "Reply with one JSON object {{\"name\": ..., \"description\": ...}} and no other text."),
    reask="Reply again with only the JSON object {\"name\": ..., \"description\": ...}.")

CARD_SCHEMA = {"name": "str", "description": "str"}


def tag_values(chunk: str, domain: str) -> tuple[dict, dict]:
    """(template values, parse kwargs) of the tagging prompt for one chunk."""
    schema = SCHEMAS[domain]
    fields = "\n".join(f"- {k}: {v}" for k, v in schema.items())
    values = {"chunk": chunk, "fields": fields, "keys": json.dumps(list(schema)), "max_per_field": MAX_TAGS_PER_FIELD}
    return values, {"schema": {k: "list" for k in schema}}
