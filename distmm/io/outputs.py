"""Outputs that are never half-written, and option files.

:func:`check_output` vets an output path before any work; :func:`write_h5_atomic`,
:func:`write_json_atomic` and :func:`atomic_output` write under a temporary name and rename into
place; :func:`remove_stale_temporaries` cleans what killed runs left. Not collective.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import h5py
import numpy as np

from distmm.errors import InputError, require

# Temporary files are named "<output name>.distmm-tmp.<host>.<pid>.<random>" in the output's
# directory (a rename is atomic only within one file system), so a later run can tell its own
# leftovers from anything else and whether the process that made one is still alive.
_TMP_TAG = ".distmm-tmp."


__all__ = ["atomic_output", "attr_value", "check_output", "os_error_reason", "read_json_object",
           "remove_stale_temporaries", "safe_text", "write_h5_atomic", "write_json_atomic"]


def read_json_object(path: str | os.PathLike[str], what: str) -> dict:
    """The JSON object in ``path`` (option files: --config, --node-config). Not collective.

    A missing file, malformed JSON or anything but an object raises :class:`InputError`
    naming ``what`` (the option) and the path; every rank reading the same file fails alike."""
    try:
        with open(path) as fh:
            obj = json.load(fh)
    except FileNotFoundError:
        raise InputError(f"{what} {path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{what} {path}: not a JSON file ({exc})") from None
    require(isinstance(obj, dict), f"{what} {path}: must hold a JSON object")
    return obj


def _umask() -> int:
    """The process's file-creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _owner_gone(host: str, pid: str) -> bool:
    """Whether the process that made a temporary file has ended (only decidable on its host)."""
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists but belongs to someone else, or cannot be asked
        return False
    return False


def remove_stale_temporaries(path: str | os.PathLike[str]) -> list[str]:
    """Remove temporary files a killed run left for output ``path``; return their names.

    Not collective. Only files of distmm's own naming pattern for this very output are
    considered, and only those whose creating process ran on this host and has ended (a
    temporary file of a run still writing, or of a run on another host, is left alone).
    """
    path = os.path.abspath(os.fspath(path))
    directory, base = os.path.split(path)
    prefix = base + _TMP_TAG
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if not name.startswith(prefix):
                continue
            host, _, rest = name[len(prefix):].rpartition(".")  # "<host>.<pid>" and random
            host, _, pid = host.rpartition(".")
            if rest and _owner_gone(host, pid):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, name))
                    removed.append(name)
    return removed


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary path to write; on success rename it to ``path``, atomically.

    Not collective: call it on one rank. The temporary file lies in ``path``'s directory, named
    ``<name>.distmm-tmp.<host>.<pid>.<random>``; leftovers of killed runs for the same output
    are removed first (see :func:`remove_stale_temporaries`). After the block the file is
    flushed to disk, given the mode the umask asks for (0644 under umask 022, as ``open``
    would create it) and renamed into place, so ``path`` is either its old self or the
    complete new file. On any failure (an exception, Ctrl-C) the temporary file is removed
    and the exception re-raised.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    remove_stale_temporaries(path)
    prefix = f"{os.path.basename(path)}{_TMP_TAG}{socket.gethostname()}.{os.getpid()}."
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=directory)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable, where supported
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_h5_atomic(
    path: str | os.PathLike[str],
    datasets: dict[str, np.ndarray],
    attrs: dict[str, Any] | None = None,
) -> None:
    """Write ``datasets`` and file attributes ``attrs`` to an HDF5 file at ``path``, atomically.

    Not collective: call it on one rank. Written through :func:`atomic_output` (temporary file
    in the same directory, renamed into place; nothing left behind on failure; mode from the
    umask). Dataset names may contain ``/`` (groups are created). Attribute values that are
    dicts, lists, tuples or None are stored as JSON strings; strings, numbers and arrays are
    stored as they are.
    """
    with atomic_output(path) as tmp, h5py.File(tmp, "w") as out:
        for name, data in datasets.items():
            out.create_dataset(name, data=np.asarray(data))
        for key, value in (attrs or {}).items():
            out.attrs[key] = attr_value(value)


def write_json_atomic(path: str | os.PathLike[str], obj: dict) -> None:
    """Write ``obj`` as indented JSON to ``path`` through :func:`atomic_output`. Not collective."""
    with atomic_output(path) as tmp, open(tmp, "w") as fh:
        json.dump(obj, fh, indent=1, sort_keys=True, default=_json_default)
        fh.write("\n")


def os_error_reason(exc: BaseException) -> str:
    """The cause of an OSError in a few words (h5py's errors carry the errno in their text)."""
    text = str(exc)
    found = re.search(r"errno\s*=\s*(\d+)", text)
    if found:
        return os.strerror(int(found.group(1)))
    if isinstance(getattr(exc, "errno", None), int):
        return os.strerror(exc.errno)
    return " ".join(str(getattr(exc, "strerror", None) or text).split()) or type(exc).__name__


def check_output(path: str | os.PathLike[str] | None, what: str,
                 inputs: Sequence[str | os.PathLike[str] | None] = ()) -> str | None:
    """Why ``path`` cannot be written as an output, or None. Not collective; touches nothing.

    Refused: an empty name, a name ending in a path separator or naming an existing directory,
    a directory that does not exist or is not writable, and a path that is (after symlinks and
    hard links) the same file as one of ``inputs`` (writing it would destroy that input).
    ``what`` names the option in the message (e.g. ``"--out"``).
    """
    if path is None:
        return None
    path = os.fspath(path)
    if not path.strip():
        return f"{what} is empty; give the name of the file to write"
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        return f"{what} {path}: is a directory; give the name of a file to write"
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return f"{what} {path}: directory {directory} does not exist"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"{what} {path}: directory {directory} is not writable"
    real = os.path.realpath(path)
    for given in inputs:
        if given is None:
            continue
        given = os.fspath(given)
        same = os.path.realpath(given) == real
        if not same and os.path.exists(path) and os.path.exists(given):
            with contextlib.suppress(OSError):
                same = os.path.samefile(path, given)
        if same:
            return (f"{what} {path}: is the input file {given}; writing it would destroy the "
                    "input, so give another name")
    return None


def attr_value(value: Any) -> Any:
    """An HDF5-storable form of an attribute value (JSON text for containers and None).

    Strings are stored as UTF-8: a file name that is not valid UTF-8 (undecodable bytes that
    Python carries as lone surrogates) keeps its bytes visible as ``\\xNN`` escapes instead of
    failing the write. JSON text escapes such characters itself (``\\udcNN``)."""
    if value is None or isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=_json_default, sort_keys=True)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        return safe_text(value)
    return value


def safe_text(text: str) -> str:
    """``text`` as valid UTF-8 text: undecodable bytes of a file name (lone surrogates from
    ``os.fsdecode``) become ``\\xNN`` escapes; any other text is returned unchanged."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raw = text.encode("utf-8", "backslashreplace")
        return raw.decode("utf-8", "backslashreplace")
    return text


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"attribute value of type {type(obj).__name__} is not JSON serialisable")

