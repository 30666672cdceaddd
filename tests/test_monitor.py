"""The memory monitor records host memory in every mode, with or without a GPU."""

import time

from repro.trims.monitor import MemoryMonitor


def test_the_monitor_records_host_and_client_memory_without_a_store():
    with MemoryMonitor(interval_s=0.01, log=lambda message: None) as monitor:
        ballast = bytearray(64 << 20)
        ballast[::4096] = b"x" * len(ballast[::4096])  # touch every page: resident
        time.sleep(0.15)
    summary = monitor.summary()
    assert summary["samples"] >= 5
    stats = next(iter(summary["devices"].values()))
    assert stats["client_rss_bytes"]["peak"] >= 64 << 20
    assert stats["host_used_bytes"]["peak"] >= stats["client_rss_bytes"]["peak"] // 2
    assert "store_rss_bytes" not in stats  # original mode: there is no store to watch
    del ballast
