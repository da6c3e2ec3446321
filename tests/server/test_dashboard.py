"""The dashboard on a server on the tiny random model (SmolLM2's tokenizer, so prompts decode):
GET /dashboard/data's JSON after prompts sharing a prefix and a few misses; the page in headless
chromium (the figures fill in, the tree shows the prefix sent, the pool adds up, a miss shows
its explanation, no JavaScript error, nothing loaded from elsewhere); admin only with a key file
(the page itself open, the page asking for the key); every series the Grafana dashboard charts
is in /metrics; the recorder's history. The --dp merge: test_dp_dispatcher.py."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from radixrt.core import FinishKind, FinishReason, SamplingParams
from radixrt.serve.http.dashboard.recorder import BUCKET_S, DashboardRecorder, quantile
from radixrt.serve.results.state import ReqOutput
from radixrt.serve.web.keys import hash_key

from .server_proc import start_server
from .test_metrics_steps import check_server_counts_every_pass

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "You are the dashboard test assistant. Answer in one word. " + " ".join(
    f"Rule {i}: be brief." for i in range(8)
)
SHARED = "You are the dashboard test assistant. Answer in"  # where EDITED leaves PREFIX
EDITED = PREFIX.replace("one word", "two words")
OTHER = "A different prompt about the weather in Lisbon, which nobody sent before this one."
KEYS = {"a": "key-of-a", "ops": "key-of-ops"}
STATES = ("free", "evictable", "locked", "pinned", "held")


def _gen(server: Any, text: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    body = {"text": text, "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
    r = server.post("/generate", json=body, headers=headers or {})
    assert r.status_code == 200, r.text
    return r.json()["meta_info"]


def _traffic(server: Any, headers: dict[str, str] | None = None) -> None:
    """Three prompts on one prefix (the first misses, the others hit), then two misses: the
    prefix edited early on, and a prompt never seen."""
    for i in range(3):
        _gen(server, PREFIX + f" Question {i}: what is {i} plus {i}?", headers)
    _gen(server, EDITED + " Question 9: what is nine?", headers)
    _gen(server, OTHER, headers)


@pytest.fixture(scope="module")
def dashboard_server(tiny_llama_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Without --enable-metrics: the dashboard must not need them."""
    server = start_server(tiny_llama_path, tmp_path_factory.mktemp("dashboard"))
    try:
        _traffic(server)
        yield server
        server.wait_idle_and_whole()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def keyed_server(tiny_llama_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("dashboard_keys")
    entries = [
        {"key": hash_key(KEYS["a"]), "tenant": "a"},
        {"key": hash_key(KEYS["ops"]), "tenant": "ops", "role": "admin"},
    ]
    (tmp / "keys.json").write_text(json.dumps({"keys": entries}))
    server = start_server(
        tiny_llama_path, tmp, "--api-key-file", str(tmp / "keys.json"), "--enable-metrics"
    )
    server.headers = _auth("ops")
    try:
        _traffic(server, _auth("a"))
        yield server
        server.wait_idle_and_whole()
    finally:
        server.stop()


def _auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


def test_the_data_endpoint_shows_the_tree_the_pool_and_the_misses(dashboard_server) -> None:
    data = dashboard_server.get("/dashboard/data").json()
    assert set(data) == {"time", "model", "pool", "queue", "counters", "recent", "series",
                         "tree", "misses"}  # fmt: skip
    pool = data["pool"]
    assert sum(pool[s] for s in STATES) == pool["total"] == 4096
    assert pool["held"] == pool["locked"] == 0 and pool["evictable"] > 0  # idle
    assert data["queue"] == {"running": 0, "waiting": 0, "in_flight": 0}
    top, *rest = data["tree"]["subtrees"]
    assert (top["depth"], top["offset"], top["namespace"]) == (1, 0, "")
    assert top["text"] == SHARED and top["hits"] >= 3  # two questions and EDITED hit it
    one, two = rest[:2]
    assert one["depth"] == two["depth"] == 2 and one["offset"] == two["offset"]
    assert one["text"].startswith(" one word. Rule 0: be brief.") and len(one["text"]) <= 60
    assert two["text"].startswith(" two words.") and one["tokens"] > two["tokens"]
    assert one["hits"] == 2 and two["hits"] == 0 and one["nodes"] >= 4
    assert top["tokens"] == sum(r["tokens"] for r in rest[:2]) + top["offset"] + one["offset"]
    assert data["tree"]["num_nodes"] >= top["nodes"] and not data["tree"]["truncated"]
    misses = data["misses"]
    assert misses["total"] == 3 and misses["by_cause"] == {"never_seen": 2, "diverged": 1}
    other, edited, first = misses["recent"]  # newest first
    assert other["explanation"]["cause"] == "never_seen"
    assert first["explanation"]["cause"] == "never_seen" and first["cached_tokens"] == 0
    why = edited["explanation"]
    assert why["cause"] == "diverged" and why["divergence"] == edited["cached_tokens"] > 0
    assert why["prompt_side"]["before"].endswith("Answer in")
    assert why["prompt_side"]["after"].startswith(" two words")
    assert why["cached_side"]["after"].startswith(" one word")
    counters = data["counters"]
    assert counters["requests"] == 5 == sum(counters["requests_by_finish"].values())
    assert 0 < counters["cache_hit_rate"] < 1
    assert counters["cached_tokens"] < counters["prompt_tokens"]
    assert counters["spec_drafted_tokens"] == 0 == counters["spec_acceptance_rate"]  # off
    points = data["series"]["points"]
    assert points and any(p["hit_rate"] for p in points)
    assert data["recent"]["requests"] == 5 and data["recent"]["ttft_p50"] > 0
    assert data["recent"]["spec"] is None  # speculation off: no card, no figures
    assert all(p["spec_tokens_per_step"] is None for p in points)


def test_the_page_is_self_contained(dashboard_server) -> None:
    r = httpx.get(dashboard_server.url + "/dashboard")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in r.headers["content-security-policy"]
    html = r.text
    assert "<!--" not in html.split("<style>", 1)[1]  # the CSS and JS were put in
    assert "function poll()" in html and ".card {" in html
    assert not re.search(r"(src|href)\s*=", html), "the page must load nothing"


def test_the_page_in_a_browser(dashboard_server, tmp_path: Path) -> None:
    with _browser() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        watch = _Watch(page, dashboard_server.url)
        page.goto(dashboard_server.url + "/dashboard")
        # Selectors, not wait_for_function: the page's Content-Security-Policy forbids eval.
        page.wait_for_selector("body[data-state=live]")
        for selector in ("#hit-chart circle", "#ttft-chart circle", "#miss-table tr .cause"):
            page.locator(selector).first.wait_for()
        assert page.locator("#miss-table .cause").count() == 3
        tree = page.inner_text("#tree-table")
        assert SHARED in tree and "one word. Rule 0: be brief." in tree
        pool = {s: _int(page.inner_text(f"#pool-{s}")) for s in STATES}
        assert sum(pool.values()) == _int(page.inner_text("#pool-total")) == 4096
        data = dashboard_server.get("/dashboard/data").json()  # idle: nothing moved since
        assert pool == {s: data["pool"][s] for s in STATES}
        misses = page.inner_text("#miss-table")
        assert "diverged" in misses and "never_seen" in misses and "at token" in misses
        assert "two words" in misses and "one word" in misses  # the prompt's and the cache's
        assert _int(page.inner_text("#queue-running")) == 0
        assert "requests finished\t5" in page.inner_text("#counters")
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        assert (tmp_path / "dashboard.png").stat().st_size > 20_000
        page.wait_for_timeout(2500)  # one more poll: redrawing raises nothing either
        assert watch.errors == [] and watch.foreign == []


def test_the_data_needs_an_admin_key_but_the_page_does_not(keyed_server) -> None:
    url = keyed_server.url
    assert httpx.get(url + "/dashboard").status_code == 200
    for method in ("HEAD", "POST"):
        assert httpx.request(method, url + "/dashboard").status_code == 401
    assert httpx.get(url + "/dashboard/data").status_code == 401
    assert httpx.get(url + "/dashboard/data", headers=_auth("a")).status_code == 403
    r = httpx.get(url + "/dashboard/data", headers=_auth("ops"))
    assert r.status_code == 200
    assert r.json()["tree"]["subtrees"][0]["namespace"] == "a/"  # tenant a, no salt


def test_every_series_of_the_grafana_dashboard_is_in_metrics(keyed_server) -> None:
    text = keyed_server.get("/metrics").text
    grafana = (ROOT / "docs" / "grafana-dashboard.json").read_text()
    json.loads(grafana)
    names = set(re.findall(r"radixrt_[a-z_]+", grafana))
    assert len(names) > 15
    for name in names:
        assert re.search(rf"^{name}(_bucket)?[{{ ]", text, re.M), f"{name} not in /metrics"
    assert re.search(r'^radixrt_cache_miss_causes_total\{cause="never_seen"\} 2', text, re.M)
    assert re.search(r"^radixrt_cache_misses_total 3", text, re.M)
    assert re.search(r"^radixrt_tree_nodes [1-9]", text, re.M)
    # Speculation off: its per-request histograms are present and empty, as its counters are 0.
    for name in ("radixrt_spec_request_tokens_per_step", "radixrt_spec_request_acceptance_rate"):
        assert re.search(rf"^{name}_count 0\.0$", text, re.M), name
        assert re.search(rf'^{name}_bucket{{le="\+Inf"}} 0\.0$', text, re.M), name
    assert re.search(r"^radixrt_largest_subtree_tokens [1-9]", text, re.M)


def test_step_time_histograms_count_every_pass(keyed_server) -> None:
    check_server_counts_every_pass(keyed_server)


def test_the_page_asks_for_an_admin_key(keyed_server) -> None:
    with _browser() as browser:
        page = browser.new_page()
        watch = _Watch(page, keyed_server.url)
        page.goto(keyed_server.url + "/dashboard")
        page.wait_for_selector("#auth", state="visible")
        assert "needs an admin key" in page.inner_text("#auth-reason")
        page.fill("#auth-key", KEYS["a"])
        page.click("#auth button")
        page.locator("#auth-reason", has_text="not an admin key").wait_for()
        page.fill("#auth-key", KEYS["ops"])
        page.click("#auth button")
        page.wait_for_selector("body[data-state=live]")
        assert page.is_hidden("#auth")
        assert page.evaluate("sessionStorage.getItem('radixrt-dashboard-key')") == KEYS["ops"]
        page.wait_for_selector("#tree-table tr.top")
        assert SHARED in page.inner_text("#tree-table") and "a/" in page.inner_text("#tree-table")
        refused = [e for e in watch.errors if re.search(r"status of 40[13]", e)]
        assert len(refused) == 2 and [e for e in watch.errors if e not in refused] == []


def test_the_recorder_keeps_per_bucket_history() -> None:
    now = [1000.0]
    rec = DashboardRecorder(clock=lambda: now[0])
    assert rec.series() == [] and rec.recent()["hit_rate"] is None
    for cached, ttft in ((0, 0.5), (30, 0.1), (40, 0.2)):
        rec.observe_first_token(ttft)
        rec.observe_finished(_out(cached, FinishKind.STOP), ttft + 1)
        now[0] += BUCKET_S / 4
    now[0] += BUCKET_S
    rec.observe_finished(_out(40, FinishKind.LENGTH), 1.0)
    first, second = rec.series()
    assert first["requests"] == 3 and first["hit_rate"] == 70 / 120
    assert (first["ttft_p50"], first["ttft_p90"]) == (0.2, 0.5)
    assert second["t"] - first["t"] == BUCKET_S and second["ttft_p50"] is None
    assert rec.requests_by_finish == {"stop": 3, "length": 1}
    assert rec.recent()["requests"] == 4 and rec.recent()["hit_rate"] == 110 / 160
    now[0] += 120
    assert rec.recent()["requests"] == 0 and len(rec.series()) == 2
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0 and quantile([], 0.5) is None


def _out(cached: int, kind: FinishKind) -> ReqOutput:
    out = ReqOutput("r", list(range(40)), SamplingParams(), 0.0, cached_tokens=cached)
    out.finish(FinishReason(kind))
    return out


def _int(text: str) -> int:
    return int(text.replace(",", ""))


class _Watch:
    """JavaScript errors and console errors of a page, and requests it made elsewhere."""

    def __init__(self, page: Any, origin: str) -> None:
        self.errors: list[str] = []
        self.foreign: list[str] = []
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("console", self._console)
        page.on("request", lambda r: r.url.startswith(origin) or self.foreign.append(r.url))

    def _console(self, msg: Any) -> None:
        if msg.type == "error":
            self.errors.append(f"console: {msg.text}")


@contextlib.contextmanager
def _browser() -> Iterator[Any]:
    """Headless chromium (Debian's, not Playwright's download); skips without either."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')"
    )
    exe = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    if exe is None:
        pytest.skip("no chromium: apt-get install -y chromium (`make test` tries, as root)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, headless=True)
        try:
            yield browser
        finally:
            browser.close()
