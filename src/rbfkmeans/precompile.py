r"""When the compiled kernels are ready, and compiling them out of the user's way.

The CPU kernels of :mod:`rbfkmeans.kernels` are numba functions: each compiles at its first call
and numba keeps the machine code on disk, so a new environment pays the compiler once (about two
minutes for all of them) and every later process loads them in a fraction of a second. Every
pass also exists as torch operations, equal to the kernel's up to rounding, and for one fit
they are about as fast (measured on 2 threads: iris 0.1 s either way, digits 0.4 s against
0.25 s, 200,000 x 32 blobs with k = 64 1.1-1.3 s against 0.9-1.0 s). So no fit waits for the
compiler. ``RBFKMEANS_KERNELS`` in the environment chooses:

* ``auto`` (the default): a fit of fewer than ``PAYBACK_ENTRIES`` point-centroid pairs
  (``n k``; ``FIRST_PAYBACK_ENTRIES`` for the first fits of a process, before a kernel is
  loaded in it) takes the torch passes; a larger one the kernels once a stamp in numba's cache
  folder says that all of them are compiled there for these sources, numba and Python. Until
  then it takes the torch passes, starts the compile in a background process (lowest
  priority, one per cache folder at a time, surviving the caller) and says so once with a
  :class:`CompilingKernels` warning. A fit decides once, at its start (:func:`pinned`):
  every pass of one fit runs on the same path, and under ``torch.distributed`` every rank takes
  the kernels only when all of them can;
* ``1``: the kernels always, each compiled at its first call if it is not cached (the test
  suite and the benchmarks, after :func:`rbfkmeans.warmup.warm_up`);
* ``0``: the torch passes always.

``rbfkmeans kernels`` compiles them in the foreground, with progress (:func:`main`);
:func:`rbfkmeans.warmup.warm_up` does it from Python. Either writes the stamp.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._validation import check_positive_int

if TYPE_CHECKING:
    from .comm import Comm

__all__ = ["ENV", "FIRST_PAYBACK_ENTRIES", "PAYBACK_ENTRIES", "CompilingKernels", "compiled",
           "decide", "main", "mode", "pinned", "ready_for"]

#: the environment variable that chooses the path (module docstring)
ENV = "RBFKMEANS_KERNELS"
#: a fit of fewer point-centroid pairs takes the torch passes in ``auto`` mode: there loading the
#: kernels from the cache costs more than they save (iris, k = 3: the first fit of a new
#: process 0.12 s on the torch passes, 0.47 s on the kernels; later fits 0.12 s and 0.11 s).
#: From here the kernels pay (the diabetes table, 442 rows with k = 8: 0.04 s against 0.15 s),
#: and a fit of at least this many takes them, or starts their compile
PAYBACK_ENTRIES = 1 << 10
#: the same threshold for the first fit of a process, before any kernel was loaded in it (a
#: one-shot process such as ``rbfkmeans fit``: on a 1,000-row CSV with k = 3, loading the kernels
#: costs more than the whole fit on the torch passes)
FIRST_PAYBACK_ENTRIES = 1 << 14
#: the modules whose numba functions the stamp covers (their sources are part of its key)
MODULES = ("_row_loops", "_loops", "_swap_loops", "_lloyd_loops", "_squarem_loops", "_wide_loops",
           "_sums_loops", "_hartigan_loops")
#: the stamp and the lock, in numba's cache folder for this package
STAMP = "rbfkmeans-kernels.ready"
LOCK = "rbfkmeans-kernels.lock"
#: while the kernels are not ready, the stamp is looked for again at most this often (seconds)
RECHECK_S = 1.0

_MODES = {"auto": "auto", "": "auto", "1": "on", "on": "on", "0": "off", "off": "off"}


class CompilingKernels(UserWarning):
    """The compiled kernels are being built in the background; fits take the torch passes."""


def mode() -> str:
    """``"auto"``, ``"on"`` or ``"off"``, from ``RBFKMEANS_KERNELS`` (``auto``/unset, ``1``,
    ``0``); any other value raises a ``ValueError`` naming the variable and the value."""
    raw = os.environ.get(ENV, "auto")
    found = _MODES.get(raw.strip().lower())
    if found is None:
        raise ValueError(f"{ENV} must be 'auto', '1' or '0'; got {raw!r}")
    return found


def cache_dir() -> Path | None:
    """numba's cache folder for the kernels (``NUMBA_CACHE_DIR`` or ``__pycache__`` beside the
    sources, as numba chooses); None without numba or where it keeps no cache."""
    try:
        from . import _loops
    except ImportError:  # pragma: no cover - without numba
        return None
    path = getattr(getattr(_loops.hard, "_cache", None), "_cache_path", None)
    return None if path is None else Path(path)


_key: str | None = None


def key() -> str:
    """What the cached machine code depends on: the kernels' sources, numba, Python and the
    processor's architecture, hashed."""
    global _key
    if _key is None:
        import numba

        h = hashlib.sha256(f"{numba.__version__}|{sys.version}|{platform.machine()}".encode())
        here = Path(__file__).resolve().parent
        for name in MODULES:
            h.update((here / f"{name}.py").read_bytes())
        _key = h.hexdigest()
    return _key


_compiled = False
_checked_at = -float("inf")


def compiled() -> bool:
    """Whether the stamp says every kernel is in the cache for :func:`key` (once true, it stays
    true in this process; while false the stamp is read again at most every ``RECHECK_S``)."""
    global _compiled, _checked_at
    if _compiled:
        return True
    now = time.monotonic()
    if now - _checked_at < RECHECK_S:
        return False
    _checked_at = now
    _compiled = _stamp_matches(cache_dir())
    return _compiled


def _stamp_matches(folder: Path | None) -> bool:
    """Whether ``folder`` holds a stamp written for :func:`key` (no folder, no stamp or an
    unreadable one: False)."""
    if folder is None:
        return False
    try:
        stamp = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get("key") == key()


def clear_stale() -> int:
    """Delete numba's cached machine code of :data:`MODULES` unless the stamp says it was
    compiled for :func:`key` (these sources, numba, Python); the number of files deleted.

    numba checks a cached function against its own source file only: a kernel that calls one
    of another module (the annealing's fixed point calls :func:`rbfkmeans._loops.group`) keeps
    the callee's old machine code after that module changed. Cleared first, every kernel is
    compiled again from the sources as they are. Silent where the folder is not writable."""
    folder = cache_dir()
    if folder is None or not folder.is_dir() or _stamp_matches(folder):
        return 0
    removed = 0
    for name in MODULES:
        for path in folder.glob(f"{name}.*.nb[ci]"):
            try:
                path.unlink()
            except OSError:
                continue
            removed += 1
    return removed


def mark_compiled(seconds: float) -> None:
    """Write the stamp (atomically) after every kernel was compiled or loaded: later processes
    then take the kernels. Silent where the cache folder is not writable."""
    global _compiled
    folder = cache_dir()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{STAMP}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"key": key(), "seconds": round(seconds, 3)}))
        os.replace(tmp, folder / STAMP)
    except OSError:
        return
    _compiled = True


_state = threading.local()


def pinned_value() -> bool | None:
    """The decision of the fit under way in this thread (None outside one)."""
    return getattr(_state, "pin", None)


@contextmanager
def pinned(use: bool | None = None) -> Iterator[None]:
    """Within the block every pass of this thread takes the kernels (``True``) or the torch
    passes (``False``) as decided once for it (``None``: pass by pass until :func:`decide`);
    the previous decision is back afterwards."""
    before = pinned_value()
    _state.pin = use
    try:
        yield
    finally:
        _state.pin = before


def decide(entries: int, comm: Comm | None = None) -> bool:
    """Decide the path of the fit under way (inside a :func:`pinned` block) from
    :func:`ready_for` ``(entries)``; under ``torch.distributed`` (an active ``comm``) the
    kernels only when every rank can take them, so that all run the same passes. ``entries``:
    an integer >= 0; ``comm``: None or a :class:`rbfkmeans.comm.Comm` (else ``TypeError`` or
    ``ValueError`` naming them)."""
    entries = _check_entries(entries)
    if comm is not None:
        from .comm import Comm

        if not isinstance(comm, Comm):
            raise TypeError(f"comm must be None or a rbfkmeans.comm.Comm; got "
                            f"{type(comm).__name__} {comm!r:.80}")
    use = ready_for(entries)
    if comm is not None and comm.active:
        use = comm.sum_scalars(float(use))[0] == comm.world_size
    _state.pin = use
    return use


_launched = False
#: what the background process runs: at the lowest priority before anything is imported
_BACKGROUND = ("import os\n"
               "if hasattr(os, 'nice'):\n    os.nice(19 - os.nice(0))\n"
               "from rbfkmeans.precompile import main\n"
               "raise SystemExit(main(['--background']))")


def _check_entries(entries: Any) -> int:
    """``entries`` (point-centroid pairs) as an int if it is an integer >= 0, else raise
    naming it."""
    return check_positive_int(entries, "entries", minimum=0)


def ready_for(entries: int) -> bool:
    """Whether a fit of ``entries`` point-centroid pairs takes the kernels. ``auto``: not below
    ``PAYBACK_ENTRIES`` (``FIRST_PAYBACK_ENTRIES`` while no kernel has run in this process);
    from there once :func:`compiled`, and if they are not, the fit starts
    the background compile (once per process) and warns once. ``on``: True; ``off``: False.
    ``entries`` is an integer >= 0 (else ``TypeError``/``ValueError`` naming it)."""
    entries = _check_entries(entries)
    chosen = mode()
    if chosen != "auto":
        return chosen == "on"
    if entries < (PAYBACK_ENTRIES if _loaded() else FIRST_PAYBACK_ENTRIES):
        return False  # loading the kernels would cost more than they save
    if compiled():
        return True
    if entries >= PAYBACK_ENTRIES and _compile_in_background():
        warnings.warn(
            "rbfkmeans is compiling its CPU kernels in a background process (once per "
            "environment, a few minutes; `rbfkmeans kernels` compiles them in the "
            "foreground with progress). Until they are ready, fits take the torch passes: the "
            "same results up to rounding.", CompilingKernels, stacklevel=3)
    return False


def _loaded() -> bool:
    """Whether a kernel has run in this process (so they are loaded)."""
    from . import kernels

    return kernels._pool_pid == os.getpid()


def _compile_in_background() -> bool:
    """Start :func:`main` ``(["--background"])`` in a new process once per process, where numba
    keeps a writable cache; whether it was started now."""
    global _launched
    if _launched:
        return False
    _launched = True
    folder = cache_dir()
    if folder is None:
        return False
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    if not os.access(folder, os.W_OK):
        return False
    env = dict(os.environ, **{ENV: "1"})
    # a process group of its own (a Ctrl-C at the terminal does not stop it) in the caller's
    # session: a new session would be a new scheduler autogroup on Linux, where its low
    # priority no longer yields the cores to the caller's fit
    group = {"process_group": 0} if sys.version_info >= (3, 11) else (
        {"preexec_fn": os.setpgrp} if hasattr(os, "setpgrp") else {})
    subprocess.Popen([sys.executable, "-c", _BACKGROUND],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, env=env, close_fds=True, **group)
    return True


@contextmanager
def _exclusive(folder: Path) -> Iterator[bool]:
    """Hold the compile lock of ``folder`` (yields False when another process holds it)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no lock, compiles may overlap harmlessly
        yield True
        return
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def compile_all(progress: Callable[[int, int, str], None] | None = None) -> float:
    """Compile (or load) every kernel and write the stamp; the seconds it took."""
    from . import warmup

    t0 = time.perf_counter()
    warmup.warm_up(progress=progress)
    return time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> int:
    """Compile the kernels now: ``rbfkmeans kernels`` (progress on standard output), or with
    ``["--background"]`` silently at the lowest priority (the process :func:`ready_for`
    starts). Returns the exit status; another process compiling into the same folder is waited
    for (foreground) or left to it (background). ``argv``: None (the command line's) or a
    list of str (else ``TypeError``, before anything is done)."""
    if argv is not None and (isinstance(argv, str | bytes) or not isinstance(argv, Sequence)
                             or not all(isinstance(a, str) for a in argv)):
        raise TypeError(f"argv must be None or a list of str (the arguments); got "
                        f"{type(argv).__name__} {argv!r:.80}")
    args = list(sys.argv[1:] if argv is None else argv)
    background = args == ["--background"]
    if args and not background:
        raise ValueError(f"argv must be [] or ['--background']; got {args!r}")
    folder = cache_dir()
    if folder is None:
        print("numba is not installed: the torch passes are used", file=sys.stderr)
        return 1
    if background and hasattr(os, "nice"):
        os.nice(19 - os.nice(0))

    def show(i: int, n: int, name: str) -> None:
        print(f"\r[{i}/{n}] {name:<40s}", end="", flush=True)

    with _exclusive(folder) as mine:
        if not mine:
            if not background:
                print("another process is compiling the kernels; waiting for it", flush=True)
                with _wait_for(folder):
                    pass
            return 0
        seconds = compile_all(None if background else show)
    if not background:
        print(f"\ncompiled in {seconds:.1f} s into {folder}")
    return 0


@contextmanager
def _wait_for(folder: Path) -> Iterator[None]:
    """Block until the process holding the compile lock of ``folder`` releases it."""
    import fcntl

    with open(folder / LOCK, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
