"""The machine's state in a failed test's report (tests/support/machine.py): parsing
/proc's files and the text, from what was read."""

from __future__ import annotations

import pytest

from tests.support import machine

PSI = ("some avg10=95.53 avg60=91.48 avg300=76.84 total=1828797655\n"
       "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


def test_pressure_reads_the_some_line() -> None:
    assert machine.pressure(PSI) == (95.53, 91.48)
    with pytest.raises(ValueError, match="no 'some' line"):
        machine.pressure("full avg10=1 avg60=2\n")


def test_meminfo_in_kib() -> None:
    text = "MemTotal:       24683784 kB\nMemAvailable:   15268000 kB\nHugePages_Total:       0\n"
    assert machine.meminfo(text) == {
        "MemTotal": 24683784, "MemAvailable": 15268000, "HugePages_Total": 0}  # fmt: skip


def test_the_busiest_are_those_that_used_most_between_the_looks() -> None:
    before = [machine.Process(1, "etcd", 10.0), machine.Process(2, "kube-apiserver", 50.0),
              machine.Process(3, "idle", 4.0)]  # fmt: skip
    after = [machine.Process(1, "etcd", 10.4), machine.Process(2, "kube-apiserver", 51.5),
             machine.Process(3, "idle", 4.0), machine.Process(9, "kubectl get", 0.3)]  # fmt: skip
    top = machine.busiest(before, after, seconds=1.0, top=2)
    assert [(round(cores, 2), p.name) for cores, p in top] == [(1.5, "kube-apiserver"),
                                                               (0.4, "etcd")]  # fmt: skip
    assert [p.pid for _, p in machine.busiest(before, after, 1.0)] == [2, 1, 9]


def test_the_text_names_load_memory_pressure_and_the_busiest() -> None:
    text = machine.describe(
        "41.23 22.89 13.79 5/4486 12345",
        {"MemTotal": 24 * 2**20, "MemAvailable": 15 * 2**20},
        {"cpu": (95.5, 91.5), "memory": (0.0, 0.0)},
        [(1.5, machine.Process(2, "kube-apiserver", 51.5))],
        cores=2,
    )
    assert text.splitlines() == [
        "load 41.23 22.89 13.79 on 2 cores (5/4486 runnable/threads)",
        "memory 15.0 GiB available of 24.0",
        "pressure, the share of the last 10 s / 60 s some task waited for it: "
        "cpu 96%/92%, memory 0%/0%",
        "the busiest processes (cores): 1.50 kube-apiserver [2]",
    ]
