"""`radixrt router` flags: defaults from the config dataclasses, bad values are usage errors."""

from __future__ import annotations

import dataclasses

import pytest

from radixrt.cli import main as cli_main
from radixrt.core.config import RouterConfig, RouterServerConfig
from radixrt.serve.placement.route_keys import route_request
from radixrt.serve.router.args import ROUTER_CONFIGS, make_parser, parse_args


def test_router_defaults_equal_the_dataclasses() -> None:
    parser = make_parser()
    for cls in ROUTER_CONFIGS:
        for f in dataclasses.fields(cls):
            assert parser.get_default(f.name) == f.default, (cls.__name__, f.name)
    args = parse_args(["--worker-urls", "http://a:1", "http://b:2", "--port", "9"])
    assert args.worker_urls == ["http://a:1", "http://b:2"]
    assert args.router == RouterConfig() and args.server == RouterServerConfig(port=9)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--worker-urls", "a:1"],
        ["--worker-urls", "http://a", "--router-policy", "x"],
        ["--worker-urls", "http://a", "--health-check-interval-s", "0"],
    ],
)
def test_bad_router_flags(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2


def test_console_script_has_router(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        cli_main(["router", "--help"])
    assert e.value.code == 0 and "--worker-urls" in capsys.readouterr().out


def test_route_keys_from_bodies() -> None:
    assert route_request("/generate", {"text": ["ab", "c"]}, None).key == "ab"
    assert route_request("/generate", {"input_ids": [[1, 2], [3]]}, None).key == (1, 2)
    r = route_request(
        "/v1/completions", {"prompt": "hi", "user": "u", "prompt_cache_key": "k"}, None
    )
    assert (r.key, r.session) == ("hi", "k")
    chat = {
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": [{"type": "text", "text": "Q"}]},
        ]
    }
    r = route_request("/v1/chat/completions", chat, "sess")
    assert r.key == "system: S\nuser: Q\n" and r.session == "sess"
    assert route_request("/generate", None, None).key == ()
