"""A sentiment classifier with `select`: the choices are scored by their token logprobs in
one batched request after the (cached) prompt, so the answer is always one of them.

    python examples/select_classifier.py [--url http://127.0.0.1:30000]
"""

from __future__ import annotations

from radixrt_lang.launch import example_main

import radixrt as rt

LABELS = ["positive", "negative", "neutral"]


@rt.function
def classify(s, review):
    s += (
        "Classify the sentiment of each review.\n"
        "Review: The food was awful and cold.\nSentiment: negative\n"
        "Review: A wonderful evening, great service.\nSentiment: positive\n"
        "Review: It was a restaurant.\nSentiment: neutral\n"
    )
    s += "Review: " + review + "\nSentiment: "
    s += rt.select("label", LABELS)


def main(backend: rt.BaseBackend) -> None:
    reviews = [
        "I loved it, the best meal of my life!",
        "Terrible. Rude staff and the soup was cold.",
        "We ate there on Tuesday.",
    ]
    states = classify.run_batch([{"review": r} for r in reviews], backend=backend)
    for review, s in zip(reviews, states):
        meta = s.get_meta_info("label")
        scores = ", ".join(
            f"{c} {lp:.2f}" for c, lp in zip(meta["choices"], meta["normalized_prompt_logprobs"])
        )
        print(f"{s['label']:>9}  {review}  [{scores}]")


if __name__ == "__main__":
    example_main(main, __doc__)
