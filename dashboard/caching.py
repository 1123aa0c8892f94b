"""How the dashboard caches what it reads from runs: :func:`cached` keys a view on the run's
signature (a run written again is read again), :func:`kept` keys a value on the content of the
arrays it is built from. ``dashboard.views`` declares every cached view with these, once, at
import time; the pages call those names."""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import streamlit as st

from loaders.run import Run
from mfm.memory.retrieval import frame_hash

T = TypeVar("T")
Runs = Run | Sequence[tuple[str, Run]]
"""What :func:`cached` keys on: one run, or ``(key, run)`` pairs."""


def _runs_key(runs: Runs) -> tuple:
    """The part of a cache key that changes whenever the runs are written."""
    if isinstance(runs, Run):
        return str(runs.path), runs.signature
    return tuple((k, str(r.path), r.signature) for k, r in runs)


def cached(fn: Callable[..., T], max_entries: int = 64, shared: bool = False) -> Callable[..., T]:
    """``fn(runs, *args, **kwargs)`` cached (``st.cache_data``) on the run's signature
    (``Run.signature``; for ``(key, run)`` pairs, every key, path and signature) plus the
    other arguments, which Streamlit must be able to hash. ``st.cache_data.clear()`` clears it.

    ``shared``: keep the value itself (``st.cache_resource``, cleared by
    ``st.cache_resource.clear()``) instead of a copy per call, for values that are only read
    and costly to copy, such as a built chart (unpickling one validates it again).

    Streamlit names a cache by its function's qualified name and source, so the inner function
    is renamed after ``fn`` (and where it is defined) to give every wrapped function its own."""
    def call(key: tuple, args: tuple, kwargs: tuple, _runs: Runs) -> T:
        return fn(_runs, *args, **dict(kwargs))

    code = getattr(fn, "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code else ""
    call.__qualname__ = f"cached[{fn.__module__}.{fn.__qualname__}@{where}]"
    memo = (st.cache_resource if shared else st.cache_data)(max_entries=max_entries, show_spinner=False)(call)

    @functools.wraps(fn)
    def wrapper(runs: Runs, *args: Any, **kwargs: Any) -> T:
        return memo(_runs_key(runs), args, tuple(sorted(kwargs.items())), runs)

    return wrapper


def _content_key(v: Any) -> Any:
    """A hashable stand-in for ``v``: numpy arrays by shape, type and a hash of every byte
    (Streamlit's own hash samples arrays of 500,000 values or more, so two large frames that
    differ in a few pixels could share an entry), lists and tuples item by item."""
    if isinstance(v, np.ndarray):
        return "ndarray", v.shape, str(v.dtype), frame_hash(v)
    if isinstance(v, (list, tuple)):
        return tuple(_content_key(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _content_key(x)) for k, x in v.items()))
    return v


def kept(fn: Callable[..., T], max_entries: int = 32) -> Callable[..., T]:
    """``fn(*args, **kwargs)`` kept (``st.cache_resource``: the value itself, for values only
    read, such as a built chart) per the arguments' content (:func:`_content_key`); for
    values made from arrays rather than from a run (:func:`cached`)."""
    def call(key: tuple, _args: tuple, _kwargs: dict) -> T:
        return fn(*_args, **_kwargs)

    call.__qualname__ = f"kept[{fn.__module__}.{fn.__qualname__}]"
    memo = st.cache_resource(max_entries=max_entries, show_spinner=False)(call)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        return memo(_content_key((args, kwargs)), args, kwargs)

    return wrapper
