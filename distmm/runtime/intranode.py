"""Single-copy messages between the ranks of one node under MPICH.

MPICH moves a message between two ranks of a node through a shared-memory bounce buffer: the
sender copies it in, the receiver copies it out. Its CMA path (Linux's cross-memory attach,
``process_vm_readv``) copies once, from the sender's pages straight into the receiver's
buffer, for messages of 8 KiB and more. The pip wheel of MPICH, and MPICH built with its
defaults, leave that path off unless ``MPIR_CVAR_CH4_CMA_ENABLE=1``, because it needs the
permission to read another process's memory, which Linux's Yama module may withhold
(``/proc/sys/kernel/yama/ptrace_scope`` other than 0). distmm's shifting families move whole
dense blocks between neighbouring ranks at every step (paper section V), and on one node
every such message takes the bounce-buffer path: the shift of a 32 MiB block was several
times slower through it on the development machine (docs/performance.md, "Single-copy shifts
between the ranks of a node").

MPICH reads its variables once, when MPI is initialised (mpi4py does that at ``from mpi4py
import MPI``), so :func:`set_default` must run before that; importing distmm runs nothing.
:func:`distmm.prepare_process` calls it (the ``distmm`` command does so before it loads MPI, and
the launchers and batch templates export the variable before MPI starts). It sets the default
where

* the environment has no value of its own (``MPIR_CVAR_CH4_CMA_ENABLE=0`` turns it off);
* this is Linux, Yama permits same-user processes to read each other's memory (no Yama, or
  ``ptrace_scope`` 0: MPICH switches CMA off itself otherwise), and this process may read
  the memory of a child of its own with ``process_vm_readv`` (a container's seccomp filter or
  a security module may refuse the call; MPICH does not test for that).

Where MPI was initialised before the call, the value only reaches processes started later
(the ranks of a job that a driver launches), and :data:`STATE` says so; where MPI (or anything
else) has started threads by then, the probe is not run, since forking a process that runs
threads may deadlock the child, and nothing is set. MPI libraries not derived from MPICH
ignore its variables (Open MPI's shared-memory transport uses CMA by itself where it is
permitted); MPICH's derivatives (Cray MPICH, Intel MPI) were not tried.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["STATE", "VARIABLE", "cma_permitted", "set_default"]

#: MPICH's switch for its CMA single-copy path between the ranks of a node.
VARIABLE = "MPIR_CVAR_CH4_CMA_ENABLE"
_YAMA = "/proc/sys/kernel/yama/ptrace_scope"


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _read_child_memory() -> str:
    """Why ``process_vm_readv`` cannot read the memory of a process with this one's
    credentials, or "" when it can: a forked child (the same user, the same security
    context, as the ranks of a job are to each other) is read while it waits on a pipe.
    A container's seccomp filter or a security module may refuse the call where Yama
    would allow it, and MPICH does not test for those before it uses CMA."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        readv = libc.process_vm_readv
    except (OSError, AttributeError):
        return "no process_vm_readv"
    if len(os.listdir("/proc/self/task")) > 1:
        # forking a process that runs threads may deadlock the child: not tested
        return "not tested (this process runs threads already)"
    readv.restype = ctypes.c_ssize_t
    readv.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong,
                      ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.c_ulong]
    src = ctypes.create_string_buffer(b"distmm-cma-probe", 16)
    dst = ctypes.create_string_buffer(16)
    rfd, wfd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(rfd)
        os.close(wfd)
        return "fork failed"
    if pid == 0:  # the child: wait until the parent has read, then leave at once
        try:
            os.close(wfd)
            os.read(rfd, 1)
        finally:
            os._exit(0)
    os.close(rfd)
    try:
        local = _IoVec(ctypes.cast(dst, ctypes.c_void_p), 16)
        remote = _IoVec(ctypes.cast(src, ctypes.c_void_p), 16)
        got = readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        err = ctypes.get_errno()
    finally:
        os.close(wfd)
        os.waitpid(pid, 0)
    if got != 16 or dst.raw != src.raw:
        return f"process_vm_readv is refused ({os.strerror(err) if err else 'short read'})"
    return ""


def cma_permitted(yama: str = _YAMA) -> tuple[bool, str]:
    """Whether MPICH's CMA path can work between this user's processes here, and why not.

    Not collective. Returns ``(True, "")`` or ``(False, reason)``."""
    if not sys.platform.startswith("linux"):
        return False, "not Linux"
    try:
        with open(yama) as fh:
            scope = fh.read().strip()
    except OSError:
        scope = "0"  # no Yama: the same user's processes may read each other's memory
    if scope != "0":
        return False, f"Yama ptrace_scope is {scope}"
    try:
        why = _read_child_memory()
    except OSError as exc:  # /proc hidden, no file descriptors left: never fail the import
        why = f"not tested ({exc.strerror or exc})"
    return (not why), why


def set_default() -> str:
    """Set ``MPIR_CVAR_CH4_CMA_ENABLE=1`` where the environment has no value and CMA is
    permitted (:func:`cma_permitted`, which forks a short-lived child to test it); say how it
    stands and keep the answer in :data:`STATE`.

    Not collective (each process sets its own environment).

    Returns
    -------
    str
        ``"environment"`` (the user's value, kept), ``"distmm"`` (set here, before MPI was
        initialised: this process's MPICH uses it), ``"distmm, after MPI"`` (set here, but
        this process had initialised MPI already: only processes started later see it) or
        ``"not set: <reason>"``.
    """
    global STATE
    if VARIABLE in os.environ:
        STATE = "environment"
        return STATE
    ok, why = cma_permitted()
    if not ok:
        STATE = f"not set: {why}"
        return STATE
    os.environ[VARIABLE] = "1"
    STATE = "distmm, after MPI" if "mpi4py.MPI" in sys.modules else "distmm"
    return STATE


#: How the variable stood after this process's last :func:`set_default` (``"not called"``
#: where it never ran: the value, if any, is the environment's).
STATE = "not called"
