"""The soak's tallies and report: outcomes by kind, the server's RSS by process role (rss.py),
every figure of a run as JSON, the checks that decide PASS/FAIL, and the printed report."""

from __future__ import annotations

import argparse
import os
import platform
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.soak.kinds import KINDS
from benchmarks.soak.outcome import Outcome
from benchmarks.soak.rss import Rss

HEALTH_LIMIT_S = 1.0  # /health must always answer within this
RSS_EVERY_S = 10.0
BUSY_KEYS = ("num_running_reqs", "num_queued_reqs", "num_inflight_reqs")
POOL_KEYS = ("free_tokens", "evictable_tokens", "protected_tokens")


class Tally:
    """Outcomes by kind from every thread; all fields are guarded by `lock`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ok: Counter[str] = Counter()  # kind -> expected answers
        self.statuses: Counter[tuple[str, str]] = Counter()  # (kind, status or "none")
        self.notes: Counter[tuple[str, str]] = Counter()  # (kind, note)
        self.latency: defaultdict[str, list[float]] = defaultdict(list)  # kind -> seconds
        self.anomalies: dict[tuple[str, str, str], list[Any]] = {}  # -> [count, first message]

    def add(self, kind: str, out: Outcome, seconds: float) -> None:
        status = "none" if out.status is None else str(out.status)
        with self.lock:
            self.statuses[kind, status] += 1
            self.latency[kind].append(seconds)
            if out.note:
                self.notes[kind, out.note] += 1
            if out.expected:
                self.ok[kind] += 1
            else:
                self.anomalies.setdefault((kind, out.note, status), [0, out.message])[0] += 1


@dataclass
class Observed:
    """What one run measured, filled in by run_soak in this order."""

    url: str
    info: dict[str, Any]  # /get_model_info
    warmup: Tally = field(default_factory=Tally)  # one request of each well-formed kind
    tally: Tally = field(default_factory=Tally)  # the timed load
    warmup_s: float = 0.0
    load_s: float = 0.0
    rss_start: Rss = field(default_factory=dict)  # after the warm-up
    idle_wait_s: float = 0.0
    idle: bool = False
    pool: dict[str, Any] = field(default_factory=dict)  # /get_server_info once idle
    rss_end: Rss = field(default_factory=dict)
    alive: bool = True
    pauses: dict[str, Any] = field(default_factory=dict)  # pause.py: asked, count, seconds


def figures(args: argparse.Namespace, obs: Observed, monitor: Any) -> dict[str, Any]:
    """Every figure of the run as plain JSON values, with the checks and the verdict."""
    cpu, avx512f = _cpu()
    kinds = _kinds(obs.tally)
    anomalies = []
    for prefix, t in (("warm-up ", obs.warmup), ("", obs.tally)):
        for (k, n, s), (c, m) in sorted(t.anomalies.items()):
            anomalies.append({"kind": prefix + k, "note": n, "status": s, "count": c,
                              "message": m})  # fmt: skip
    h = monitor.health_s
    health = {"samples": len(h), "p99_ms": _pct(h, 99) * 1e3, "max_ms": _pct(h, 100) * 1e3,
              "failures": monitor.health_failures[:10]}  # fmt: skip
    p = {k: obs.pool.get(k) for k in (*POOL_KEYS, "max_total_tokens", *BUSY_KEYS,
                                      "cache_hit_rate", "retractions", "error")}  # fmt: skip
    checks = {
        "idle": obs.idle,
        "pool_whole": obs.idle and sum(p[k] for k in POOL_KEYS) == p["max_total_tokens"],
        "nothing_protected": obs.idle and p["protected_tokens"] == 0,
        "no_anomalies": not anomalies,
        "health_under_1s": health["max_ms"] < HEALTH_LIMIT_S * 1e3 and not health["failures"],
        "server_alive": obs.alive,
        "scheduler_paused": not obs.pauses.get("asked")
        or (obs.pauses["count"] > 0 and not obs.pauses["error"]),
    }
    total = sum(k["requests"] for k in kinds.values())
    return {
        "model": obs.info.get("model_path"), "url": obs.url, "cpu": cpu, "avx512f": avx512f,
        "cores": os.cpu_count(), "threads": args.threads, "seed": args.seed,
        "minutes": args.minutes, "warmup_s": obs.warmup_s, "load_s": obs.load_s,
        "idle_wait_s": obs.idle_wait_s, "total_requests": total,
        "requests_per_s": total / max(obs.load_s, 1e-9), "kinds": kinds,
        "every_kind_answered": all(kinds.get(k, {}).get("ok") for k in KINDS),
        "anomalies": anomalies, "health": health, "pool": p, "pauses": obs.pauses,
        "rss_kib": {"start": obs.rss_start, "end": obs.rss_end, "series": monitor.rss_series},
        "checks": checks, "passed": all(checks.values()),
    }  # fmt: skip


def _kinds(t: Tally) -> dict[str, dict[str, Any]]:
    """Per kind (the well-formed first): requests, expected answers, statuses, notes and
    client-side latency percentiles in ms."""
    out = {}
    for kind in sorted(t.latency, key=lambda k: (k.startswith("bad_"), k)):
        notes = Counter({n: c for (k, n), c in t.notes.items() if k == kind})
        out[kind] = {
            "requests": len(t.latency[kind]), "ok": t.ok[kind],
            "statuses": {s: n for (k, s), n in sorted(t.statuses.items()) if k == kind},
            "notes": dict(notes.most_common()),
            "latency_ms": {f"p{q}": _pct(t.latency[kind], q) * 1e3 for q in (50, 90, 99, 100)},
        }  # fmt: skip
    return out


def format_report(f: dict[str, Any]) -> str:
    """The report printed at the end of a run (from `figures`)."""
    lines = [
        f"radixrt soak: {f['model']} at {f['url']}",
        f"cpu: {f['cpu']}, {f['cores']} cores, avx512f: {'yes' if f['avx512f'] else 'no'}",
        f"load {f['load_s']:.1f} s after a {f['warmup_s']:.1f} s warm-up, {f['threads']} client "
        f"threads, seed {f['seed']}: {f['total_requests']} requests, "
        f"{f['requests_per_s']:.1f} req/s",
        "",
        f"{'kind':<16}{'sent':>6}{'ok':>6}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8} ms  "
        "statuses; notes",
    ]  # fmt: skip
    for kind, k in f["kinds"].items():
        lat = "".join(f"{v:>8.1f}" for v in k["latency_ms"].values())
        statuses = " ".join(f"{s}:{n}" for s, n in k["statuses"].items())
        notes = [f"{n} {c}" for n, c in k["notes"].items()]
        more = f" (+{len(notes) - 2} more)" if len(notes) > 2 else ""
        row = f"{kind:<16}{k['requests']:>6}{k['ok']:>6}{lat}  {statuses}; "
        lines.append(row + ", ".join(notes[:2]) + more)
    lines.append(f"\nanomalies: {sum(a['count'] for a in f['anomalies'])}")
    for a in f["anomalies"]:
        note = f" [{a['note']}]" if a["note"] else ""
        lines.append(f"  {a['kind']}{note} status {a['status']} x{a['count']}: "
                     f"{a['message'][:300]}")  # fmt: skip
    lines += _rss_lines(f["rss_kib"])
    h, p, c = f["health"], f["pool"], f["checks"]
    pool = " + ".join(f"{k.split('_')[0]} {p[k]}" for k in POOL_KEYS)
    lines += [
        "",
        _check(c["idle"], f"server idle after {f['idle_wait_s']:.1f} s: "
               + ", ".join(f"{k} {p[k]}" for k in BUSY_KEYS) + f" {p['error'] or ''}"),
        _check(c["pool_whole"], f"KV pool whole: {pool} = {p['max_total_tokens']} max_total"),
        _check(c["nothing_protected"], f"protected_tokens == 0 ({p['protected_tokens']})"),
        _check(c["no_anomalies"], "no anomalies (5xx, connection errors, unexpected statuses)"),
        _check(c["health_under_1s"], f"/health under 1 s: {h['samples']} samples, p99 "
               f"{h['p99_ms']:.1f} ms, max {h['max_ms']:.1f} ms, {len(h['failures'])} failures "
               f"{h['failures'][:2] or ''}"),
        _check(c["server_alive"], "server alive at the end"),
        _pause_line(c["scheduler_paused"], f["pauses"]),
        f"{'INFO' if f['every_kind_answered'] else 'WARN'} every kind answered as expected: "
        f"{sum(1 for k in KINDS if f['kinds'].get(k, {}).get('ok'))}/{len(KINDS)}",
        "RESULT: " + ("PASS" if f["passed"] else "FAIL"),
    ]  # fmt: skip
    return "\n".join(lines)


def _rss_lines(rss: dict[str, Any]) -> list[str]:
    """The RSS table, then each role's samples (at most 12, evenly spaced) to show a trend."""
    if not rss["start"]:
        return []
    lines = [f"\n{'RSS MiB':<30}{'procs':>7}{'start':>9}{'end':>9}{'delta':>9}{'peak':>9}"]
    none, series = {"kib": 0, "procs": 0}, rss["series"]
    roles = list(dict.fromkeys([*rss["start"], *rss["end"]]))
    for role in roles:
        a, b = rss["start"].get(role, none), rss["end"].get(role, none)
        start, end = a["kib"] / 1024, b["kib"] / 1024
        peak = max([start, end, *(x.get(role, 0) / 1024 for x in series)])
        procs = f"{a['procs']}->{b['procs']}" if a["procs"] != b["procs"] else str(a["procs"])
        lines.append(f"  {role:<28}{procs:>7}{start:>9.1f}{end:>9.1f}{end - start:>+9.1f}"
                     f"{peak:>9.1f}")  # fmt: skip
    step = max(1, -(-len(series) // 12))
    lines.append(f"  sampled every {RSS_EVERY_S * step:.0f} s from the warm-up on:")
    for role in roles:
        samples = " ".join(f"{x.get(role, 0) / 1024:.0f}" for x in series[::step])
        lines.append(f"  {role:<28}{samples}")
    return lines


def _pause_line(ok: bool, pauses: dict[str, Any]) -> str:
    if not pauses.get("asked"):
        return "INFO scheduler not paused (off, or a server this run did not start)"
    return _check(
        ok,
        f"scheduler paused (SIGSTOP/SIGCONT) {pauses['count']} times, "
        f"{pauses['seconds']:.1f} s in all, pids {pauses['pids']} {pauses['error']}",
    )


def _check(ok: bool, text: str) -> str:
    return f"{'PASS' if ok else 'FAIL'} {text}"


def _pct(values: list[float], q: int) -> float:
    """Nearest-rank percentile (q=100: the max); 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, -(-q * len(ordered) // 100) - 1))]


def _cpu() -> tuple[str, bool]:
    """The CPU model from /proc/cpuinfo and whether it has avx512f."""
    model, flags = platform.processor() or platform.machine(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = value.split()
                break
    except OSError:
        pass
    return model, "avx512f" in flags
