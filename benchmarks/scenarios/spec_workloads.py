"""The speculative-decoding workloads of `python -m benchmarks spec`: (a) extraction into JSON
of fields copied from a document, (b) a code edit whose output repeats most of its input,
(c) an agent turn whose tool call repeats earlier calls, (d) plain chat, (e) the same chat
sampled at temperature 1 (the hostile case: free text that drafts rarely predict). Eight
prompts each (one per stream), built from fixed data, so every run and engine sees the same
ones."""

from __future__ import annotations

import json
from typing import Any

NAMES = ["Margarethe Oyelaran-Whitfield", "Tomasz Kowalczyk-Brandt", "Ines Albuquerque Soto",
         "Kwame Mensah-Asante", "Yuki Tanabe-Morrison", "Priya Raghunathan", "Lars Oddvar Haugen",
         "Chiara Benedetti Russo"]  # fmt: skip
CITIES = ["Lyon 69002, France", "Gdansk 80-831, Poland", "Porto 4050-262, Portugal",
          "Kumasi AK-039, Ghana", "Sapporo 060-0042, Japan", "Chennai 600028, India",
          "Bergen 5003, Norway", "Bologna 40126, Italy"]  # fmt: skip
INVOICE = ("Invoice 2026-{i:04d}. Customer: {name}, {n} Harbour Street, {city}. Email: "
           "{mail}@example-mail.org. Phone: +00 {n}{n} 4{n} 92 15 60. Order: 3 x Stainless "
           "steel espresso tamper 58mm, 1 x Walnut knock box. Total: 1{n}4.50 EUR. Delivery "
           "tracking 6A1938402{n}155.")  # fmt: skip
EXTRACT = {
    "type": "object",
    "properties": {
        "customer": {"type": "string", "maxLength": 40},
        "address": {"type": "string", "maxLength": 60},
        "email": {"type": "string", "maxLength": 48},
        "phone": {"type": "string", "maxLength": 24},
        "tracking": {"type": "string", "maxLength": 20},
    },
    "required": ["customer", "address", "email", "phone", "tracking"],
    "additionalProperties": False,
}
CODE = '''def summarize(orders, tax_rate):
    """Totals per customer, with tax."""
    totals = {}
    for order in orders:
        customer = order["customer"]
        amount = order["quantity"] * order["unit_price"]
        if customer not in totals:
            totals[customer] = 0.0
        totals[customer] += amount
    for customer in totals:
        totals[customer] = round(totals[customer] * (1 + tax_rate), 2)
    return totals
'''
EDITS = ["rename `totals` to `{w}`", "rename `orders` to `{w}`", "rename `amount` to `{w}`",
         "rename `customer` to `{w}`"]  # fmt: skip
WORDS = ["sums", "records", "subtotal", "client", "per_client", "items", "value", "buyer"]
CITIES_ASKED = ["Paris", "Oslo", "Lima", "Cairo", "Perth", "Quito", "Hanoi", "Dakar"]
TOOL_CALL = r'<tool_call>\{"name": "get_weather", "arguments": \{"city": "[A-Z][a-z]{1,12}", ' \
    r'"unit": "(celsius|fahrenheit)"\}\}</tool_call>'  # fmt: skip
SEED = 7  # (e)'s sampling seed: a seeded request's tokens do not depend on speculation
QUESTIONS = ["Why is the sky blue?", "What is a prime number?", "How do bees make honey?",
             "Why do we have seasons?", "What is photosynthesis?", "How does a rainbow form?",
             "Why is the sea salty?", "What causes thunder?"]  # fmt: skip


def _chat(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _agent(tokenizer: Any, i: int) -> str:
    """An agent that has called get_weather for four cities and is asked for a fifth."""
    system = ("You are a weather assistant. To call a tool, write <tool_call>{\"name\": ..., "
              "\"arguments\": {...}}</tool_call>. Tool: get_weather(city, unit).")  # fmt: skip
    messages = [{"role": "system", "content": system}]
    for j in range(4):
        city = CITIES_ASKED[(i + j) % 8]
        call = {"name": "get_weather", "arguments": {"city": city, "unit": "celsius"}}
        messages += [
            {"role": "user", "content": f"Weather in {city}?"},
            {"role": "assistant", "content": f"<tool_call>{json.dumps(call)}</tool_call>"},
            {"role": "user", "content": f"Tool result: {city}: {12 + j} C, light wind."},
            {"role": "assistant", "content": f"It is {12 + j} C in {city} with light wind."},
        ]
    messages.append({"role": "user", "content": f"Weather in {CITIES_ASKED[(i + 4) % 8]}?"})
    return _chat(tokenizer, messages)


def workloads(tokenizer: Any) -> dict[str, tuple[list[str], dict[str, Any]]]:
    """name -> (eight prompts, sampling params besides max_new_tokens); greedy but (e), which
    samples with a seed (the same tokens with and without speculation)."""
    greedy: dict[str, Any] = {"temperature": 0}
    extract = [
        _chat(
            tokenizer,
            [
                {
                    "role": "user",
                    "content": "Extract customer, address, email, phone "
                    "and tracking number as JSON.\n\n"
                    + INVOICE.format(
                        i=i,
                        name=NAMES[i],
                        city=CITIES[i],
                        n=i + 1,
                        mail=NAMES[i].split()[0].lower(),
                    ),
                }
            ],
        )  # fmt: skip
        for i in range(8)
    ]
    code = [
        _chat(
            tokenizer,
            [
                {
                    "role": "user",
                    "content": "In this Python code, "
                    + EDITS[i % 4].format(w=WORDS[i])
                    + ". Reply with the whole code only.\n\n"
                    + CODE,
                }
            ],
        )  # fmt: skip
        for i in range(8)
    ]
    return {
        "a-json-extraction": (extract, {**greedy, "json_schema": json.dumps(EXTRACT)}),
        "b-code-edit": (code, greedy),
        "c-agent-tool-call": (
            [_agent(tokenizer, i) for i in range(8)],
            {**greedy, "regex": TOOL_CALL},
        ),  # fmt: skip
        "d-chat": (
            [_chat(tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS],
            greedy,
        ),  # fmt: skip
        "e-sampled-chat": (
            [_chat(tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS],
            {"temperature": 1.0, "seed": SEED},
        ),  # fmt: skip
    }
