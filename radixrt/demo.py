"""`make demo`: generate with the default model and show throughput and prefix-cache reuse."""

from __future__ import annotations

import logging
import time

from radixrt import Engine

QUESTIONS = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Write one sentence about the moon.",
    "What is 12 times 12?",
]
SYSTEM = (
    "You are a concise assistant. Answer in one short sentence. Be accurate, be polite, and "
    "never make up facts you are unsure about."
)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    t0 = time.perf_counter()
    with Engine() as engine:
        print(f"loaded the default model in {time.perf_counter() - t0:.1f} s "
              f"(KV pool: {engine.get_stats()['max_total_tokens']} tokens)")
        tok = engine.tokenizer
        prompts = [
            tok.apply_chat_template(
                [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
                tokenize=False, add_generation_prompt=True,
            )
            for q in QUESTIONS
        ]
        params = {"temperature": 0, "max_new_tokens": 48}
        engine.generate(prompts[0], {"temperature": 0, "max_new_tokens": 1})  # warm the cache
        t1 = time.perf_counter()
        outs = engine.generate(prompts, params)
        elapsed = time.perf_counter() - t1
        for q, out in zip(QUESTIONS, outs):
            print(f"\nQ: {q}\nA: {out['text'].strip()}")
        tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
        cached = sum(o["meta_info"]["cached_tokens"] for o in outs)
        prompt = sum(o["meta_info"]["prompt_tokens"] for o in outs)
        print(f"\n{len(outs)} requests in one batch: {tokens} tokens in {elapsed:.2f} s "
              f"= {tokens / elapsed:.1f} tokens/s; {cached}/{prompt} prompt tokens "
              "came from the radix cache (the shared system prompt)")


if __name__ == "__main__":
    main()
