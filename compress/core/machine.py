"""Facts about the machine and software a benchmark ran on, recorded with its numbers.

A latency means little without the CPU it was measured on: INT8 speedups depend on VNNI/AMX, fp32
speed on AVX-512, and every number on the thread count. These facts go into ``results.json`` so a
reader (or a gate comparing against a baseline) can tell whether two runs are comparable.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

#: CPU features that decide how fast fp32, bf16 and int8 inference can be on x86.
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16",
             "amx_tile", "amx_int8", "amx_bf16")


def _cpuinfo() -> tuple[str | None, set[str], int | None]:
    """CPU model name, flags and physical core count from ``/proc/cpuinfo`` (Linux only)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None, set(), None
    model, flags, cores = None, set(), set()
    physical_id = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "model name" and model is None:
            model = value
        elif key == "flags" and not flags:
            flags = set(value.split())
        elif key == "physical id":
            physical_id = value
        elif key == "core id":
            cores.add((physical_id, value))
    return model, flags, (len(cores) or None)


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine_info() -> dict[str, Any]:
    """CPU model, relevant flags, core counts, memory, OS and Python."""
    model, flags, physical = _cpuinfo()
    memory = None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "cpu_model": model or platform.processor() or None,
        "cpu_flags": {flag: flag in flags for flag in CPU_FLAGS},
        "logical_cpus": os.cpu_count(),
        "physical_cores": physical,
        "available_cpus": available_cpus(),
        "memory_total_bytes": memory,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
    }
