"""Tree of thought with `fork`: several plans are drafted in parallel from a shared (cached)
prefix, each is expanded, and the model picks the best one with `select`.

    python examples/tree_of_thought.py [--url http://127.0.0.1:30000]
"""

from __future__ import annotations

from radixrt_lang.launch import example_main

import radixrt as rt

NUM_BRANCHES = 3


@rt.function
def tree_of_thought(s, question):
    s += rt.system("You are a careful planner.")
    s += rt.user(question)
    with s.assistant():
        s += "Let me consider several approaches.\n"
        plans = s.fork(NUM_BRANCHES)
        plans += lambda i: f"Approach {i + 1}:" + rt.gen("plan", max_tokens=24, stop="\n")
        plans += "\nFirst step:" + rt.gen("step", max_tokens=24, stop="\n")
        plans.join()
        for i, (plan, step) in enumerate(zip(s["plan"], s["step"])):
            s += f"Approach {i + 1}:{plan} (first step:{step})\n"
        s += (
            "The best approach is number "
            + rt.select("best", [str(i + 1) for i in range(NUM_BRANCHES)])
            + "."
        )


def main(backend: rt.BaseBackend) -> None:
    state = tree_of_thought.run(
        question="How can I learn to play the guitar in a month?",
        backend=backend,
        temperature=0.8,
        seed=0,
    )
    print(state.messages()[-1]["content"])
    cached = [m["cached_tokens"] for m in state.get_meta_info("plan")]
    print(f"branches reused {cached} cached prompt tokens; best: {state['best']}")


if __name__ == "__main__":
    example_main(main, __doc__)
