"""How many CPUs this process may use, as a container sees it: thread pools sized from the node's cores (what
``os.cpu_count`` says) oversubscribe a Pod whose CPU limit is a fraction of them."""

from __future__ import annotations

import os


def cpu_count(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """CPUs this process may use: the cgroup v2 quota where one is set (a container's CPU limit), else the
    affinity mask."""
    available = len(os.sched_getaffinity(0))
    try:
        quota, period = open(os.path.join(cgroup_root, "cpu.max")).read().split()
    except (OSError, ValueError):
        return available
    if quota == "max":
        return available
    return max(1, min(available, -(-int(quota) // int(period))))
