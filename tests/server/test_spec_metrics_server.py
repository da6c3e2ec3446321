"""Speculation's per-request figures on a tiny-model server with lookup speculation on: the
/metrics histograms of tokens per step and acceptance rate count the finished requests, and
the dashboard's JSON and page show the last minute's rates and distribution. Off (the other
dashboard servers): test_dashboard.py and test_metrics_spec.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from .server_proc import start_server
from .test_dashboard import _browser, _Watch

K = 4
# Greedy on the tiny random model falls into a loop of a few tokens, so drafts from the
# request's own output are accepted.
PROMPT = "one two three four one two three four one two three four one two three four"
HIST = ("radixrt_spec_request_tokens_per_step", "radixrt_spec_request_acceptance_rate")


@pytest.fixture(scope="module")
def spec_server(tiny_llama_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    # Every draft verified whole: the tiny model's passes take about a millisecond, so on a
    # busy machine the measured row cost is noise and could say no draft pays.
    flags = ("--enable-metrics", "--speculative-num-draft-tokens", str(K),
             "--disable-adaptive-draft-depth")  # fmt: skip
    server = start_server(tiny_llama_path, tmp_path_factory.mktemp("spec_metrics"), *flags)
    try:
        yield server
        server.wait_idle_and_whole()
    finally:
        server.stop()


def _series(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    assert match, f"{name} not in /metrics"
    return float(match[1])


def _gen(server: Any, i: int) -> dict[str, Any]:
    body = {"text": f"{i} {PROMPT}", "sampling_params": {"max_new_tokens": 40, "temperature": 0}}
    r = server.post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()["meta_info"]


def test_histograms_and_dashboard_count_finished_requests(spec_server) -> None:
    before = spec_server.get("/metrics").text
    for name in HIST:  # present and empty before any request
        assert _series(before, f"{name}_count") == 0
    metas = [_gen(spec_server, i) for i in range(3)]
    assert all(m["spec_accepted_tokens"] > 0 for m in metas), metas
    text = spec_server.get("/metrics").text
    per_step = "radixrt_spec_request_tokens_per_step"
    assert _series(text, f"{per_step}_count") == 3
    total = sum(m["completion_tokens"] / m["spec_steps"] for m in metas)
    assert _series(text, f"{per_step}_sum") == pytest.approx(total)
    assert _series(text, f'{per_step}_bucket{{le="1.0"}}') == 0  # every one above 1 per step
    assert _series(text, f'{per_step}_bucket{{le="{K + 1}.0"}}') == 3
    rate = "radixrt_spec_request_acceptance_rate"
    assert _series(text, f"{rate}_count") == 3
    expect = sum(m["spec_accepted_tokens"] / m["spec_draft_tokens"] for m in metas)
    assert _series(text, f"{rate}_sum") == pytest.approx(expect)

    data = spec_server.get("/dashboard/data").json()
    spec = data["recent"]["spec"]
    assert spec["draft_tokens"] == K and spec["requests"] == 3
    out = sum(m["completion_tokens"] for m in metas)
    assert spec["tokens_per_step"] == pytest.approx(out / sum(m["spec_steps"] for m in metas))
    accepted = sum(m["spec_accepted_tokens"] for m in metas)
    assert spec["acceptance_rate"] == pytest.approx(
        accepted / sum(m["spec_draft_tokens"] for m in metas)
    )
    assert sum(b["requests"] for b in spec["distribution"]) == 3
    assert spec["distribution"][0] == {"le": 1.0, "requests": 0}
    assert any(p["spec_tokens_per_step"] for p in data["series"]["points"])
    assert "spec-card" in spec_server.get("/dashboard").text


def test_the_page_shows_the_speculation_card(spec_server) -> None:
    _gen(spec_server, 9)
    with _browser() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        watch = _Watch(page, spec_server.url)
        page.goto(spec_server.url + "/dashboard")
        page.wait_for_selector("body[data-state=live]")
        page.wait_for_selector("#spec-card", state="visible")
        page.locator("#spec-dist text").first.wait_for()
        bars = page.locator("#spec-dist rect")
        bins = spec_server.get("/dashboard/data").json()["recent"]["spec"]["distribution"]
        assert bars.count() == len(bins)
        heights = [float(bars.nth(i).get_attribute("height") or 0) for i in range(len(bins))]
        assert [h > 0 for h in heights] == [b["requests"] > 0 for b in bins]
        assert float(page.inner_text("#spec-per-step")) > 1
        assert page.inner_text("#spec-acceptance").endswith("%")
        assert watch.errors == [] and watch.foreign == []
