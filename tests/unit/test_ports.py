"""The local replicas' ports (tests/support/tfcluster.py): outside the kernel's ephemeral
range, where no outgoing connection can take one between the pick and the bind, and in a
slice of each pytest-xdist worker's own."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support import tfcluster


def test_ports_are_picked_below_the_ephemeral_range_in_each_workers_own_slice(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    slices = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(tfcluster.port_slice())
        ports = {tfcluster.free_port() for _ in range(50)}
        assert all(p in slices[-1] for p in ports), (worker, slices[-1], sorted(ports))
    assert not set(slices[0]) & set(slices[1]), slices
    assert slices[0].start == tfcluster.PORTS_FROM
    assert slices[1].stop <= min(ephemeral, tfcluster.PORTS_BELOW), (slices, ephemeral)


def test_a_port_something_listens_on_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))  # a port nobody else holds: the kernel's pick
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(tfcluster, "port_slice", lambda: range(port, port + 100))
        monkeypatch.setattr(tfcluster._PICKS, "randrange", lambda a, b: a)
        # Only the taken port is ever tried: then the kernel's own pick, another one.
        assert tfcluster.free_port() != port
