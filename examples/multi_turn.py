"""Multi-turn chat with roles, rendered with the model's own chat template; each turn reuses
the previous turns from the radix cache.

    python examples/multi_turn.py [--url http://127.0.0.1:30000]
"""

from __future__ import annotations

from radixrt_lang.launch import example_main

import radixrt as rt


@rt.function
def chat(s, questions):
    s += rt.system("You are a concise assistant. Answer in one sentence.")
    for i, question in enumerate(questions):
        s += rt.user(question)
        s += rt.assistant(rt.gen(f"answer_{i}", max_tokens=32))


def main(backend: rt.BaseBackend) -> None:
    questions = [
        "What is the capital of France?",
        "What is it famous for?",
        "Name one museum there.",
    ]
    state = chat.run(questions=questions, backend=backend, temperature=0)
    for m in state.messages():
        print(f"{m['role']:>9}: {m['content']}")
    for i in range(len(questions)):
        meta = state.get_meta_info(f"answer_{i}")
        print(f"turn {i}: {meta['cached_tokens']}/{meta['prompt_tokens']} prompt tokens cached")


if __name__ == "__main__":
    example_main(main, __doc__)
