"""benchmarks/bench_peers.py's pure parts: the rows' order from round to round, the length of a round, the CPU of a
process tree read from /proc, the bars. No servers, no peers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_peers import (  # noqa: E402
    CLOCK_TICKS,
    ROWS,
    Result,
    Sample,
    all_stats,
    bars,
    epochs_per_round,
    parse_stat,
    round_order,
    tree_cpu_seconds,
    tree_ticks,
)

NAMES = ["ringfeed", "torchvision", "dali_cpu", "webdataset", "streaming", "litdata"]


@pytest.mark.parametrize("count", [1, 2, 3, 6, 8])
def test_every_round_runs_every_row_once(count):
    names = NAMES[:count] if count <= len(NAMES) else [f"row{index}" for index in range(count)]
    for round_ in range(3 * count):
        assert sorted(round_order(names, round_)) == sorted(names)


@pytest.mark.parametrize("count", [2, 3, 6, 8])
def test_each_row_is_first_once_every_len_rounds(count):
    names = [f"row{index}" for index in range(count)]
    firsts = [round_order(names, round_)[0] for round_ in range(count)]
    assert sorted(firsts) == sorted(names)
    # ... so no row is first in two rounds in a row
    assert all(first != after for first, after in zip(firsts, firsts[1:], strict=False))


def test_the_order_turns_round_every_other_round():
    """A row follows a different row in consecutive rounds: what it inherits (page cache, a neighbour's left-over
    work) changes."""
    names = NAMES
    for round_ in range(2 * len(names)):
        this, after = round_order(names, round_), round_order(names, round_ + 1)
        predecessors = {b: a for a, b in zip(this, this[1:], strict=False)}
        later = {b: a for a, b in zip(after, after[1:], strict=False)}
        assert all(predecessors[name] != later.get(name) for name in predecessors if name in later)


def test_round_order_of_nothing():
    assert round_order([], 3) == []


@pytest.mark.parametrize(("images", "buffered", "multiple", "epochs"), [
    (5_000, 1_280, 20, 6),  # 25,600 images: 6 epochs of 5,000
    (5_000, 250, 20, 1),  # exactly 20×
    (5_000, 251, 20, 2),
    (400, 512, 1, 2),  # a smoke run still reads the largest buffer once
    (400, 0, 20, 1),  # at least one epoch
])
def test_a_round_reads_a_multiple_of_the_largest_buffer(images, buffered, multiple, epochs):
    assert epochs_per_round(images, buffered, multiple) == epochs
    assert epochs * images >= multiple * buffered


def stat_line(pid: int, comm: str, ppid: int, utime: int, stime: int, cutime: int = 0, cstime: int = 0) -> str:
    # Fields 3..13 before utime (state, ppid, pgrp, session, tty, tpgid, flags, minflt, cminflt, majflt, cmajflt).
    return (f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194304 100 0 0 0 {utime} {stime} {cutime} {cstime} 20 0 4 0 "
            "12345 1000000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0")


def test_parse_stat_reads_after_the_last_parenthesis():
    assert parse_stat(stat_line(42, "python3", 7, 100, 20, 5, 1)) == (42, 7, 126)
    # A command name may hold spaces and parentheses (pt_main_thread, "(sd-pam)", "a) S 1 2 (b").
    assert parse_stat(stat_line(43, "a) S 1 2 (b", 7, 10, 2)) == (43, 7, 12)
    assert parse_stat(stat_line(44, "Web Content", 1, 3, 4)) == (44, 1, 7)


def test_parse_stat_of_this_process():
    pid, ppid, ticks = parse_stat(Path("/proc/self/stat").read_text())
    assert pid == os.getpid() and ppid == os.getppid()
    assert ticks >= 0


def test_tree_ticks_counts_the_root_and_every_descendant_only():
    stats = [
        (1, 0, 1000),  # init: not in the tree
        (10, 1, 50),  # the peer process
        (11, 10, 30),  # a DataLoader worker
        (12, 10, 20),  # another
        (13, 11, 5),  # a worker's own child
        (20, 1, 400),  # another peer: not counted
        (21, 20, 100),
    ]
    assert tree_ticks(stats, 10) == 105
    assert tree_ticks(stats, 11) == 35
    assert tree_ticks(stats, 20) == 500
    assert tree_ticks(stats, 99) == 0  # ended: nothing


def test_tree_ticks_takes_reaped_children_from_their_reaper():
    """A worker that ended during a round: its CPU moved into its parent's cutime/cstime (parse_stat adds them), so
    the tree's total does not drop when it goes."""
    before = [(10, 1, parse_stat(stat_line(10, "peer", 1, 40, 10))[2]), (11, 10, 30)]
    after = [(10, 1, parse_stat(stat_line(10, "peer", 1, 45, 10, 25, 10))[2])]  # worker 11 ran 5 more, was reaped
    assert tree_ticks(after, 10) - tree_ticks(before, 10) == 5 + 5  # the peer's 5 and the worker's last 5


def test_tree_ticks_survives_a_loop():
    assert tree_ticks([(5, 6, 1), (6, 5, 2)], 5) == 3


def test_tree_cpu_seconds_of_this_process_tree():
    ticks = tree_ticks(all_stats(), os.getpid())
    assert ticks >= 0
    assert tree_cpu_seconds(os.getpid()) >= ticks / CLOCK_TICKS


def result(images_per_s: float, cpu_ms: float, node_ms: float | None = None) -> Result:
    return Result.of([Sample(1000, 1000 / images_per_s, cpu_ms, node_ms)])


def test_result_takes_the_median_round():
    samples = [Sample(1000, seconds, cpu, node) for seconds, cpu, node in
               ((1.0, 2.0, 0.5), (2.0, 3.0, 0.6), (4.0, 1.0, 0.4))]
    got = Result.of(samples)
    assert got.images_per_s == 500  # 1000, 500, 250
    assert got.cpu_ms == 2.0
    assert got.total_cpu_ms == 2.5  # per round: 2.5, 3.6, 1.4
    assert got.with_node
    assert got.images_per_cpu_s == pytest.approx(400)


def test_bars_count_the_node_and_pair_gpu_peers_with_the_gpu_decode():
    results = {
        "ringfeed": result(1000, 1.0, 0.5),  # 1.5 ms per image with the node: 667 images per CPU-second
        "ringfeed_gpu": result(4000, 0.3, 0.2),  # 0.5 ms: 2,000
        "torchvision": result(900, 3.0),  # 333
        "dali_cpu": result(1500, 1.0),  # 1,000
        "dali_mixed": result(5000, 0.25),  # 4,000
    }
    got = dict(bars(results))
    assert set(got) == {"ringfeed_vs_torchvision", "ringfeed_vs_dali_cpu", "ringfeed_vs_dali_mixed"}
    assert got["ringfeed_vs_torchvision"] == pytest.approx(2.0)
    assert got["ringfeed_vs_dali_cpu"] == pytest.approx(2 / 3)
    assert got["ringfeed_vs_dali_mixed"] == pytest.approx(0.5)


def test_no_bar_without_the_ringfeed_row_it_compares_with():
    assert bars({"ringfeed": result(1000, 1.0, 0.5), "dali_mixed": result(5000, 0.25)}) == []
    assert bars({"torchvision": result(900, 3.0)}) == []


def test_every_peer_is_compared_with_a_ringfeed_row():
    for name, kind in ROWS.items():
        if not name.startswith("ringfeed"):
            assert kind.versus in ROWS and kind.versus.startswith("ringfeed")
            assert ROWS[kind.versus].gpu == kind.gpu
