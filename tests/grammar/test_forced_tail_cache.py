"""A constrained output that jump-forward ends (the grammar forces its last tokens, no step
computes them) goes to the prefix cache whole: the scheduler computes that tail in one more
step after reporting the request, so a next prompt that replays the output reads all of it
from the cache."""

from __future__ import annotations

import radixrt as rt

REGEX = r"(yes|no), and this is the forced tail of the answer\."


def test_a_jump_forward_tail_is_computed_and_cached(tiny_llama_path) -> None:
    with rt.Engine(str(tiny_llama_path), max_total_tokens=2048) as e:
        prompt = e.tokenizer.encode("Is the sky blue? Answer:", add_special_tokens=False)
        out = e.generate(input_ids=prompt, sampling_params={"regex": REGEX, "temperature": 0})
        assert out["text"].endswith("forced tail of the answer."), out
        forced = e.scheduler.grammar.stats.forced_tokens
        assert forced >= 5, forced  # the tail was appended by jump-forward
        turn = prompt + out["output_ids"]
        again = e.generate(input_ids=[*turn, 13], sampling_params={"max_new_tokens": 1})
        assert again["meta_info"]["cached_tokens"] == len(turn), (again["meta_info"], len(turn))
        e.scheduler.kv.check_whole()
