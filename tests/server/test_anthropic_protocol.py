"""The Anthropic Messages request as radixrt renders it, without a server: the token offsets
of cache_control breakpoints (a shared prefix, a token across a block's end left out), the
breakpoint rules (at most 4, 1h before 5m, automatic caching), prefill and tools as text, the
pins asked for and the usage arithmetic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from radixrt.serve.http.api.anthropic.prompt import prepare_messages, token_offsets
from radixrt.serve.http.api.anthropic.protocol import (
    Breakpoint,
    MessagesRequest,
    check_request,
    pin_specs,
    usage,
)
from radixrt.serve.http.protocol import BadRequestError, Limits
from radixrt.serve.http.tools.formats import HERMES

EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}
LIMITS = Limits(context_length=2048, max_total_tokens=2048, vocab_size=49152)


def body(**kw: Any) -> MessagesRequest:
    raw = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}], **kw}
    return msgspec.json.decode(msgspec.json.encode(raw), type=MessagesRequest)


def text(tag: str, tokens: int) -> str:
    """About `tokens` tokens (~10 a sentence)."""
    return " ".join(f"{tag} line {i} holds item {i}." for i in range(tokens // 10))


@pytest.fixture(scope="module")
def tokenizer(smollm2_path: Path) -> Any:
    from radixrt.model.families.loader import load_tokenizer

    return load_tokenizer(smollm2_path)


def test_usage_counts_each_token_once() -> None:
    pinned = [(40, "1h"), (70, "5m")]
    cold = usage(100, 0, 5, pinned)
    assert cold["cache_creation"] == {
        "ephemeral_1h_input_tokens": 40,
        "ephemeral_5m_input_tokens": 30,
    }
    assert (cold["cache_creation_input_tokens"], cold["cache_read_input_tokens"]) == (70, 0)
    assert (cold["input_tokens"], cold["output_tokens"]) == (30, 5)
    warm = usage(100, 50, 5, pinned)  # the tree served past the first breakpoint
    assert warm["cache_creation"] == {
        "ephemeral_1h_input_tokens": 0,
        "ephemeral_5m_input_tokens": 20,
    }
    assert (warm["cache_read_input_tokens"], warm["input_tokens"]) == (50, 30)
    hot = usage(100, 99, 5, pinned)  # reads may reach past the last breakpoint
    assert (hot["cache_creation_input_tokens"], hot["input_tokens"]) == (0, 1)
    assert usage(100, 10, 1, [])["input_tokens"] == 90
    # An earlier breakpoint that was not pinned (too short, refused) is not in `pinned`: the
    # next pin holds its tokens too, and they count as written under that pin's TTL.
    assert usage(100, 0, 0, [(70, "5m")])["cache_creation_input_tokens"] == 70


def test_pin_specs_scale_ttls_and_skip_short_prefixes() -> None:
    planned = pin_specs([Breakpoint(8, "1h"), Breakpoint(20, "5m")], 16, 0.5, "tenant-a")
    assert [(b.offset, s.offset, s.ttl_s, s.sliding, s.owner) for b, s in planned] == [
        (20, 20, 150.0, True, "tenant-a")
    ]
    assert planned[0][1].pin_id is None  # the prefix's own pin: a repeat extends it


def test_breakpoint_limits_and_automatic_caching() -> None:
    blocks = [{"type": "text", "text": f"b{i}", "cache_control": EPHEMERAL} for i in range(4)]
    blocks.append({"type": "text", "text": "the last block, marked by the top-level control"})
    with pytest.raises(BadRequestError, match=r"A maximum of 4 blocks .* Found 5\."):
        check_request(body(messages=[{"role": "user", "content": blocks}], cache_control=EPHEMERAL))
    five = {"type": "text", "text": "s", "cache_control": EPHEMERAL}
    hour = {"type": "text", "text": "t", "cache_control": HOUR}
    with pytest.raises(BadRequestError, match="ttl='1h'"):  # tools come before system
        check_request(body(system=[hour], tools=[{"name": "t", "cache_control": EPHEMERAL}]))
    with pytest.raises(BadRequestError, match="ttl='1h'"):
        check_request(body(system=[five, hour]))
    check_request(body(system=[hour, five]))
    req = check_request(body(cache_control=HOUR))  # automatic: on the last block
    assert req.cache_control is None
    assert req.messages[-1].content[-1].cache_control.ttl == "1h"  # type: ignore[union-attr]


def test_breakpoint_offsets_are_the_shared_prefix(tokenizer: Any) -> None:
    system = [{"type": "text", "text": text("sys", 60), "cache_control": EPHEMERAL}]
    tools = [{"name": "get_weather", "input_schema": {"type": "object"}, "cache_control": HOUR}]
    a = prepare_messages(body(system=system, tools=tools), tokenizer, LIMITS, True, HERMES)
    other = [{"role": "user", "content": "Something else entirely, with more words."}]
    b = prepare_messages(
        body(system=system, tools=tools, messages=other), tokenizer, LIMITS, True, HERMES
    )
    assert [bp.ttl for bp in a.breakpoints] == ["1h", "5m"]
    assert a.breakpoints == b.breakpoints
    end = a.breakpoints[-1].offset
    assert a.input_ids[:end] == b.input_ids[:end] and a.input_ids != b.input_ids
    assert tokenizer.decode(a.input_ids[:end]).endswith(system[0]["text"])
    assert tokenizer.decode(a.input_ids[: a.breakpoints[0].offset]).endswith('"function"}')
    assert (
        len(prepare_messages(body(system=system), tokenizer, LIMITS, False, HERMES).breakpoints)
        == 1
    )


def test_a_token_across_the_end_is_left_out(tokenizer: Any) -> None:
    ids, offsets = token_offsets(tokenizer, "hello wonderful world", [0, 5, 9, 21])
    assert offsets[0] == 0 and offsets[-1] == len(ids)
    assert tokenizer.decode(ids[: offsets[1]]) == "hello"
    assert len(tokenizer.decode(ids[: offsets[2]])) <= 9  # " wo" of " wonderful" stays out


def test_breakpoints_over_a_replayed_turns_ids(tokenizer: Any) -> None:
    """A head of known ids (a kept turn's, spelled otherwise than the tokenizer would) comes
    first; an end in it counts only the tokens the tokenizer's own spelling shares with it."""
    text = "hello wonderful world"
    own = tokenizer.encode("hello wonderful", add_special_tokens=False)
    spelled = [*tokenizer.encode("hello", add_special_tokens=False)]
    spelled += [t for c in " wonderful" for t in tokenizer.encode(c, add_special_tokens=False)]
    assert spelled != own and tokenizer.decode(spelled) == "hello wonderful"
    ids, offsets = token_offsets(tokenizer, text, [5, 9, 15, 21], (15, spelled))
    assert ids[: len(spelled)] == spelled
    assert tokenizer.decode(ids[len(spelled) :]) == " world"
    assert offsets[0] == 1 and tokenizer.decode(ids[: offsets[0]]) == "hello"
    assert offsets[1] == 1  # the tokenizer's " wo..." is not the head's: the shared part only
    assert offsets[2:] == [len(spelled), len(ids)]


def test_prefill_tools_as_text_and_refusals(tokenizer: Any) -> None:
    call = {"type": "tool_use", "id": "t1", "name": "add", "input": {"b": 2, "a": 2}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "4"}
    turns = [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": "The answer is"},
    ]
    prompt = prepare_messages(body(messages=turns), tokenizer, LIMITS, True, HERMES)
    rendered = tokenizer.decode(prompt.input_ids)
    # As the model writes a call (its input's order kept), and a result in the format's tags.
    assert '<tool_call>\n{"name":"add","arguments":{"b":2,"a":2}}\n</tool_call>' in rendered
    assert "<tool_response>\n4\n</tool_response>" in rendered
    assert rendered.endswith("<|im_start|>assistant\nThe answer is")  # a prefill, continued
    hi = {"role": "user", "content": "Hi"}
    refused = {
        "trailing whitespace": [hi, {"role": "assistant", "content": "Well "}],
        "'image' are not supported": [{"role": "user", "content": [{"type": "image"}]}],
    }
    for why, messages in refused.items():
        with pytest.raises(BadRequestError, match=why):
            prepare_messages(body(messages=messages), tokenizer, LIMITS, True, HERMES)
    with pytest.raises(BadRequestError, match="tool_choice"):
        check_request(body(tool_choice={"type": "some"}))
