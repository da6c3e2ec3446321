"""ApproxTree against a brute-force reference: the longest common prefix with any kept key."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from radixrt.serve.placement.approx_tree import ApproxTree


def _lcp(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 3), max_size=12)), max_size=40))
def test_match_equals_the_longest_common_prefix(ops) -> None:
    tree, kept = ApproxTree(max_size=10_000), []
    for is_insert, ids in ops:
        key = tuple(ids)
        if is_insert:
            tree.insert(key)
            kept.append(key)
        else:
            assert tree.match(key) == max((_lcp(key, k) for k in kept), default=0)
        tree.check_integrity()


def test_text_keys_split_and_match() -> None:
    tree = ApproxTree(max_size=1000)
    tree.insert("You are a helpful assistant. Q1")
    tree.insert("You are a helpful assistant. Q2")
    tree.insert("Translate: hello")
    tree.check_integrity()
    assert tree.match("You are a helpful assistant. Q3") == len("You are a helpful assistant. Q")
    assert tree.match("Translate: bye") == len("Translate: ")
    assert tree.match("nothing") == 0 and tree.match("") == 0
    assert tree.size == len("You are a helpful assistant. Q12") + len("Translate: hello")


def test_prune_drops_least_recently_used_leaves_first() -> None:
    tree = ApproxTree(max_size=30)
    tree.insert("a" * 10 + "old")
    tree.insert("b" * 10 + "new")
    tree.match("a" * 10 + "old")  # now "a..." is the more recent
    tree.insert("c" * 10)  # 13 + 13 + 10 = 36 > 30: the "b" branch goes
    tree.check_integrity()
    assert tree.size <= 30
    assert tree.match("b" * 10 + "new") == 0
    assert tree.match("a" * 10 + "old") == 13 and tree.match("c" * 10) == 10
    tree.prune(0)
    tree.check_integrity()
    assert tree.size == 0 and tree.match("c" * 10) == 0


def test_a_full_tree_does_not_walk_every_node_on_each_insert(monkeypatch) -> None:
    tree = ApproxTree(max_size=1000)
    walks = []
    nodes = tree._nodes
    monkeypatch.setattr(tree, "_nodes", lambda: walks.append(1) or nodes())
    for i in range(600):  # 10 items each: full after 100, then 500 more inserts
        tree.insert(tuple(range(i * 10, i * 10 + 10)))
        assert tree.size <= 1000
    tree.check_integrity()
    assert len(walks) <= 500 * 10 // 100 + 1  # one prune per 100 items inserted, not 500
    assert tree.match(tuple(range(5990, 6000))) == 10  # the newest stays
