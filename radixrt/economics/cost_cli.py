"""`radixrt cost`: what a workload costs under each provider's prompt-caching rules, next to the
same traffic uncached, and self-hosted at a measured throughput.

    radixrt cost --requests-per-day 10000 --shared-prefix-tokens 50000 --output-tokens 500
    radixrt cost --request-log requests.jsonl --providers anthropic,openai
    radixrt cost --gpu-hour-usd 3.5 --bench-json shared_prefix.json --plot cost.png

Prices and rules come from a dated data file (radixrt/economics/prices.json; --prices for a
copy). The replay is an upper bound on provider cache hits: routing and early eviction on
their side are not modelled.
"""

from __future__ import annotations

import argparse
import json
import sys

from radixrt.economics.cost import CostReport, estimate_costs, format_report, prefix_sweep
from radixrt.economics.prices import PROVIDERS, ModelPrices, PriceBook, load_prices
from radixrt.economics.self_hosted import Throughput, load_bench_json, self_hosted_rows
from radixrt.economics.workload import ARRIVALS, DAY_S, Scenario, read_request_log

ANTHROPIC_TTLS = {"5m": 300.0, "1h": 3600.0}
Sweep = dict[str, list[tuple[int, float, float]]]
_D = "default %(default)s"
RETENTIONS = ("in_memory", "24h")


def build_parser() -> argparse.ArgumentParser:
    s = Scenario()
    p = argparse.ArgumentParser(
        prog="radixrt cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--prices", help="a prices file (default: the bundled prices.json)")
    p.add_argument("--providers", default=",".join(PROVIDERS), help="comma-separated")
    p.add_argument("--models", help="comma-separated model names (default: all in the file)")
    w = p.add_argument_group("synthetic workload (ignored with --request-log)")
    w.add_argument("--requests-per-day", type=float, default=s.requests_per_day, help=_D)
    w.add_argument("--days", type=float, default=s.days, help=_D)
    w.add_argument(
        "--shared-prefix-tokens", type=int, default=s.shared_prefix_tokens,
        help="tokens every request of a prefix starts with (%(default)s)",
    )  # fmt: skip
    w.add_argument(
        "--unique-tokens", type=int, default=s.unique_tokens, help="tokens after it (%(default)s)"
    )
    w.add_argument("--output-tokens", type=int, default=s.output_tokens, help=_D)
    w.add_argument("--arrival", choices=ARRIVALS, default=s.arrival,
                   help="burst: each day's requests within --burst-hours from 09:00")  # fmt: skip
    w.add_argument("--burst-hours", type=float, default=s.burst_hours, help=_D)
    w.add_argument(
        "--prefixes", type=int, default=s.prefixes, help="distinct shared prefixes (%(default)s)"
    )
    w.add_argument(
        "--openai-retention", choices=RETENTIONS, default=s.openai_retention,
        help="prompt_cache_retention the requests ask for (%(default)s)",
    )  # fmt: skip
    w.add_argument(
        "--gemini-cache-ttl", type=float, default=s.gemini_cache_ttl_s, metavar="SECONDS",
        help="explicit caches live this long after each use (default: the whole scenario)",
    )  # fmt: skip
    w.add_argument("--seed", type=int, default=s.seed, help="for poisson and burst arrivals")
    p.add_argument(
        "--anthropic-ttl",
        choices=list(ANTHROPIC_TTLS),
        default="5m",
        help="TTL of the synthetic breakpoints and of assumed ones in a log",
    )
    p.add_argument("--request-log", metavar="FILE.jsonl", help="replay a server's request log")
    h = p.add_argument_group("self-hosted")
    h.add_argument("--gpu-hour-usd", type=float, help="price of one GPU-hour")
    h.add_argument("--bench-json", help="throughput: `python -m benchmarks shared_prefix --json`")
    h.add_argument("--requests-per-second-cached", type=float, help="radix cache on")
    h.add_argument("--requests-per-second-uncached", type=float, help="radix cache off")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", metavar="FILE.png", help="cost by provider and against prefix length")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    try:
        report, sweep = run(args)
    except (OSError, ValueError) as e:
        p.error(str(e))
    if args.plot:
        from radixrt.economics.cost_plot import plot_costs

        plot_costs(report, sweep, args.plot)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_report(report))
        if args.plot:
            print(f"\nplot: {args.plot}", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> tuple[CostReport, Sweep | None]:
    """The report (and, for a scenario with --plot, the prefix-length sweep)."""
    book = load_prices(args.prices)
    models = _models(book, args.providers, args.models)
    ttl = ANTHROPIC_TTLS[args.anthropic_ttl]
    notes: list[str] = []
    sweep: Sweep | None = None
    if args.request_log:
        requests = read_request_log(args.request_log)
        if not requests:
            raise ValueError(f"{args.request_log} has no requests")
        rows = estimate_costs(book, requests, models, ttl)
        span = requests[-1].time - requests[0].time
        workload = f"request log {args.request_log}"
        num_requests = len(requests)
        served = [r for r in requests if r.cached_tokens is not None]
        prompt = sum(r.prompt_tokens for r in served)
        radixrt_hit = sum(r.cached_tokens or 0 for r in served) / prompt if prompt else None
    else:
        scenario = Scenario(
            requests_per_day=args.requests_per_day,
            days=args.days,
            shared_prefix_tokens=args.shared_prefix_tokens,
            unique_tokens=args.unique_tokens,
            output_tokens=args.output_tokens,
            arrival=args.arrival,
            prefixes=args.prefixes,
            burst_hours=args.burst_hours,
            anthropic_ttl_s=ttl,
            openai_retention=args.openai_retention,
            gemini_cache_ttl_s=args.gemini_cache_ttl,
            seed=args.seed,
        )
        rows = estimate_costs(book, scenario.requests(), models, ttl)
        span, workload = scenario.duration_s, scenario.describe()
        num_requests = rows[0].bill.num_requests if rows else 0
        radixrt_hit = None
        if args.plot:
            sweep = prefix_sweep(book, scenario, models)
    throughput = _throughput(args)
    hosted = []
    if throughput is not None:
        if args.gpu_hour_usd is None:
            raise ValueError("--gpu-hour-usd is needed with a throughput")
        hosted = self_hosted_rows(args.gpu_hour_usd, throughput, num_requests)
        notes.append(
            f"self-hosted prices busy GPU time only; one GPU kept all {span / DAY_S:,.1f} days "
            f"costs ${args.gpu_hour_usd * span / 3600:,.2f}. The throughput holds for the "
            "workload it was measured on."
        )
    kv = (throughput.kv_dtype, throughput.kv_bytes_per_token) if throughput else (None, None)
    report = CostReport(
        workload, num_requests, span, book.as_of, rows, hosted,
        throughput.source if throughput else None, radixrt_hit, notes, *kv,
    )  # fmt: skip
    return report, sweep


def _models(book: PriceBook, providers: str, names: str | None) -> list[ModelPrices]:
    chosen = [p.strip() for p in providers.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in PROVIDERS]
    if unknown:
        raise ValueError(f"unknown providers {unknown}; known: {', '.join(PROVIDERS)}")
    models = [m for p in chosen for m in book.models_of(p)]
    if names:
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        missing = [n for n in wanted if n not in {m.model for m in models}]
        if missing:
            known = ", ".join(m.model for m in models)
            raise ValueError(f"no prices for models {missing}; known: {known}")
        models = [m for m in models if m.model in wanted]
    return models


def _throughput(args: argparse.Namespace) -> Throughput | None:
    if args.bench_json:
        return load_bench_json(args.bench_json)
    given = (args.requests_per_second_cached, args.requests_per_second_uncached)
    if given == (None, None):
        if args.gpu_hour_usd is not None:
            raise ValueError(
                "--gpu-hour-usd needs --bench-json or both --requests-per-second-cached "
                "and --requests-per-second-uncached"
            )
        return None
    if None in given:
        raise ValueError("give both --requests-per-second-cached and -uncached")
    return Throughput(*given)  # type: ignore[arg-type]
