"""Neighbouring frame strips brought into the mirror in the background, before the click that asks for them.

Bounded: :data:`PREFETCH_WORKERS` threads, at most :data:`PREFETCH_QUEUE` waiting (more are
dropped), each strip asked for once per process (:func:`ask`); a prefetch that fails is
left for the click itself to meet. What to prefetch is the source's to say
(:meth:`loaders.remote.source.RemoteSource.prefetch`).
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from loaders.remote.mirror import WRITE_BACK_OFF

PREFETCH_WORKERS = 2
"""Threads that bring neighbouring strips in the background (:meth:`RemoteSource.prefetch`)."""
PREFETCH_QUEUE = 4
"""Strips waiting to be prefetched at most; more asks are dropped."""
_prefetch_lock = threading.Lock()
_prefetched: set[tuple[str, str, int]] = set()
_prefetch_waiting = [0]
_futures: list = []
_pool: list[ThreadPoolExecutor] = []


def prefetching() -> bool:
    """Whether neighbouring strips are prefetched (``MFM_PREFETCH`` is not ``0``/``off``)."""
    return os.environ.get("MFM_PREFETCH", "").strip().lower() not in WRITE_BACK_OFF


def ask(key: tuple[str, str, int], work: Callable[[], None]) -> None:
    """Do ``work`` (bring one strip into the mirror) on the prefetch threads, unless ``key``
    (run, episode folder, strip) was asked for before in this process or
    :data:`PREFETCH_QUEUE` are waiting (then it is dropped); a failure of it is ignored."""
    with _prefetch_lock:
        if key in _prefetched or _prefetch_waiting[0] >= PREFETCH_QUEUE:
            return
        _prefetched.add(key)
        _prefetch_waiting[0] += 1
    future = _prefetch_pool().submit(_prefetch_one, work)
    with _prefetch_lock:
        _futures.append(future)


def _prefetch_one(work: Callable[[], None]) -> None:
    """Do one prefetch, then count it as no longer waiting."""
    try:
        with contextlib.suppress(Exception):  # a prefetch that fails is met again by the click
            work()
    finally:
        with _prefetch_lock:
            _prefetch_waiting[0] -= 1


def _prefetch_pool() -> ThreadPoolExecutor:
    """The prefetch threads, started on first use."""
    with _prefetch_lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(max_workers=PREFETCH_WORKERS, thread_name_prefix="mfm-prefetch"))
        return _pool[0]


def prefetch_wait() -> None:
    """Return once the prefetches asked for so far are done (tests, benchmarks)."""
    with _prefetch_lock:
        waiting = list(_futures)
        _futures.clear()
    for f in waiting:
        f.result()
