"""Key-tied lookup drafts (speculative/keyed.py) over a toy vocabulary: at the start of a value
the 1-2 token suffix `": "` last led into the previous value, the key word `email` finds the
prompt's `Email:` and drafts what follows it there (its leading space dropped after a quote;
right after the key's colon, an opening quote first); a long own match still wins, and
without token texts nothing changes."""

from __future__ import annotations

from radixrt.cache.memory_pool import TokenSlotAllocator
from radixrt.cache.prefix_cache import NoPrefixCache
from radixrt.core import Req, SamplingParams
from radixrt.scheduler.speculative.drafter import LookupDrafter
from radixrt.scheduler.speculative.keyed import KeyedIndex, TokenTexts

VOCAB = ["<s>", " Email", ":", " ann", "@", "x", ".com", " Phone", " +1", "23", "{\"",
         "email", "\":", " \"", "ann", "phone", "\",", " Name", " Bo", "name", "Bo", " \"+",
         " email", ","]  # fmt: skip
ID = {t: i for i, t in enumerate(VOCAB)}


def _texts() -> TokenTexts:
    return TokenTexts(lambda ids: "".join(VOCAB[i] for i in ids),
                      lambda s: [ID[s]] if s in ID else [0, 0])  # fmt: skip


def _ids(*tokens: str) -> list[int]:
    return [ID[t] for t in tokens]


# The task names the keys first (`email,`), the document then writes `Email: ann@x.com`.
PROMPT = _ids(" email", ",", " Name", ":", " Bo", " Email", ":", " ann", "@", "x", ".com",
              " Phone", ":", " +1", "23")  # fmt: skip
# Output so far: {"name": "Bo", "email": "
OUTPUT = _ids('{"', "name", '":', ' "', "Bo", '",', ' "', "email", '":', ' "')


def test_keys_compare_up_to_case_space_and_quotes() -> None:
    texts = _texts()
    assert texts.key(ID[" Email"]) == texts.key(ID["email"]) == "email"
    assert texts.key(ID['":']) == ":" and texts.key(ID[' "']) == ""
    assert texts.unspaced(ID[" ann"]) == ID["ann"]
    assert texts.unspaced(ID[" +1"]) == ID[" +1"]  # "+1" is no token: kept
    assert texts.opens(ID[' "']) and not texts.opens(ID["Bo"])


def test_value_start_drafts_the_prompt_value_not_the_previous_one() -> None:
    keyed = KeyedIndex(_texts(), PROMPT)
    tokens = PROMPT + OUTPUT
    # `email:` of the document (not the task's `email,`), its first token unspaced.
    assert keyed.draft(tokens, 4) == _ids("ann", "@", "x", ".com")
    assert keyed.draft(tokens + _ids("ann"), 3) == _ids("@", "x", ".com")
    assert keyed.draft(tokens + _ids("ann", "@"), 0) == []
    assert keyed.draft(PROMPT + _ids('{"', "name", ","), 2) == []


def test_after_a_keys_colon_the_value_opens_with_a_quote() -> None:
    """Right after `"email":` (the grammar forced the key, the value's quote is still to come)
    the draft opens the JSON string: ` "`, then the value unspaced; within max_tokens."""
    keyed = KeyedIndex(_texts(), PROMPT)
    after_key = PROMPT + _ids('{"', "email", '":')
    assert keyed.draft(after_key, 4) == _ids(' "', "ann", "@", "x")
    assert keyed.draft(after_key, 1) == _ids(' "')
    assert keyed.draft(PROMPT + _ids('{"', "phone", '":'), 2) == _ids(' "', " +1")  # no "+1"
    # A document value that opens with a quote itself gets none added.
    quoted = KeyedIndex(_texts(), _ids(" Email", ":", ' "', "ann", '",'))
    assert quoted.draft(_ids('{"', "email", '":'), 2) == _ids(' "', "ann")


def _req() -> Req:
    return Req("r", list(PROMPT), SamplingParams(temperature=0), output_ids=list(OUTPUT))


def test_drafter_prefers_the_keyed_draft_over_a_short_suffix_match() -> None:
    cache = NoPrefixCache(TokenSlotAllocator(8))
    plain = LookupDrafter(cache, 4).propose(_req(), 3)
    assert plain == _ids("Bo", '",', ' "')  # `": "` last led into the previous value
    keyed = LookupDrafter(cache, 4, texts=_texts()).propose(_req(), 3)
    assert keyed == _ids("ann", "@", "x")
    long = Req("r", list(PROMPT), SamplingParams(temperature=0),
               output_ids=_ids(" Email", ":", " ann"))  # fmt: skip
    own = LookupDrafter(cache, 4, texts=_texts()).propose(long, 2)
    assert own == _ids("@", "x")  # a 3-token own match: the n-gram draft
