"""The machine and the software a results file was measured with.

Ratios between methods hold for the processor and the library versions of the run that measured
them (compiled loops and BLAS do not move together from one processor to the next), so every
results file should say which they were. :func:`describe` returns them as a JSON-ready dict:
the processor's name (Linux's ``/proc/cpuinfo``; ``platform.processor()`` elsewhere), the
number of CPUs, the load average at the time, the Python version, the versions of the libraries
compared (those installed), and the project's commit (with ``+changes`` when the working tree
differs from it).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["describe"]

#: The distributions whose versions a results file records, where installed.
PACKAGES = ("torch", "numpy", "scipy", "scikit-learn", "numba", "faiss-cpu", "bkmeans", "entmax",
            "threadpoolctl")


def _processor() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _commit() -> str | None:
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+changes" if dirty.strip() else "")


def describe() -> dict[str, Any]:
    """The processor, CPUs, load, Python and library versions and commit (module docstring)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"processor": _processor(), "cpu_count": os.cpu_count(),
            "load_average": None if load is None else [round(x, 2) for x in load],
            "platform": platform.platform(), "python": platform.python_version(),
            "versions": versions, "commit": _commit()}
