"""JSON extraction: turn free text into records with `gen(json_schema=...)`. The runtime masks
every token the schema does not allow (and skips the decode steps of tokens it forces), so each
answer parses and validates; a batch of passages runs as one batch on the server.

    python examples/json_extraction.py [--url http://127.0.0.1:30000]
"""

from __future__ import annotations

import json

from radixrt_lang.launch import example_main

import radixrt as rt

CITY_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "country": {"type": "string", "maxLength": 24},
        "population": {"type": "integer", "minimum": 0, "maximum": 100000000},
        "founded": {"type": "integer", "minimum": -3000, "maximum": 2100},
        "is_capital": {"type": "boolean"},
        "river": {"type": ["string", "null"], "maxLength": 24},
    },
    "required": ["name", "country", "population", "founded", "is_capital", "river"],
    "additionalProperties": False,
}
PASSAGES = [
    "Lyon, in France, was founded by the Romans in 43 BC. About 520000 people live there, "
    "where the Rhone meets the Saone. It is not the capital.",
    "Vienna is the capital of Austria. The Danube flows through the city, which has about "
    "2000000 inhabitants and was founded around the year 500 BC.",
    "Canberra, the capital of Australia, was founded in 1913 and has about 460000 residents. "
    "It has no large river.",
]


@rt.function
def extract_city(s, passage):
    s += rt.user(f"Extract the facts about the city as JSON.\n\n{passage}")
    s += rt.assistant(rt.gen("city", json_schema=CITY_SCHEMA, max_tokens=128))
    s.set_var("record", json.loads(s["city"]))


def main(backend: rt.BaseBackend) -> None:
    states = extract_city.run_batch(
        [{"passage": p} for p in PASSAGES], backend=backend, temperature=0
    )
    for state in states:
        print(json.dumps(state["record"]))


if __name__ == "__main__":
    example_main(main, __doc__)
