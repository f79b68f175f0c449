"""The MatB row prefetcher and its buffer (paper II-D, Fig. 9 and 10).

Every multiplication needs one row of the right matrix Y; the access sequence is known in
advance from the left matrix's column indices. Each Y row occupies ``ceil(len / line_elements)``
buffer lines and is cached line by line ("spilling a row line by line instead of as a whole").

Policies:

* ``belady``: evict the line whose next use is farthest (Belady's MIN) -- but, as in the
  hardware, next uses are known only inside the look-ahead FIFO of ``lookahead`` left-matrix
  elements (the Distance List Builder, II-E). Lines whose next use lies beyond the window all
  look equally far; among them the least recently used one goes first (our assumption: the
  paper does not say how the reduction tree breaks ties). With a window at least as long as the
  whole sequence this is exactly Belady's MIN.
* ``lru``: evict the least recently used line.
* ``none``: no buffer; an access reads its row from DRAM unless the previous access used the
  same row (the multipliers hold the row they are using).

A missed line is loaded, used, and then kept if the policy would keep it (with a full buffer
the victim may be the new line itself: Belady's MIN bypasses a line that is used farthest).
Next uses are precomputed in one backward pass over the sequence; both policies use binary
heaps with lazy deletion (an entry is stale when its line's version changed), rebuilt from the
live lines when they grow past a bound, so memory stays O(buffer lines).
"""

from __future__ import annotations

import numpy as np
from numba import njit

POLICY_CODES = {"none": 0, "lru": 1, "belady": 2}
_INF = np.int64(1) << 62


@njit(cache=True, nogil=True)
def next_use(seq, nrows):
    """next_use[t] = the next position after t at which row seq[t] is needed (or 2**62)."""
    n = seq.size
    out = np.empty(n, dtype=np.int64)
    last = np.full(nrows, _INF, dtype=np.int64)
    for t in range(n - 1, -1, -1):
        r = seq[t]
        out[t] = last[r]
        last[r] = t
    return out


@njit(cache=True, nogil=True, inline="always")
def _push(hk, hl, hv, size, key, line, ver):
    # min-heap on key
    i = size
    hk[i] = key
    hl[i] = line
    hv[i] = ver
    while i > 0:
        p = (i - 1) >> 1
        if hk[p] <= hk[i]:
            break
        hk[p], hk[i] = hk[i], hk[p]
        hl[p], hl[i] = hl[i], hl[p]
        hv[p], hv[i] = hv[i], hv[p]
        i = p
    return size + 1


@njit(cache=True, nogil=True, inline="always")
def _pop(hk, hl, hv, size):
    size -= 1
    hk[0] = hk[size]
    hl[0] = hl[size]
    hv[0] = hv[size]
    i = 0
    while True:
        a = 2 * i + 1
        if a >= size:
            break
        b = a + 1
        c = a if (b >= size or hk[a] <= hk[b]) else b
        if hk[i] <= hk[c]:
            break
        hk[c], hk[i] = hk[i], hk[c]
        hl[c], hl[i] = hl[i], hl[c]
        hv[c], hv[i] = hv[i], hv[c]
        i = c
    return size


@njit(cache=True, nogil=True)
def _rebuild(hk, hl, hv, buf_lines, nbuf, keyof, version):
    size = 0
    for s in range(nbuf):
        ln = buf_lines[s]
        size = _push(hk, hl, hv, size, keyof[ln], ln, version[ln])
    return size


@njit(cache=True, nogil=True)
def simulate_buffer(seq, nxt, y_ptr, line_elements, capacity, lookahead, policy):
    """Run the prefetch buffer over the access sequence ``seq`` (Y row per multiplication).

    ``nxt`` is :func:`next_use` of ``seq``; ``capacity`` is in lines; ``policy`` a code of
    :data:`POLICY_CODES`. Returns (elements read from DRAM per access, whether each access
    fetched from DRAM -- a miss of at least one line, or an empty row, whose pointers are still
    read --, line hits, line accesses, evictions). Ties: Belady evicts the highest line id among
    equally far lines, LRU the lowest among equally old ones."""
    n = seq.size
    nrows = y_ptr.size - 1
    line_first = np.empty(nrows + 1, dtype=np.int64)
    line_first[0] = 0
    for r in range(nrows):
        ln = (y_ptr[r + 1] - y_ptr[r] + line_elements - 1) // line_elements
        line_first[r + 1] = line_first[r] + ln
    nlines = line_first[nrows]
    missed = np.zeros(n, dtype=np.int64)
    fetched = np.zeros(n, dtype=np.bool_)
    hits = 0
    accesses = 0
    evictions = 0
    if policy == 0 or capacity == 0:
        for t in range(n):
            r = seq[t]
            accesses += line_first[r + 1] - line_first[r]
            if t > 0 and seq[t - 1] == r:
                # the multipliers still hold the row they just used (a column of X streamed
                # against one row of Y: OuterSPACE's input reuse needs no buffer)
                hits += line_first[r + 1] - line_first[r]
                continue
            missed[t] = y_ptr[r + 1] - y_ptr[r]
            fetched[t] = True
        return missed, fetched, hits, accesses, evictions
    inbuf = np.full(nlines, -1, dtype=np.int64)      # slot in buf_lines, or -1
    buf_lines = np.empty(capacity + 1, dtype=np.int64)
    nbuf = 0
    version = np.zeros(nlines, dtype=np.int64)
    nu = np.zeros(nlines, dtype=np.int64)             # next use of each line
    cap = 8 * capacity + 64
    # heap A: LRU order (key = last use); heap B: Belady (key = -next use)
    ak = np.empty(cap, dtype=np.int64)
    al = np.empty(cap, dtype=np.int64)
    av = np.empty(cap, dtype=np.int64)
    bk = np.empty(cap, dtype=np.int64)
    bl = np.empty(cap, dtype=np.int64)
    bv = np.empty(cap, dtype=np.int64)
    asz = 0
    bsz = 0
    akey = np.zeros(nlines, dtype=np.int64)
    bkey = np.zeros(nlines, dtype=np.int64)
    stride = nlines + 1
    for t in range(n):
        r = seq[t]
        f0 = line_first[r]
        f1 = line_first[r + 1]
        row_len = y_ptr[r + 1] - y_ptr[r]
        if f0 == f1:
            fetched[t] = True                          # an empty row: only its pointers
        for ln in range(f0, f1):
            accesses += 1
            elems = line_elements
            if ln == f1 - 1:
                elems = row_len - (f1 - 1 - f0) * line_elements
            version[ln] += 1
            nu[ln] = nxt[t]
            akey[ln] = t * stride + ln
            bkey[ln] = -(min(nxt[t], n) * stride + ln)
            if inbuf[ln] >= 0:
                hits += 1
            else:
                missed[t] += elems
                fetched[t] = True
                inbuf[ln] = nbuf
                buf_lines[nbuf] = ln
                nbuf += 1
            if asz >= cap - 1:
                asz = _rebuild(ak, al, av, buf_lines, nbuf, akey, version)
            asz = _push(ak, al, av, asz, akey[ln], ln, version[ln])
            if policy == 2:
                if bsz >= cap - 1:
                    bsz = _rebuild(bk, bl, bv, buf_lines, nbuf, bkey, version)
                bsz = _push(bk, bl, bv, bsz, bkey[ln], ln, version[ln])
            if nbuf > capacity:
                victim = -1
                # LRU order: for belady only lines whose next use is beyond the window
                while asz > 0:
                    cl = al[0]
                    if inbuf[cl] < 0 or av[0] != version[cl]:
                        asz = _pop(ak, al, av, asz)
                        continue
                    if policy == 2 and nu[cl] <= t + lookahead:
                        # inside the window from now until its next use: never "far" again
                        asz = _pop(ak, al, av, asz)
                        continue
                    victim = cl
                    asz = _pop(ak, al, av, asz)
                    break
                if victim < 0:
                    while bsz > 0:
                        cl = bl[0]
                        if inbuf[cl] < 0 or bv[0] != version[cl]:
                            bsz = _pop(bk, bl, bv, bsz)
                            continue
                        victim = cl
                        bsz = _pop(bk, bl, bv, bsz)
                        break
                # remove the victim: move the last slot into its place
                s = inbuf[victim]
                moved = buf_lines[nbuf - 1]
                buf_lines[s] = moved
                inbuf[moved] = s
                inbuf[victim] = -1
                nbuf -= 1
                evictions += 1
    return missed, fetched, hits, accesses, evictions
