"""What processes use, read from /proc: CPU seconds (one process, the whole machine), resident
memory and open files (a server's front and its workers)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of one process."""
    try:
        fields_ = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields_[11]) + int(fields_[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy() -> float:
    """CPU seconds the whole machine spent busy (every process), from /proc/stat."""
    try:
        ticks = [int(t) for t in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is in user already


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def sample(front: int) -> dict:
    """{"front": {...}, "workers": {...}}: RSS (kB) and open files of the front, and summed
    over its children (the workers; spawn's resource tracker included)."""
    children = _children(front)
    return {
        "t": time.monotonic(),
        "front": {"rss_kb": _rss_kb(front), "fds": _fds(front)},
        "workers": {
            "rss_kb": sum(_rss_kb(p) for p in children),
            "fds": sum(_fds(p) for p in children),
            "count": len(children),
        },
    }
