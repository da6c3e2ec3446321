"""The cache-miss diagnostics rule and its fingerprint store, without a server: the reason in
prefix order, the token counts (exact for a continuation, whole blocks otherwise), hashes
only, tenants apart, and the store's bounds in count and bytes (the oldest goes)."""

from __future__ import annotations

import pytest

from radixrt.serve.http.diagnostics import (
    Fingerprint,
    FingerprintStore,
    PromptRecord,
    compare_prompts,
    diagnose,
    fingerprint,
)
from radixrt.serve.http.diagnostics import compare as rule
from radixrt.serve.http.diagnostics.fingerprint import BLOCK_TOKENS

SYSTEM = "You answer in one word."
TOOLS = [{"name": "add", "parameters": {"type": "object"}}]
FIRST = [{"role": "user", "content": "hi!"}]


def render(system: str, tools: list, messages: list) -> list[int]:
    """A stand-in chat template: one token per character of the rendered text."""
    text = f"[{system}|{tools}]" + "".join(f"<{m['role']}>{m['content']}" for m in messages)
    return [ord(c) for c in text + "<assistant>"]


def fp_of(messages: list, system: str = SYSTEM, tools: list = TOOLS, model: str = "m"):
    ids = render(system, tools, messages)
    return fingerprint(model, system, tools, messages, ids), ids


def test_continuation_is_a_hit_with_the_whole_earlier_prompt_reusable():
    prev, prev_ids = fp_of(FIRST)
    assert len(prev_ids) % BLOCK_TOKENS != 0  # the partial last block is compared exactly
    more = [*FIRST, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "x"}]
    cur, ids = fp_of(more)
    d = compare_prompts(prev, cur, ids)
    assert d == rule.Diagnosis(rule.HIT, 0, len(prev_ids))
    # The very same prompt again is a hit too.
    assert compare_prompts(prev, prev, prev_ids).kind == rule.HIT


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        ({"model": "other"}, rule.MODEL_CHANGED),
        ({"tools": [*TOOLS, {"name": "sub"}]}, rule.TOOLS_CHANGED),
        ({"system": "You answer at length."}, rule.SYSTEM_CHANGED),
        ({"messages": [{"role": "user", "content": "ho!"}]}, rule.MESSAGES_CHANGED),
        ({"messages": []}, rule.MESSAGES_CHANGED),  # an earlier message went
        # Tools and system both changed: tools come first in the prefix.
        ({"tools": [], "system": "S"}, rule.TOOLS_CHANGED),
    ],
)
def test_the_first_changed_part_is_the_reason(change: dict, kind: str):
    prev, prev_ids = fp_of(FIRST)
    args = {"messages": FIRST, "system": SYSTEM, "tools": TOOLS, "model": "m", **change}
    cur, ids = fp_of(**args)
    d = compare_prompts(prev, cur, ids)
    assert d.kind == kind
    shared = next(i for i, (a, b) in enumerate(zip(prev_ids, ids)) if a != b) if kind != \
        rule.MODEL_CHANGED else len(prev_ids)  # fmt: skip
    # Reusable: the shared tokens, whole blocks only unless all of the earlier prompt.
    expected = shared if shared == len(prev_ids) else shared // BLOCK_TOKENS * BLOCK_TOKENS
    assert d.reusable_tokens == expected
    assert d.missed_tokens == len(prev_ids) - expected


def test_same_parts_but_another_prompt_is_unavailable():
    prev, prev_ids = fp_of(FIRST)
    other = [1, 2, 3, *prev_ids[3:]]  # rendered differently (a setting, the template)
    cur = fingerprint("m", SYSTEM, TOOLS, FIRST, other)
    d = compare_prompts(prev, cur, other)
    assert d == rule.Diagnosis(rule.UNAVAILABLE, len(prev_ids), 0)


def test_a_replaced_generation_prompt_is_still_a_hit():
    prev, prev_ids = fp_of(FIRST)  # ends with <assistant>; the next turn has <user> there
    more = [*FIRST, {"role": "user", "content": "again"}]
    cur, ids = fp_of(more)
    d = compare_prompts(prev, cur, ids)
    assert d.kind == rule.HIT and 0 < d.missed_tokens < rule.SLACK_TOKENS


def test_fingerprints_hold_no_text():
    secret = "the launch code is 0451"
    fp, _ = fp_of([{"role": "user", "content": secret}], system=secret)
    held = b"".join(v for v in (fp.model, fp.system, fp.tools, fp.messages, fp.blocks, fp.tail))
    assert secret.encode() not in held and b"launch" not in held
    assert set(Fingerprint.__slots__) == {  # nothing else is kept
        "model", "system", "tools", "messages", "blocks", "tail", "prompt_len"}  # fmt: skip


def test_diagnose_asks_the_tenants_own_store():
    store = FingerprintStore(8, 10**6)
    prev, _ = fp_of(FIRST)
    store.put("a", "msg_1", prev)
    cur, ids = fp_of([*FIRST, {"role": "user", "content": "x"}])
    asked = PromptRecord("msg_2", cur, asked=True, compare_to="msg_1")
    assert diagnose(store, "a", asked, ids).kind == rule.HIT
    assert diagnose(store, "b", asked, ids).kind == rule.NOT_FOUND  # another tenant's id
    unknown = PromptRecord("msg_2", cur, asked=True, compare_to="msg_nope")
    assert diagnose(store, "a", unknown, ids).kind == rule.NOT_FOUND
    opt_in = PromptRecord("msg_2", cur, asked=True)
    assert diagnose(store, "a", opt_in, ids).kind == rule.NO_COMPARISON
    assert diagnose(store, "a", PromptRecord("msg_2", cur), ids) is None


def test_store_count_bound_evicts_the_oldest_per_tenant():
    store = FingerprintStore(3, 10**6)
    fp, _ = fp_of(FIRST)
    for i in range(5):
        store.put("a", f"id{i}", fp)
    store.put("b", "id0", fp)
    assert [store.get("a", f"id{i}") is not None for i in range(5)] == [False, False] + [True] * 3
    assert store.count("a") == 3 and store.count("b") == 1
    assert store.nbytes("a") == 3 * fp.nbytes
    store.put("a", "id4", fp)  # again: counted once
    assert store.count("a") == 3 and store.nbytes("a") == 3 * fp.nbytes


def test_store_byte_bound_evicts_the_oldest():
    small, _ = fp_of(FIRST)
    big, _ = fp_of([{"role": "user", "content": "y" * 40 * BLOCK_TOKENS}])
    store = FingerprintStore(100, 2 * small.nbytes + big.nbytes)
    store.put("a", "s1", small)
    store.put("a", "s2", small)
    store.put("a", "b1", big)
    assert store.count("a") == 3
    store.put("a", "s3", small)  # past the bytes: the oldest goes
    assert store.get("a", "s1") is None and store.get("a", "s3") is not None
    assert store.nbytes("a") <= store.max_bytes_per_owner
    tiny = FingerprintStore(100, small.nbytes - 1)
    tiny.put("a", "s1", small)  # larger than the bound alone: not kept
    assert tiny.get("a", "s1") is None and tiny.count("a") == 0 and tiny.nbytes("a") == 0
    with pytest.raises(ValueError):
        FingerprintStore(0, 1)
