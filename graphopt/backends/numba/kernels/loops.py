"""The loop nests of a generated numba kernel, one form per mode: ``scalar``, ``flat``
(one collapsed loop in parallel blocks), ``nest``, and the reductions ``row``, ``full``
(parallel chunks combined at the end) and ``column`` (blocks of output columns).

``LoopNest`` is a mixin of ``source._Source``: it reads the generator's loop space
(``cext``, ``level``, ``loop_dims``...), its code buffers and the reduction ``rule``. The
loop space's dims are collapsed first where every access walks them contiguously
(``collapse_dims``, ``collapsed_map``).
"""

from __future__ import annotations

import math

from .expressions import _T

BLOCK = 1 << 14          # elements per parallel block of a flat loop
COL_BLOCK = 256          # output columns per block of a column reduction
MAX_CHUNKS = 64          # parallel chunks of a full reduction


def _urange(lo: str, hi: str) -> str:
    """A loop over [lo, hi) whose index numba knows is non-negative. With a signed index
    that does not start at 0, every ``a[i]`` carries a negative-index wraparound select
    that keeps LLVM from vectorizing the loop, several times slower on long chains."""
    return f"range(np.uint64({lo}), np.uint64({hi}))"


def _decompose(dims, src: str) -> list[str]:
    """Lines splitting flat index ``src`` into the loop variables ``dims`` [(var, extent)]."""
    if len(dims) == 1:
        return [f"{dims[0][0]} = {src}"]
    lines = [f"q = {src}"]
    for var, ext in reversed(dims[1:]):
        lines += [f"{var} = q % {ext}", f"q //= {ext}"]
    return lines + [f"{dims[0][0]} = q"]


class LoopNest:
    """``_loops_<mode>(store)``: the kernel body's lines, ``store`` the innermost statement."""

    def _code(self, key, indent) -> list[str]:
        return [" " * indent + s for s in self.bufs.get(key, [])]

    def _rng(self, n) -> str:
        return f"prange({n})" if self.parallel else f"range({n})"

    def _loops_scalar(self, store):
        return self._code("pre", 4) + ["    " + store]

    def _loops_flat(self, store):
        e = self.cext[0]
        if self.parallel:
            nb = -(-e // BLOCK)
            head = [f"    for b in prange({nb}):",
                    f"        for i0 in "
                    f"{_urange(f'b * {BLOCK}', f'min(b * {BLOCK} + {BLOCK}, {e})')}:"]
            ind = 12
        else:
            head, ind = [f"    for i0 in range({e}):"], 8
        return self._code("pre", 4) + head + self._code(("epi", 0), ind) + [" " * ind + store]

    def _loops_nest(self, store):
        nc = len(self.cext)
        outer = [(f"i{c}", self.cext[c]) for c in range(nc - 1)]
        lines = self._code("pre", 4)
        lines.append(f"    for t in {self._rng(math.prod(e for _, e in outer))}:")
        lines += ["        " + s for s in _decompose(outer, "t")]
        lines += self._code(("epi", 0), 8)
        lines.append(f"        for i{nc - 1} in range({self.cext[-1]}):")
        return lines + self._code(("epi", 1), 12) + ["            " + store]

    def _reduce_loops(self, first_level, indent, lines, innermost):
        """The reduced loops from ``first_level`` on; ``innermost`` at the deepest level."""
        for i, c in enumerate(self.R):
            lines.append(" " * indent + f"for i{c} in range({self.cext[c]}):")
            indent += 4
            lines += self._code(("pro", first_level + i), indent)
        lines += [" " * indent + s for s in innermost]

    def _combine(self, acc_ref):
        acc_dt, init, comb, fin, v = self.rule
        return f"{acc_ref} = {comb.format(a=acc_ref, v=v)}"

    def _loops_row(self, store):
        acc_dt, init, comb, fin, v = self.rule
        kd = [(f"i{c}", self.cext[c]) for c in self.K]
        lines = self._code("pre", 4)
        lines.append(f"    for t in {self._rng(math.prod(e for _, e in kd))}:")
        lines += ["        " + s for s in _decompose(kd, "t")]
        lines += self._code(("pro", 0), 8)
        lines.append(f"        acc = {init}")
        self._reduce_loops(1, 8, lines, [self._combine("acc")])
        lines.append(f"        red = {fin.format(a='acc')}")
        return lines + self._code("epi", 8) + ["        " + store]

    def _loops_full(self, store):
        acc_dt, init, comb, fin, v = self.rule
        lines = self._code("pre", 4)
        if not (self.parallel and self.R):
            lines.append(f"    acc = {init}")
            self._reduce_loops(0, 4, lines, [self._combine("acc")])
            lines.append(f"    red = {fin.format(a='acc')}")
            return lines + self._code("epi", 4) + ["    " + store]
        r0, rest = self.R[0], self.R[1:]
        e0 = self.cext[r0]
        nch = max(1, min(MAX_CHUNKS, e0))
        ch = -(-e0 // nch)
        lines += [f"    partial = np.empty({nch}, {_T[acc_dt]})",
                  f"    for c in prange({nch}):",
                  f"        acc = {init}",
                  f"        for i{r0} in {_urange(f'c * {ch}', f'min(c * {ch} + {ch}, {e0})')}:"]
        lines += self._code(("pro", 0), 12)
        saved, self.R = self.R, rest
        self._reduce_loops(1, 12, lines, [self._combine("acc")])
        self.R = saved
        lines += ["        partial[c] = acc",
                  f"    total = {init}",
                  f"    for c in range({nch}):",
                  f"        total = {comb.format(a='total', v='partial[c]')}",
                  f"    red = {fin.format(a='total')}"]
        return lines + self._code("epi", 4) + ["    " + store]

    def _loops_column(self, store):
        acc_dt, init, comb, fin, v = self.rule
        kl = self.K[-1]
        ekl = self.cext[kl]
        cb = max(1, min(COL_BLOCK, ekl))
        nb = -(-ekl // cb)
        kd = [(f"i{c}", self.cext[c]) for c in self.K[:-1]]
        lines = self._code("pre", 4)
        lines.append(f"    for t in {self._rng(math.prod(e for _, e in kd) * nb)}:")
        lines.append(f"        jb = t % {nb}")
        if kd:
            lines += ["        " + s for s in _decompose(kd, f"t // {nb}")]
        lines += [f"        j0 = jb * {cb}",
                  f"        jn = min({cb}, {ekl} - j0)",
                  f"        acc = np.empty({cb}, {_T[acc_dt]})",
                  "        for jj in range(jn):",
                  f"            acc[jj] = {init}"]
        lines += self._code(("pro", 0), 8)
        inner = ["for jj in range(jn):", f"    i{kl} = j0 + jj"]
        inner += ["    " + s for s in self.bufs.get(("pro", len(self.R) + 1), [])]
        inner.append("    " + self._combine("acc[jj]"))
        self._reduce_loops(1, 8, lines, inner)
        lines += ["        for jj in range(jn):", f"            i{kl} = j0 + jj",
                  f"            red = {fin.format(a='acc[jj]')}"]
        return lines + self._code("epi", 12) + ["            " + store]


def collapse_dims(space, roles, accesses):
    """Merge adjacent loop dims every access (a map over loop dims) walks contiguously.

    Returns the groups of original dims, one per collapsed dim."""
    active = [d for d, e in enumerate(space) if e != 1]
    seqs = [[e for e in m if e is not None] for m in accesses]

    def mergeable(a, b):
        if roles[a] != roles[b]:
            return False
        for s in seqs:
            ia, ib = (s.index(a) if a in s else None), (s.index(b) if b in s else None)
            if (ia is None) != (ib is None) or (ia is not None and ib != ia + 1):
                return False
        return True

    groups: list[list[int]] = []
    for d in active:
        if groups and mergeable(groups[-1][-1], d):
            groups[-1].append(d)
        else:
            groups.append([d])
    return groups


def collapsed_map(m, where) -> tuple:
    """A map over loop dims as a map over collapsed dims."""
    out = []
    for e in m:
        if e is not None and (not out or out[-1] != where[e]):
            out.append(where[e])
    return tuple(out)
