"""Few-shot question answering: the examples are a constant prefix, so a batch computes them
once and every question hits the radix cache.

    python examples/few_shot.py [--url http://127.0.0.1:30000]
"""

from __future__ import annotations

from radixrt_lang.launch import example_main

import radixrt as rt

EXAMPLES = [
    ("What is the capital of Italy?", "Rome"),
    ("What is the capital of Germany?", "Berlin"),
    ("What is the capital of Japan?", "Tokyo"),
]


@rt.function
def few_shot_qa(s, question):
    for q, a in EXAMPLES:
        s += f"Q: {q}\nA: {a}\n"
    s += "Q: " + question + "\nA:"
    s += rt.gen("answer", max_tokens=12, stop="\n")


def main(backend: rt.BaseBackend) -> None:
    state = few_shot_qa.run(
        question="What is the capital of France?", backend=backend, temperature=0
    )
    print(state.text())
    questions = [
        "What is the capital of Spain?",
        "What is the capital of Egypt?",
        "What is the capital of Canada?",
    ]
    states = few_shot_qa.run_batch(
        [{"question": q} for q in questions], backend=backend, temperature=0
    )
    for q, s in zip(questions, states):
        meta = s.get_meta_info("answer")
        print(
            f"{q} ->{s['answer']}  (cached {meta['cached_tokens']}/{meta['prompt_tokens']} "
            "prompt tokens)"
        )


if __name__ == "__main__":
    example_main(main, __doc__)
