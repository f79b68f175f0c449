"""The input/output layer of every ``distmm`` command: files are declared, checked on every rank
and agreed before any work, and outputs are written only through one collective call.

A command declares each file option while it builds its parser:

- :func:`input_option`: a file the command reads (on every rank, or on rank 0 only);
- :func:`output_option`: a file rank 0 writes;
- :func:`log_dir_option`: ``--log-dir``, a directory every rank appends to.

:func:`distmm.cli.entry.main` calls :func:`check_files` for every command before the command's
function runs (the command cannot skip it): every input must exist and be a readable regular
file (a FIFO or a device is refused, not opened, so nothing blocks on it); every output must be
absent or a regular file (never a directory, a device or a FIFO, never the same file as an
input after links are resolved) in an existing, writable directory; a log directory must be
creatable and writable (probed with a real file). Each rank then reads the header of every
input it reads (:func:`input_header`: a matrix's rows, columns and entries, an array's shape
and dtype, an HDF5 file's datasets, any other file's size), and the ranks agree on all of it
in the same collective, so a file present on some ranks only, or one that differs between
ranks (the same name, other content), ends every rank with one message naming the ranks
(exit status 2), never a hang and before any work.

A command writes an output only through :func:`write_output` (collective): rank 0 writes it
through :func:`distmm.io.outputs.atomic_output` (a temporary file in the output's directory,
renamed into place; removed on any error or signal; stale ones of killed runs cleaned), and a
write failure (full disk, quota, permissions) ends every rank with status 2 and one line naming
the file and the cause; the old output, if any, is untouched.

``tests/serial/test_cli_files.py`` walks every command's parser and fails when an option that
names a file is not declared here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from mpi4py import MPI

from distmm.errors import InputError, agree
from distmm.io.outputs import check_output
from distmm.io.outputs import os_error_reason as reason

__all__ = ["FILES", "FileOption", "check_files", "declared", "input_header", "input_option",
           "input_problem",
           "log_dir_option", "output_option", "output_problem", "reason", "warn_once",
           "write_output"]

# The parser default under which each command's declared files are kept (a tuple of
# FileOption); distmm.cli.entry leaves it out of the arguments the ranks compare.
FILES = "declared_files"


@dataclass(frozen=True)
class FileOption:
    """One declared file option of a command.

    ``role`` is ``"input"``, ``"output"`` or ``"directory"``; ``readers`` (inputs) is ``"all"``
    when every rank reads the file, ``"root"`` when rank 0 alone does; ``keywords`` are values
    of the option that name no file (``--split standard``); ``replaces`` (outputs) names the
    inputs (by destination) this output may be: a checkpoint written over the one the run
    resumed from, which was read in full before."""

    dest: str
    label: str
    role: str
    readers: str = "all"
    keywords: tuple[str, ...] = ()
    replaces: tuple[str, ...] = ()


def _declare(p: argparse.ArgumentParser, action: argparse.Action, role: str,
             readers: str = "all", keywords: tuple[str, ...] = (),
             replaces: tuple[str, ...] = ()) -> argparse.Action:
    label = (max(action.option_strings, key=len) if action.option_strings
             else (action.metavar or action.dest.upper()))
    spec = tuple(p.get_default(FILES) or ()) + (
        FileOption(action.dest, label, role, readers, tuple(keywords), tuple(replaces)),)
    p.set_defaults(**{FILES: spec})
    return action


def input_option(p: argparse.ArgumentParser, *flags: str, readers: str = "all",
                 keywords: tuple[str, ...] = (), **kwargs) -> argparse.Action:
    """Add an option (or positional) naming a file the command reads, and declare it.

    ``readers``: ``"all"`` (every rank opens it: each checks its own view) or ``"root"``.
    ``keywords``: values that are not file names. Other arguments go to ``add_argument``."""
    return _declare(p, p.add_argument(*flags, **kwargs), "input", readers, keywords)


def output_option(p: argparse.ArgumentParser, *flags: str, replaces: tuple[str, ...] = (),
                  **kwargs) -> argparse.Action:
    """Add an option (or positional) naming a file rank 0 writes (through
    :func:`write_output`), and declare it. ``replaces``: destinations of inputs this output
    may name (see :class:`FileOption`)."""
    return _declare(p, p.add_argument(*flags, **kwargs), "output", replaces=replaces)


def log_dir_option(p: argparse.ArgumentParser) -> argparse.Action:
    """Add ``--log-dir DIR`` (every rank appends its counters to ``DIR/rank-K.jsonl``)."""
    return _declare(p, p.add_argument(
        "--log-dir", metavar="DIR", help="every rank appends its own counters and kernel "
                                         "stats to DIR/rank-K.jsonl after each measurement "
                                         "(created if absent)"), "directory")


def declared(args: argparse.Namespace) -> tuple[FileOption, ...]:
    """The file options the parsed command declared."""
    return tuple(getattr(args, FILES, None) or ())


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO (named pipe)"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "regular file" if stat.S_ISREG(mode) else "special file"


def input_problem(path: str, what: str) -> str | None:
    """Why ``path`` cannot be read as an input, or None. Not collective; opens nothing (a FIFO
    is refused without blocking on it)."""
    if not str(path).strip():
        return f"{what} is empty; give the name of a file"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{what} {path}: no such file"
    except PermissionError:
        return f"{what} {path}: cannot be read (permission denied)"
    except OSError as exc:
        return f"{what} {path}: cannot be read ({reason(exc)})"
    kind = _kind(st.st_mode)
    if kind != "regular file":
        return f"{what} {path}: is a {kind}, not a regular file; give a file"
    if not os.access(path, os.R_OK):
        return f"{what} {path}: cannot be read (permission denied)"
    return None


def input_header(path: str) -> tuple[str | None, str]:
    """(a problem with the header, what the header says) of an input file, from its header
    only. Not collective; reads a few bytes (an HDF5 file's metadata).

    The sizes the ranks must agree on before any work: a Matrix Market file's rows, columns
    and entries (a malformed header is a problem, with the reader's own message); an ``.npy``
    file's shape and dtype; an HDF5 file's datasets with their shapes and dtypes; any other
    file's size in bytes. A header the generic readers here cannot read is reported as such
    (``"no readable ... header"``), not as a problem: the command's own checks name the cause,
    and a rank that reads it differently from the others is refused by the comparison."""
    name = os.fspath(path).lower()
    if name.endswith((".mtx", ".mtx.gz")):
        from distmm.io.matrix_market import mtx_header

        try:
            m, n, nnz = mtx_header(path)
        except InputError as exc:
            return str(exc), "no readable Matrix Market header"
        return None, f"{m} x {n}, {nnz} entries"
    if name.endswith(".npy"):
        import numpy as np

        try:
            with open(path, "rb") as fh:
                fmt = np.lib.format
                version = fmt.read_magic(fh)
                read = (fmt.read_array_header_1_0 if version == (1, 0)
                        else fmt.read_array_header_2_0)
                shape, fortran, dtype = read(fh)
        except (OSError, ValueError, TypeError, SyntaxError, EOFError):
            from distmm.io.npy import npy_header

            try:  # its message names the cause (an .npz archive, not a .npy file, ...)
                npy_header(path)
            except InputError as exc:
                return str(exc), "no readable .npy header"
            return None, "no readable .npy header"
        return None, f"shape {tuple(shape)}, dtype {dtype}{' (Fortran order)' if fortran else ''}"
    if name.endswith((".h5", ".hdf5")):
        return None, _h5_datasets(path)
    try:
        return None, f"{os.stat(path).st_size} bytes"
    except OSError as exc:
        return f"{path}: cannot be read ({reason(exc)})", "unreadable"


def _h5_datasets(path: str) -> str:
    """An HDF5 file's datasets as ``name shape dtype`` (the first 64, sorted), from its
    metadata. Not collective."""
    import h5py

    found: list[str] = []

    def note(name: str, item) -> None:
        if isinstance(item, h5py.Dataset) and len(found) < 64:
            found.append(f"{name} {item.shape} {item.dtype}")
    try:
        with h5py.File(path, "r") as fh:
            fh.visititems(note)
    except (OSError, RuntimeError, KeyError, ValueError, TypeError):
        return "no readable HDF5 header"
    return "; ".join(sorted(found)) or "no datasets"


def output_problem(path: str, what: str, inputs: list[str] = ()) -> str | None:
    """Why ``path`` cannot be written as an output, or None. Not collective; touches nothing.

    :func:`distmm.io.outputs.check_output` (name, directory, the same file as an input after
    links), then the kind: an existing output must be a regular file, since writing replaces
    it (a device, FIFO or socket named as the output would be replaced by a file)."""
    problem = check_output(path, what, inputs)
    if problem is not None:
        return problem
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{what} {path}: cannot be checked ({reason(exc)})"
    kind = _kind(st.st_mode)
    if kind != "regular file":
        return (f"{what} {path}: is a {kind}; distmm writes a regular file and would replace "
                f"it, so give the name of a file")
    return None


def _directory_problem(path: str, what: str) -> str | None:
    """Create ``path`` if needed and prove it writable with a real file (root passes
    ``os.access`` on any directory, a full or read-only file system does not). Not collective."""
    if not str(path).strip():
        return f"{what} is empty; give a directory"
    with contextlib.suppress(OSError):
        st = os.stat(path)
        if not stat.S_ISDIR(st.st_mode):
            return f"{what} {path}: is a {_kind(st.st_mode)}, not a directory"
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".distmm-probe.", dir=path)
        try:
            os.write(fd, b"\n")
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        return f"{what} {path}: cannot write there ({reason(exc)})"
    return None


def check_files(args: argparse.Namespace, comm: MPI.Comm) -> None:
    """Check every declared file of the parsed command and agree (collective over ``comm``).

    Outputs first (on rank 0, their writer), then inputs (on every rank that reads them),
    then log directories (on every rank; created). Raises the same
    :class:`distmm.errors.InputError` on every rank when any rank found a problem."""
    specs = declared(args)

    def files(role: str) -> list[tuple[FileOption, str]]:
        return [(s, getattr(args, s.dest)) for s in specs
                if s.role == role and getattr(args, s.dest, None) is not None
                and getattr(args, s.dest) not in s.keywords]

    problem = None
    if comm.Get_rank() == 0:
        for spec, path in files("output"):
            inputs = [p for s, p in files("input") if s.dest not in spec.replaces]
            problem = problem or output_problem(path, spec.label, inputs)
        outputs = [os.path.realpath(path) for _, path in files("output")]
        if problem is None and len(set(outputs)) < len(outputs):
            problem = ("two outputs name the same file: "
                       + ", ".join(f"{s.label} {p}" for s, p in files("output")))
    headers = {}
    for spec, path in files("input"):
        if spec.readers == "all" or comm.Get_rank() == 0:
            problem = problem or input_problem(path, spec.label)
            if problem is None and spec.readers == "all":  # a file every rank reads alike
                problem, headers[f"{spec.label} {path}: header"] = input_header(path)
    agree(comm, problem, headers)
    directories = files("directory")
    if directories:  # created only once every other check has passed
        problem = None
        for spec, path in directories:
            problem = problem or _directory_problem(path, spec.label)
        agree(comm, problem)


def write_output(comm: MPI.Comm, path: str, what: str, write: Callable[[str], None],
                 root: int = 0) -> None:
    """Write an output on ``root`` and agree that it worked (collective over ``comm``).

    ``write(path)`` runs on ``root`` only and must write ``path`` through
    :mod:`distmm.io.outputs` (``atomic_output``, ``write_h5_atomic``, ``write_json_atomic``),
    so that a failure leaves nothing half-written and the old file in place. An OSError it
    raises (full disk, quota, permissions) becomes the same one-line
    :class:`distmm.errors.InputError` on every rank, naming ``what``, the file and the cause."""
    msg = None
    if comm.Get_rank() == root:
        try:
            write(path)
        except OSError as exc:
            msg = (f"{what} {path}: cannot write the file ({reason(exc)}); nothing was "
                   "written and an existing file is unchanged")
    agree(comm, msg)


_warned: set[str] = set()


def warn_once(message: str) -> None:
    """Print ``distmm: warning: message`` on this rank's stderr, once per message."""
    if message not in _warned:
        _warned.add(message)
        print(f"distmm: warning: {message}", file=sys.stderr, flush=True)
