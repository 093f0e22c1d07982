"""A pairwise einsum as one (batched) GEMM: the pure planning both BLAS backends share.

``gemm_of`` maps ``einsum(eq, a, b)`` onto ``C[b, m, n] = sum_k A[b, m, k] B[b, k, n]``
(opt_einsum's transpose-transpose-GEMM-transpose scheme); ``run_gemm`` executes it with any
array module (NumPy on the CPU backend, cupy on the GPU one) and a matmul of the caller's.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from ...analysis.call_bytes import GEMM_VIEW_BYTES
from ...ir import einsum as einsum_mod
from .matmul import (  # BLAS_DTYPES: the dtypes BLAS multiplies (a GEMM in another,
    BLAS_DTYPES,  # noqa: F401    integers, bool or float16, has np.einsum's product)
    einsum_matmul_bytes,
    host_matmul,
    operand_to_copy,
)


class Gemm(NamedTuple):
    """A pairwise einsum as ``C[b, m, n] = sum_k A[b, m, k] B[b, k, n]``: labels only in one
    operand and not in the output are summed first; the output order is ``batch + m + n``
    unless ``out_perm`` says how to transpose the result into it. A named tuple, made by
    ``pair_gemm`` with ``matrices`` worked out: a network's program plans hundreds of
    steps, and a named tuple is made faster than a frozen dataclass."""

    sum_a: tuple
    sum_b: tuple
    perm_a: tuple
    perm_b: tuple
    bmkn: tuple            # (B, M, K, N)
    res_shape: tuple       # the result's shape in (batch, m, n) label order
    out_perm: tuple | None
    swapped: bool          # the operands trade places so that the output order is direct
    # ``run_gemm``'s view of a step: the shapes of A, B and C as (batched) matrices,
    # ``(B, M, K)``, ``(B, K, N)`` and ``(B, M, N)`` without a batch of 1, and whether A's
    # and B's permutations move any axis (worked out once: a network's program runs
    # hundreds of small GEMMs a call)
    matrices: tuple


class _PairLabels(NamedTuple):
    """What a GEMM plan of ``ta,tb->out`` takes from the labels alone (``pair_labels``)."""

    sum_a: tuple
    sum_b: tuple
    perm_a: tuple
    perm_b: tuple
    groups: tuple          # the labels of B, M, K and N
    order: str             # the product's label order, batch + m + n
    out_perm: tuple | None
    swapped: bool
    moves: tuple           # whether perm_a, perm_b move any axis


def gemm_of(equation: str, shapes) -> Gemm | None:
    """``None`` if a term repeats a label (a trace or diagonal: not a GEMM)."""
    (ta, tb), out = einsum_mod.split(equation)
    size = dict(zip(ta, shapes[0]))
    size.update(zip(tb, shapes[1]))
    return pair_gemm(ta, tb, out, size)


def pair_gemm(ta: str, tb: str, out: str, size: dict) -> Gemm | None:
    """``gemm_of`` of ``ta,tb->out`` with each label's ``size``: for a caller that has
    split the equation and read the sizes already (a contraction program plans each
    distinct step of a network of hundreds)."""
    p = pair_labels(ta, tb, out)
    if p is None:
        return None
    bmkn = []
    for group in p.groups:
        e = 1
        for c in group:
            e *= size[c]
        bmkn.append(e)
    B, M, K, N = bmkn
    lead = (B,) if B != 1 else ()
    return Gemm(p.sum_a, p.sum_b, p.perm_a, p.perm_b, (B, M, K, N),
                    tuple(map(size.__getitem__, p.order)), p.out_perm, p.swapped,
                    (lead + (M, K), lead + (K, N), lead + (M, N)) + p.moves)


@functools.lru_cache(maxsize=4096)
def pair_labels(ta: str, tb: str, out: str) -> _PairLabels | None:
    """The label work of ``pair_gemm`` (None: a term repeats a label, a trace or a
    diagonal, not a GEMM). Memoized: a network's steps, their labels renamed in order of
    first use (``first_use_equation``), repeat a few dozen patterns at many sizes."""
    if len(set(ta)) != len(ta) or len(set(tb)) != len(tb):
        return None
    sum_a, ra = _summed_first(ta, tb, out)
    sum_b, rb = _summed_first(tb, ta, out)
    batch = m = n = ""
    for c in out:
        if c not in ra:
            n += c
        elif c in rb:
            batch += c
        else:
            m += c
    k = "".join([c for c in ra if c not in out])
    swapped = batch + m + n != out and batch + n + m == out
    if swapped:
        ra, rb, m, n, sum_a, sum_b = rb, ra, n, m, sum_b, sum_a
    order = batch + m + n
    perm_a, perm_b = tuple(map(ra.index, batch + m + k)), tuple(map(rb.index, batch + k + n))
    return _PairLabels(tuple(sum_a), tuple(sum_b), perm_a, perm_b, (batch, m, k, n), order,
                       None if order == out else tuple(map(order.index, out)), swapped,
                       (perm_a != tuple(range(len(perm_a))),
                        perm_b != tuple(range(len(perm_b)))))


def _summed_first(term: str, other: str, out: str) -> tuple[list[int], str]:
    """The positions of ``term``'s labels in neither ``other`` nor ``out`` (summed before
    the product), and its other labels in order."""
    summed, kept = [], ""
    for i, c in enumerate(term):
        if c in other or c in out:
            kept += c
        else:
            summed.append(i)
    return summed, kept


def run_gemm(xp, p: Gemm, a, b, out, matmul=None, into=None, copies=None):
    """Run ``p`` with array module ``xp`` (cupy, or numpy in CPU tests) into ``out``;
    ``matmul(a3, b3, c3)`` does the (batched) product (default ``xp.matmul``; with NumPy,
    ``einsum_matmul.host_matmul``: BLAS's, or np.einsum's for other dtypes). ``out`` None:
    the result is a new array in the product's own order, returned as a view permuted to
    the output's (no copy; operands of ``a``'s dtype), in ``into`` where given (a C-contiguous
    buffer of ``res_shape``'s elements, of ``a``'s dtype). ``copies``: ``(A's, B's)``
    C-contiguous buffers of the permuted operands' shapes (``operand_copies``), or None
    each, that the operands whose matrix is not a view are copied into (else NumPy's
    reshape makes the copy)."""
    if matmul is None:
        matmul = host_matmul if xp is np else \
            lambda x, y, z: xp.matmul(x, y, out=z)  # noqa: E731
    if p.swapped:
        a, b = b, a
    if p.sum_a:
        a = a.sum(axis=p.sum_a, dtype=a.dtype)
    if p.sum_b:
        b = b.sum(axis=p.sum_b, dtype=b.dtype)
    shape_a, shape_b, shape_c, move_a, move_b = p.matrices
    if move_a:
        a = a.transpose(p.perm_a)
    if move_b:
        b = b.transpose(p.perm_b)
    if copies is not None:
        to_a, to_b = copies
        if to_a is not None:
            xp.copyto(to_a, a)
            a = to_a
        if to_b is not None:
            xp.copyto(to_b, b)
            b = to_b
    a3 = a.reshape(shape_a)
    b3 = b.reshape(shape_b)
    if out is None:
        res = (xp.empty(shape_c, dtype=a.dtype) if into is None else into.reshape(shape_c))
        matmul(a3, b3, res)
        res = res.reshape(p.res_shape)
        return res if p.out_perm is None else res.transpose(p.out_perm)
    if p.out_perm is None:
        matmul(a3, b3, out.reshape(shape_c))
    else:
        res = xp.empty(shape_c, dtype=out.dtype)
        matmul(a3, b3, res)
        out[...] = res.reshape(p.res_shape).transpose(p.out_perm)
    return out


def _operand_matrices(p: Gemm, shapes) -> list[tuple[tuple, bool, bool]]:
    """Per GEMM operand (A, then B): its shape after the pre-sums, whether it was pre-summed,
    and whether its transposed matrix is a free view (else ``run_gemm`` copies it)."""
    a, b = (shapes[1], shapes[0]) if p.swapped else (shapes[0], shapes[1])
    shape_a, shape_b = p.matrices[:2]
    out = []
    for s, drop, perm, groups in ((a, p.sum_a, p.perm_a, shape_a),
                                  (b, p.sum_b, p.perm_b, shape_b)):
        kept = tuple(d for i, d in enumerate(s) if i not in drop)
        out.append((kept, bool(drop), view_is_free(kept, perm, groups)))
    return out


def transpose_copy_bytes(p: Gemm, shapes, itemsize: int) -> int:
    """Bytes read and written by the copies ``run_gemm`` makes (operands whose transposed
    matrix is not a free view, and a result that needs its axes permuted): the cost model's
    count, strict about BLAS-ready matrices."""
    B, M, _, N = p.bmkn
    copy = sum(2 * math.prod(kept) * itemsize
               for kept, _, free in _operand_matrices(p, shapes) if not free)
    return copy + (2 * B * M * N * itemsize if p.out_perm is not None else 0)




def gemm_workspace_bytes(p: Gemm, shapes, itemsize: int, blas: bool = True) -> int:
    """Bytes ``run_gemm`` allocates at once beside ``out`` for C-contiguous operands of
    ``shapes`` on the host: ``operand_scratch`` (``blas`` as there), the unpermuted result
    where it is permuted into ``out``, and its views (``GEMM_VIEW_BYTES``)."""
    B, M, _, N = p.bmkn
    held, _ = operand_scratch(p, [(tuple(s), c_strides(s)) for s in shapes], itemsize,
                              blas)
    return held + (B * M * N * itemsize if p.out_perm is not None else 0) + GEMM_VIEW_BYTES


def c_strides(shape) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape``."""
    return _c_strides(shape if shape.__class__ is tuple else tuple(shape))


@functools.lru_cache(maxsize=4096)
def _c_strides(shape: tuple) -> tuple[int, ...]:
    # memoized: a network's compile asks for each operand's and step's (hundreds, few
    # distinct)
    strides, acc = [0] * len(shape), 1
    for i in reversed(range(len(shape))):
        strides[i], acc = acc, acc * int(shape[i])
    return tuple(strides)


def _reduced_strides(shape, strides, drop) -> tuple[tuple, tuple]:
    """Shape and element strides of ``a.sum(axis=drop)`` for ``a`` of ``shape``/``strides``:
    NumPy lays a reduction out in its operand's stride order."""
    kept = [i for i in range(len(shape)) if i not in drop]
    new_shape = tuple(shape[i] for i in kept)
    order = sorted(range(len(kept)), key=lambda j: -strides[kept[j]])
    out, acc = [0] * len(kept), 1
    for j in reversed(order):
        out[j], acc = acc, acc * new_shape[j]
    return new_shape, tuple(out)


def reshaped_strides(shape, strides, perm, new_shape) -> tuple | None:
    """The element strides of ``a.transpose(perm).reshape(new_shape)`` for ``a`` of
    ``shape`` and element ``strides`` where that is a view, else None (NumPy copies):
    NumPy's own rule (``_attempt_nocopy_reshape`` for C order), on the shapes alone."""
    if 0 in shape:
        return c_strides(new_shape)
    old = [(shape[i], strides[i]) for i in perm if shape[i] != 1]
    new = list(new_shape)
    out = [0] * len(new)
    oi = ni = 0
    while ni < len(new) and oi < len(old):
        nj, oj = ni + 1, oi + 1
        n_prod, o_prod = new[ni], old[oi][0]
        while n_prod != o_prod:
            if n_prod < o_prod:
                n_prod *= new[nj]
                nj += 1
            else:
                o_prod *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):     # the old axes merged here must be contiguous
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        ni, oi = nj, oj
    for k in range(ni, len(new)):       # trailing dims of 1
        out[k] = out[ni - 1] if ni else 1
    return tuple(out)


def operand_scratch(plan: Gemm, layouts, itemsize: int,
                    blas: bool = True) -> tuple[int, tuple]:
    """``(bytes run_gemm allocates for its operands, the product's element strides in the
    result's label order)`` for operands of ``layouts`` (shape, element strides): its
    ``operand_copies`` and the rest of its scratch."""
    copies, held, strides = operand_copies(plan, layouts, itemsize, blas)
    return held + copies_bytes(copies, itemsize), strides


def copies_bytes(copies, itemsize: int) -> int:
    """Bytes of ``operand_copies``' copies (each a shape, or None) in elements of
    ``itemsize``."""
    ca, cb = copies
    return ((0 if ca is None else math.prod(ca)) + (0 if cb is None else math.prod(cb))) * \
        itemsize


def operand_copies(plan: Gemm, layouts, itemsize: int,
                   blas: bool = True) -> tuple[tuple, int, tuple]:
    """``(copies, other bytes, the product's element strides in the result's label order)``
    of ``run_gemm`` for operands of ``layouts`` (shape, element strides). ``copies``: per
    GEMM operand (A, then B), the shape of the permuted operand it copies (its matrix is
    not a view of it: a buffer of ``run_gemm``'s ``copies``, or NumPy's), or None. The
    other bytes it allocates: pre-sums; without ``blas`` (a product by ``einsum_matmul``)
    its copy of one operand where it makes one (``einsum_matmul.operand_to_copy``) and its
    iterator (``einsum_matmul_bytes``)."""
    a, b = (layouts[1], layouts[0]) if plan.swapped else layouts
    held = 0
    matrices, copies = [], []
    for (shape, strides), drop, perm, groups in ((a, plan.sum_a, plan.perm_a, plan.matrices[0]),
                                                 (b, plan.sum_b, plan.perm_b, plan.matrices[1])):
        if drop:
            shape, strides = _reduced_strides(shape, strides, drop)
            held += math.prod(shape) * itemsize
        view = reshaped_strides(shape, strides, perm, groups)
        copies.append(None if view is not None else tuple([shape[i] for i in perm]))
        if not blas:     # (the matrices' layouts: what einsum_matmul's copy depends on)
            matrices.append((groups, c_strides(groups) if view is None else view))
    if not blas:
        which = operand_to_copy(*matrices[0], *matrices[1])
        if which:
            held += math.prod(matrices[which - 1][0]) * itemsize
        held += einsum_matmul_bytes(len(plan.matrices[0]))
    strides = c_strides(plan.res_shape)
    if plan.out_perm is not None:
        strides = tuple(strides[i] for i in plan.out_perm)
    return tuple(copies), held, strides


def view_is_free(shape, perm, groups) -> bool:
    """Whether transposing a C-contiguous array by ``perm`` and merging consecutive axes into
    ``groups`` (sizes) is a view whose last two groups form a C- or F-ordered matrix."""
    strides, acc = [0] * len(shape), 1
    for i in reversed(range(len(shape))):
        strides[i], acc = acc, acc * shape[i]
    axes = [(shape[i], strides[i]) for i in perm if shape[i] != 1]
    merged, pos = [], 0
    for g in groups:
        dims, prod = [], 1
        while pos < len(axes) and prod < g:
            dims.append(axes[pos])
            prod *= axes[pos][0]
            pos += 1
        if any(s != d2 * s2 for (_, s), (d2, s2) in zip(dims, dims[1:])):
            return False
        merged.append(dims[-1][1] if dims else None)
    m, k = merged[-2], merged[-1]
    return m is None or k is None or k == 1 or m == 1


def gemm_source(p: Gemm, eq: str, library: str, product) -> str:
    """Readable source of ``run_gemm`` for ``p``: the pre-sums, the matrix views A and B,
    then ``product(lead)``'s lines (``lead`` is the batch extent prefix, "B, " or "")."""
    B, M, K, N = p.bmkn
    lead = f"{B}, " if B != 1 else ""
    x, y = ("b", "a") if p.swapped else ("a", "b")
    lines = [f"# {eq!r} as one {'batched ' if B != 1 else ''}{library} GEMM "
             f"(B,M,K,N = {p.bmkn})"]
    if p.sum_a:
        lines.append(f"{x} = {x}.sum(axis={p.sum_a})")
    if p.sum_b:
        lines.append(f"{y} = {y}.sum(axis={p.sum_b})")
    for name, op, perm, shape in (("A", x, p.perm_a, f"{lead}{M}, {K}"),
                                  ("B", y, p.perm_b, f"{lead}{K}, {N}")):
        t = "" if perm == tuple(range(len(perm))) else f".transpose{perm}"
        lines.append(f"{name} = {op}{t}.reshape({shape})")
    return "\n".join(lines + product(lead))
