"""Measure once per machine, remember it: what ``"auto"`` measured, recorded on disk with its provenance.

``precision="auto"`` and ``backend="auto"`` choose by measuring. Measured in every process, that
cost seconds at each start and could choose differently from one process to the next as the
machine's load changed. Here, as
FFTW's "wisdom" does for its plans, each measurement is written to a *tuning record* and every
later process on the same machine reuses it: the same choice everywhere, measured once.

Records
    One JSON file per measurement in :func:`tuning_root` (``CONTEXTEMBED_TUNING_DIR``, default
    ``$XDG_CACHE_HOME/contextembed/tuning``), named by a hash of what it depends on. Its provenance
    holds the measurement's kind and inputs (a model's fingerprint, the precision asked for), the
    machine (:func:`machine`: CPU model, flags, the cores and threads
    in use) and the versions of contextembed, torch and the engine. A record is used only if all of
    those match this process and its result passes the measurement's own check (the fields it
    writes, a known choice, a finite speed in range, and the choice its own numbers imply:
    :func:`recorded_implied`); a truncated, edited, forged or foreign one is measured again, with
    one :class:`TuningWarning` naming the file, and replaced.

Trust
    A record decides what a process computes, so only one this user or root could have written is
    used: a record that is a link, another user's or writable by group or others is measured
    again and replaced; a tuning directory that is any of
    those is not used at all (one warning naming it and what is wrong; the process measures for
    itself and writes nothing there). The directory is made ``0o755`` and records ``0o644``
    whatever the umask, so that what root prepared ahead is read, and trusted, by every user.

Concurrency
    Measuring holds a lock file beside the record (opened without following a link), so two
    processes that start untuned at once measure once: the second waits for the first's record
    (at most :data:`LOCK_WAIT` seconds, then measures alone) and adopts it. Records are written
    under a temporary name and renamed.

Settings
    ``CONTEXTEMBED_TUNING``: ``on`` (default: read and write records), ``refresh`` (measure again
    and rewrite, e.g. after a hardware change the provenance cannot see), ``off`` (measure in every
    process, write nothing). A directory that cannot be written costs the measurement, never the
    job: one warning naming ``CONTEXTEMBED_TUNING_DIR``, and the process measures for itself.

``contextembed tune MODEL`` (:func:`contextembed.encoders.tune`) does all of it ahead of time, so that a container image
or a cluster's workers are prepared once.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Optional

from ._runtime import provenance
from . import settings
from ._runtime.files import (TRUST_RULE, UntrustedPathError, atomic_file, make_trusted_directory, open_lock, read_trusted,
                     remove_stale_partials)
from .errors import ProvenanceError

logger = logging.getLogger(__name__)

#: environment variable naming the directory of tuning records
TUNING_DIR_ENV = "CONTEXTEMBED_TUNING_DIR"
#: environment variable saying whether records are used: on, refresh or off
TUNING_ENV = "CONTEXTEMBED_TUNING"
#: the values :data:`TUNING_ENV` takes
TUNING_MODES = ("on", "refresh", "off")
#: what the provenance record of a tuning record calls it
ARTIFACT = "tuning record"
#: seconds a process waits for another one measuring the same thing before measuring alone
LOCK_WAIT = 300.0
#: a step that runs longer than this many seconds is announced on stderr (when announcing)
ANNOUNCE_AFTER = 1.0
#: the largest record read (a real one is well under 4 KiB)
_MAX_RECORD_BYTES = 1 << 16

#: results of this process, by record file (each measured or read once per process)
_RESULTS: dict[str, dict] = {}
_RESULTS_LOCK = threading.Lock()
#: warnings already given (one per record, and one for an unwritable directory)
_WARNED: set[str] = set()
_ANNOUNCE = contextvars.ContextVar("contextembed_announce", default=False)
_REFRESH = contextvars.ContextVar("contextembed_refresh", default=False)
_THOROUGH = contextvars.ContextVar("contextembed_thorough", default=False)
_FORGET_HOOKS: list[Callable[[], None]] = []


class TuningWarning(UserWarning):
    """A tuning record was not used (damaged, stale, forged or from another machine), or records
    cannot be written: the measurement is made again."""


# -- where and whether --------------------------------------------------------------------------


def tuning_root() -> str:
    """Where records live: ``CONTEXTEMBED_TUNING_DIR``, else ``$XDG_CACHE_HOME/contextembed/tuning``
    (``~/.cache/contextembed/tuning``)."""
    return settings.cache_directory(TUNING_DIR_ENV, "tuning")


def mode() -> str:
    """``CONTEXTEMBED_TUNING`` (:data:`TUNING_MODES`); ``"on"`` when unset; ``"refresh"`` inside
    :func:`refreshing`.

    Raises
    ------
    SettingError
        For any other value, naming the variable.
    """
    configured = settings.choice(TUNING_ENV, TUNING_MODES) or "on"
    return "refresh" if _REFRESH.get() and configured == "on" else configured


@contextlib.contextmanager
def refreshing(enabled: bool = True) -> Iterator[None]:
    """Within the block, measurements are made again and their records rewritten (as with
    ``CONTEXTEMBED_TUNING=refresh``, unless that says ``off``)."""
    token = _REFRESH.set(bool(enabled))
    try:
        yield
    finally:
        _REFRESH.reset(token)


@contextlib.contextmanager
def thorough(enabled: bool = True) -> Iterator[None]:
    """Within the block (``contextembed tune``), measurements leave out nothing for the sake of time:
    a measurement made on first use bounds its cost (the engine's int8 of a large model, whose
    calibration takes minutes, is left to ``tune``), one made here does not."""
    token = _THOROUGH.set(bool(enabled))
    try:
        yield
    finally:
        _THOROUGH.reset(token)


def measuring_thoroughly() -> bool:
    """Whether measurements now are :func:`thorough`."""
    return _THOROUGH.get()


def recorded(kind: str, key: Mapping, check: Callable[[dict], None]) -> Optional[dict]:
    """The result of the measurement ``kind`` for ``key`` if this process has it or a trusted record
    on this machine holds it (as :func:`remembered` would read it); ``None`` otherwise, measuring
    nothing. With ``CONTEXTEMBED_TUNING=off`` or ``refresh`` (or inside :func:`refreshing`), only
    what this process measured."""
    expected, path = _record_path(kind, key)
    with _RESULTS_LOCK:
        known = _RESULTS.get(path)
    if known is not None or mode() != "on" or not _trusted_root():
        return known
    result = _read(path, expected, check, quiet=True)
    if result is not None:
        with _RESULTS_LOCK:
            result = _RESULTS.setdefault(path, result)
    return result


def results() -> dict[str, dict]:
    """What this process read or measured since :func:`forget`: each record's file name and result."""
    with _RESULTS_LOCK:
        return {os.path.basename(path): result for path, result in sorted(_RESULTS.items())}


# -- what a record depends on ---------------------------------------------------------------------


def machine() -> dict:
    """What a measurement on this machine depends on: the CPU's model and flags, torch's CPU
    capability, the cores this process may use and torch's threads (a record made with other
    threads or on another CPU is not this machine's)."""
    import torch

    from ._runtime.streams import cpu_streams

    model, flags = _cpu_description()
    streams_, threads = cpu_streams()
    return {
        "cpu": model,
        "cpu_flags": hashlib.blake2b(" ".join(sorted(flags)).encode(), digest_size=8).hexdigest(),
        "capability": _capability(),
        "cores": settings.usable_cores(),
        "threads": torch.get_num_threads(),
        "streams": [streams_, threads],
        "cuda": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if torch.cuda.is_available() else [],
        "torch": torch.__version__,
    }


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where it cannot be read)."""
    return frozenset(_cpu_description()[1])


def _cpu_description() -> tuple[str, tuple[str, ...]]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        import platform

        return platform.processor() or platform.machine(), ()
    model, flags = "", ()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name == "model name" and not model:
            model = value.strip()
        elif name in ("flags", "Features") and not flags:
            flags = tuple(value.split())
    return model, flags


def _capability() -> str:
    import torch

    try:
        return torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # older torch
        return ""


# -- reading, measuring, writing ------------------------------------------------------------------


def remembered(kind: str, key: Mapping, measure: Callable[[], dict], check: Callable[[dict], None], *,
               what: str) -> dict:
    """The result of the measurement ``kind`` for ``key`` on this machine: read from its record, or
    measured now by ``measure()`` and recorded.

    Parameters
    ----------
    kind : str
        Names the measurement (``"cpu precision"``, ``"transformer backend"``).
    key : mapping
        Everything besides the machine that the result depends on (JSON values): a model's
        fingerprint, the precision asked for, library versions.
    measure : callable
        Measures; returns the result, a JSON object.
    check : callable
        Raises ``ValueError`` if a result is not one ``measure`` could have returned (a choice it
        does not make, a speed out of range): what protects a process from an edited record.
    what : str
        The measurement in words, for the line on stderr and the log.
    """
    expected, path = _record_path(kind, key)
    with _RESULTS_LOCK:
        known = _RESULTS.get(path)
    if known is not None:
        return known
    current = mode()
    if current != "off" and not _trusted_root():
        current = "off"  # measured here, nothing read or written there
    result = _read(path, expected, check) if current == "on" else None
    if result is None:
        with _measuring_lock(path, current) as writable:
            # another process may have measured while this one waited for the lock
            result = _read(path, expected, check, quiet=True) if current == "on" and writable else None
            if result is None:
                result = _measure(measure, check, what, path if writable else "")
                if writable:
                    _write(path, expected, result)
    with _RESULTS_LOCK:
        return _RESULTS.setdefault(path, result)


def forget() -> None:
    """Drop what this process read or measured (the records on disk stay), here and in the modules
    that keep their own copy (:func:`on_forget`): the next use reads the records again."""
    with _RESULTS_LOCK:
        _RESULTS.clear()
    _WARNED.clear()
    for hook in _FORGET_HOOKS:
        hook()


def on_forget(hook: Callable[[], None]) -> None:
    """Call ``hook`` whenever :func:`forget` runs (a module dropping its copies of results)."""
    _FORGET_HOOKS.append(hook)


def _record_path(kind: str, key: Mapping) -> tuple[dict, str]:
    """The provenance record a result of ``kind`` for ``key`` must carry on this machine, and its file."""
    expected = provenance.record(ARTIFACT, kind=kind, machine=machine(), **key)
    return expected, os.path.join(tuning_root(), f"{_slug(kind)}-{_key_hash(expected)}.json")


def _read(path: str, expected: dict, check: Callable[[dict], None], quiet: bool = False) -> Optional[dict]:
    """The result recorded at ``path`` if its record may be trusted (:func:`contextembed._runtime.files.read_trusted`),
    matches ``expected`` and passes ``check``; ``None`` (with one :class:`TuningWarning`, unless
    ``quiet``) otherwise or if there is none."""
    try:
        data = read_trusted(path, max_bytes=_MAX_RECORD_BYTES)
    except FileNotFoundError:
        return None
    except UntrustedPathError as error:  # a link, or a file another user could have written
        return _refused(path, ProvenanceError(str(error), artifact=path, field=None), quiet)
    except ValueError as error:  # larger than a record
        return _refused(path, error, quiet)
    except OSError as error:
        _warn_once(path, f"tuning record {path} cannot be read ({error.strerror or error}); measuring again")
        return None
    try:
        found = provenance.loads(data, artifact=f"tuning record {path}")
        result = found.pop("result", None)
        provenance.check(found, expected, artifact=f"tuning record {path}", fix="it is measured again")
        if not isinstance(result, dict):
            raise ValueError(f"tuning record {path} holds no result object")
        check(result)
    except (ProvenanceError, ValueError, TypeError) as error:
        return _refused(path, error, quiet)
    logger.debug("tuning record %s used: %s", path, result)
    return result


def _refused(path: str, error: Exception, quiet: bool) -> None:
    """One :class:`TuningWarning` (unless ``quiet``) saying why the record ``path`` is not used."""
    if not quiet:
        text = str(error) if path in str(error) else f"tuning record {path}: {error}"
        _warn_once(path, text if "measured again" in text else f"{text}; it is measured again")
    return None


def recordable() -> bool:
    """Whether records can be read and written in :func:`tuning_root` (made if missing): it is
    trusted and writable (otherwise one warning says why)."""
    if not _trusted_root():
        return False
    if not os.access(tuning_root(), os.W_OK | os.X_OK):
        _warn_unwritable(PermissionError(errno.EACCES, os.strerror(errno.EACCES), tuning_root()))
        return False
    return True


def _trusted_root() -> bool:
    """Whether the tuning directory may be used: made if missing (mode ``0o755``: a directory
    prepared ahead by root is read by every user), and trusted (:func:`contextembed._runtime.files.untrusted_reason`).
    A directory another user could write is refused with one warning: anyone who can write a record
    there could choose what this process computes. One that cannot be made costs only the recording."""
    try:
        make_trusted_directory(tuning_root(), mode=0o755)
    except UntrustedPathError as error:
        _warn_once("untrusted", f"{_where()}: the tuning directory {error.path} {error.reason}, so its records are "
                                "neither used nor written (whoever can write there could choose what this process "
                                f"computes) and each process measures again; {TRUST_RULE} ({TUNING_DIR_ENV} names "
                                "the directory)")
        return False
    except OSError as error:
        _warn_unwritable(error)
        return False
    return True


def _measure(measure: Callable[[], dict], check: Callable[[dict], None], what: str, path: str) -> dict:
    with announce(what, remembered_in=path):
        result = measure()
    check(result)
    return result


def _write(path: str, expected: dict, result: dict) -> None:
    """Record ``result`` at ``path`` (atomically, a file others cannot write); a failure is one
    warning, never the job's end."""
    remove_stale_partials(os.path.dirname(path))  # records a killed process left half-written
    try:
        with atomic_file(path, what="tuning record", mode=0o644) as temporary, open(temporary, "wb") as handle:
            handle.write(provenance.dumps({**expected, "result": result}) + b"\n")
    except OSError as error:
        _warn_unwritable(error)


@contextlib.contextmanager
def _measuring_lock(path: str, current: str) -> Iterator[bool]:
    """Hold the lock file of ``path`` while measuring (waiting for another holder at most
    :data:`LOCK_WAIT` seconds); yields whether the record can be written (the directory is usable
    and tuning is not ``off``)."""
    if current == "off":
        yield False
        return
    try:
        handle = open_lock(path + ".lock")
    except UntrustedPathError as error:
        _warn_once(path + ".lock", f"the lock of tuning record {path}: {error}; measuring without recording")
        yield False
        return
    except OSError as error:
        _warn_unwritable(error)
        yield False
        return
    try:
        _lock(handle, path)
        yield True
    finally:
        handle.close()  # releases the lock


def _lock(handle, path: str) -> None:
    try:
        import fcntl
    except ImportError:  # not POSIX: measure without waiting for others
        return
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return  # a file system without locks: measure alone
        if time.monotonic() > deadline:
            _warn_once(path + ".lock", f"another process has measured for {path} for over {LOCK_WAIT:.0f} s; "
                                       "measuring in this one too")
            return
        time.sleep(0.1)


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, TuningWarning, stacklevel=4)


def _where() -> str:
    """How the tuning directory was chosen, for a warning."""
    return (f"{TUNING_DIR_ENV}={settings.raw(TUNING_DIR_ENV)!r}" if settings.raw(TUNING_DIR_ENV) is not None
            else f"the tuning directory {tuning_root()} ({TUNING_DIR_ENV} unset)")


def _warn_unwritable(error: OSError) -> None:
    _warn_once("unwritable", f"{_where()}: cannot record measurements there ({error.strerror or error}), so each "
                             f"process measures again; set {TUNING_DIR_ENV} to a directory you can write, or "
                             f"{TUNING_ENV}=off to measure without recording")


def _slug(kind: str) -> str:
    return "".join(c if c.isascii() and c.isalnum() else "-" for c in kind)


def _key_hash(expected: Mapping) -> str:
    key = {k: v for k, v in expected.items() if k != "contextembed"}
    return hashlib.blake2b(provenance.dumps(key), digest_size=12).hexdigest()


# -- saying what costs time ----------------------------------------------------------------------


@contextlib.contextmanager
def announcing(enabled: bool = True) -> Iterator[None]:
    """Within the block, steps that take over :data:`ANNOUNCE_AFTER` seconds (a measurement, an
    engine export, a calibration) print a line on stderr when they start and when they end; the
    CLI and estimators with ``show_progress=True`` announce."""
    token = _ANNOUNCE.set(bool(enabled))
    try:
        yield
    finally:
        _ANNOUNCE.reset(token)


@contextlib.contextmanager
def announce(what: str, remembered_in: str = "") -> Iterator[None]:
    """Log ``what`` (at INFO) and, when :func:`announcing` and the block outlasts
    :data:`ANNOUNCE_AFTER` seconds, say on stderr that it runs and, at its end, how long it took."""
    start = time.perf_counter()
    where = f" (remembered in {remembered_in})" if remembered_in else ""
    shown = threading.Event()

    def show() -> None:
        shown.set()
        print(f"contextembed: {what}, once for this machine{where}...", file=sys.stderr, flush=True)

    timer = threading.Timer(ANNOUNCE_AFTER, show) if _ANNOUNCE.get() else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    logger.info("%s%s", what, where)
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
        seconds = time.perf_counter() - start
        if shown.is_set():
            print(f"contextembed: {what}: done in {seconds:.1f} s", file=sys.stderr, flush=True)
        logger.info("%s: done in %.1f s", what, seconds)


# -- checks of recorded results -------------------------------------------------------------------


def recorded_speedup(value, name: str) -> float:
    """A recorded speedup: a finite number in (0, 1000]; else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1000:
        raise ValueError(f"recorded {name}={value!r} is not a speedup (a number in (0, 1000])")
    return float(value)


def recorded_choice(value, choices, name: str) -> str:
    """A recorded choice: one of ``choices``; else ``ValueError`` naming ``name``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"recorded {name}={value!r} is not one of {', '.join(map(repr, choices))}")
    return value


def recorded_cosine(value, name: str) -> float:
    """A recorded cosine: a number in [-1, 1] (and rounding above it); else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1.0 <= value <= 1.0 + 1e-6:
        raise ValueError(f"recorded {name}={value!r} is not a cosine (a number in [-1, 1])")
    return float(value)


def recorded_mapping(value, name: str) -> dict:
    """A recorded JSON object of results by name; else ``ValueError`` naming ``name``."""
    if not isinstance(value, dict):
        raise ValueError(f"recorded {name}={value!r:.80} is not an object of results by name")
    return value


def recorded_keys(result: Mapping, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    """``ValueError`` unless ``result`` has every key of ``required`` and no key beyond ``optional``
    (a field the measurement never writes is a forged or foreign record's)."""
    missing = [key for key in required if key not in result]
    extra = sorted(set(result) - set(required) - set(optional))
    if missing or extra:
        wrong = ([f"lacks {missing}"] if missing else []) + ([f"has fields the measurement never writes {extra}"]
                                                            if extra else [])
        raise ValueError(f"recorded result {sorted(result)} {' and '.join(wrong)}; expected {list(required)}"
                         + (f" and maybe {list(optional)}" if optional else ""))


def recorded_implied(value: str, implied: str, name: str, numbers: str) -> str:
    """A recorded choice that is the one its own recorded ``numbers`` imply (``implied``, what the
    measurement chooses from them); else ``ValueError``: the record holds a choice the measurement
    could never have made."""
    if value != implied:
        raise ValueError(f"recorded {name}={value!r} is not what its own numbers imply ({numbers} choose "
                         f"{implied!r}); no measurement writes that")
    return value


__all__ = ["ANNOUNCE_AFTER", "ARTIFACT", "LOCK_WAIT", "TUNING_DIR_ENV", "TUNING_ENV", "TUNING_MODES",
           "TuningWarning", "announce", "announcing", "cpu_flags", "forget", "machine", "measuring_thoroughly", "mode",
           "recordable", "recorded", "recorded_choice",
           "recorded_cosine", "recorded_implied", "recorded_keys", "recorded_mapping", "recorded_speedup", "refreshing",
           "remembered", "results", "thorough", "tuning_root"]
