"""Rank 0's rendezvous store: it listens only where told, and its keys need the group's secret."""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

import pytest
import torch.distributed as dist

from radixrt.core.config import ModelConfig
from radixrt.executor.tp_group import (
    announce_joined,
    group_secret,
    report_failure,
    reported_failure,
)
from radixrt.model.parallel.comm import SECRET_ENV, connect_store, serve_store, split_addr
from radixrt.serve.engine import Engine
from radixrt.serve.http.args import parse_args

SECRET = "0123456789abcdef0123456789abcdef"
TIMEOUT = datetime.timedelta(seconds=5)
MULTI_NODE = {"tp_size": 2, "nnodes": 2, "dist_init_addr": "127.0.0.1:29500"}

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net")


def listeners(port: int | None = None, pid: int | None = None) -> list[ipaddress.IPv4Address]:
    """Local addresses of the listening TCP sockets on `port`, or of process `pid`."""
    inodes = None
    if pid is not None:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:  # closed since the listing (the listing's own fd, for one)
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            addr_hex, port_hex = fields[1].split(":")
            if fields[3] != "0A" or (port is not None and int(port_hex, 16) != port):
                continue
            if inodes is not None and fields[9] not in inodes:
                continue
            # /proc/net prints each 32-bit word of the address in host (little-endian) order
            raw = b"".join(
                bytes.fromhex(addr_hex[i : i + 8])[::-1] for i in range(0, len(addr_hex), 8)
            )
            found.append(ipaddress.ip_address(raw))
    return found


def test_the_store_listens_only_on_the_address_given() -> None:
    store, addr = serve_store("127.0.0.1:0", SECRET, TIMEOUT)
    port = split_addr(addr)[1]
    assert addr == f"127.0.0.1:{port}" and port > 0  # port 0: the one bound, read back
    assert listeners(port) == [ipaddress.ip_address("127.0.0.1")]  # not 0.0.0.0 nor ::
    peer = connect_store(addr, SECRET, TIMEOUT)
    peer.set("k", "v")
    assert store.get("k") == b"v"

    named, named_addr = serve_store("localhost:0", SECRET, TIMEOUT)  # a name: what it resolves to
    assert [a.is_loopback for a in listeners(split_addr(named_addr)[1])] == [True]


def test_a_client_without_the_secret_cannot_report_a_failure() -> None:
    store, addr = serve_store("127.0.0.1:0", SECRET, TIMEOUT)
    announce_joined(store, 1)
    raw = dist.TCPStore("127.0.0.1", split_addr(addr)[1], is_master=False, timeout=TIMEOUT)
    raw.set("radixrt/failed", "forged")
    # Any client can list the keys and so learn the secret's prefix: still no failure key.
    for key in raw.list_keys():
        raw.set(key.replace("radixrt/joined/1", "radixrt/failed"), "forged")
    report_failure(addr, "not the secret", "forged")
    assert reported_failure(store, SECRET) is None

    reason = "tensor-parallel rank 1 on node 1 exited with status 1"
    report_failure(addr, SECRET, reason)
    assert reported_failure(store, SECRET) == reason


def test_multi_node_needs_a_secret(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    with pytest.raises(ValueError, match=SECRET_ENV):
        ModelConfig(**MULTI_NODE)
    with pytest.raises(SystemExit):
        parse_args(["--tp", "2", "--nnodes", "2", "--dist-init-addr", "127.0.0.1:29500"])
    assert "--dist-secret-file" in capsys.readouterr().err
    assert len(group_secret(ModelConfig(tp_size=2))) == 32  # one node: made fresh

    monkeypatch.setenv(SECRET_ENV, SECRET)
    assert group_secret(ModelConfig(**MULTI_NODE)) == SECRET
    path = tmp_path / "secret"
    path.write_text("from-the-file\n")
    assert group_secret(ModelConfig(**MULTI_NODE, dist_secret_file=str(path))) == "from-the-file"
    path.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        group_secret(ModelConfig(**MULTI_NODE, dist_secret_file=str(path)))


def test_a_one_node_group_listens_on_loopback_and_keeps_the_secret_out_of_argv(
    tiny_llama_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    with Engine(str(tiny_llama_path), tp_size=2, max_total_tokens=256) as engine:
        (worker,) = engine.scheduler.runner.tp_group.procs.values()
        for pid in (os.getpid(), worker.pid):  # the store and gloo's pair sockets
            assert listeners(pid=pid) and all(a.is_loopback for a in listeners(pid=pid))
        env = dict(
            v.split("=", 1)
            for v in Path(f"/proc/{worker.pid}/environ").read_text().split("\0")
            if v
        )
        assert env["GLOO_SOCKET_IFNAME"] == "lo" and "GLOO_SOCKET_IFNAME" not in os.environ
        assert env["NCCL_SOCKET_IFNAME"] == "lo"  # NCCL's bootstrap too, on CUDA
        assert env[SECRET_ENV] not in Path(f"/proc/{worker.pid}/cmdline").read_text()


def test_the_loopback_env_pins_gloo_and_nccl_on_one_node_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from radixrt.executor.tp_launch import loopback_env

    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    one = ModelConfig(tp_size=2)
    assert loopback_env(one, "127.0.0.1:29500") == {
        "GLOO_SOCKET_IFNAME": "lo",
        "NCCL_SOCKET_IFNAME": "lo",
    }
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")  # the user's choice stays
    assert loopback_env(one, "127.0.0.1:29500") == {"GLOO_SOCKET_IFNAME": "lo"}
    monkeypatch.setenv(SECRET_ENV, SECRET)
    assert loopback_env(ModelConfig(**MULTI_NODE), "127.0.0.1:29500") == {}
