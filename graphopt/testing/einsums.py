"""Einsum parts of the strategies: ``einsum_equations()`` and the einsum / contraction-chain
generators that ``graphs()`` uses (they take its builder, duck-typed, to avoid a cycle)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from ..frontend import tensor as gb

ASCII_LABELS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
LIMIT = 100.0  # largest magnitude an op may produce before its operands are squashed


@st.composite
def einsum_equations(draw, max_operands: int = 4, max_rank: int = 4, max_dim: int = 4,
                     ellipsis: bool = True, implicit: bool = True, repeated: bool = True,
                     broadcast: bool = True, labels: str = ASCII_LABELS):
    """``(equation, operand_shapes)`` in NumPy's einsum language.

    Covers explicit and implicit output, ``...`` anywhere in a term (also in the output,
    also zero-width), repeated labels within a term (traces, diagonals) and size-1
    dimensions that broadcast against a larger size of the same label. Most draws are
    valid ``numpy.einsum`` calls; a few are not (e.g. ellipsis dims missing from an
    explicit output), so tests can check that errors agree too.
    """
    n = draw(st.integers(1, max_operands))
    n_labels = draw(st.integers(1, 7))
    start = draw(st.integers(0, len(labels) - 1))
    pool = (labels[start:] + labels[:start])[:n_labels]
    size = {c: draw(st.integers(1, max_dim)) for c in pool}
    ell = tuple(draw(st.integers(1, max_dim)) for _ in range(draw(st.integers(0, 2))))
    terms, shapes, any_ell = [], [], False
    for _ in range(n):
        term = [draw(st.sampled_from(pool)) for _ in range(draw(st.integers(0, max_rank)))]
        if not repeated:
            term = list(dict.fromkeys(term))
        shape = [size[c] for c in term]
        if broadcast:
            shape = [1 if term.count(c) == 1 and draw(st.integers(0, 3)) == 0 else d
                     for c, d in zip(term, shape)]
        text = "".join(term)
        if ellipsis and draw(st.booleans()):
            k = draw(st.integers(0, len(ell)))
            edims = [1 if broadcast and draw(st.integers(0, 3)) == 0 else d
                     for d in ell[len(ell) - k:]]
            pos = draw(st.integers(0, len(term)))
            text = "".join(term[:pos]) + "..." + "".join(term[pos:])
            shape = shape[:pos] + edims + shape[pos:]
            any_ell = True
        terms.append(text)
        shapes.append(tuple(shape))
    eq = ",".join(terms)
    if not (implicit and draw(st.integers(0, 3)) == 0):
        used = list(dict.fromkeys(c for t in terms for c in t if c != "."))
        out = list(draw(st.permutations([c for c in used if draw(st.booleans())])))
        if any_ell and draw(st.integers(0, 7)) > 0:
            out.insert(draw(st.integers(0, len(out))), "...")
        eq += "->" + "".join(out)
    return eq, shapes


def _joinable(c, d, term, size, repeated, mixed) -> bool:
    """May label ``c`` (size ``size[c]``) name a dim of size ``d`` in ``term``?"""
    if c in term:  # a repeated label (diagonal/trace) needs equal sizes throughout
        return size[c] == d and c not in mixed
    if size[c] == d:
        return True
    return (size[c] == 1 or d == 1) and c not in repeated  # size-1 broadcasting


def einsum(b) -> bool:
    """An einsum over 1..5 earlier tensors: contractions, traces, outer products, ellipsis,
    implicit output, sometimes the interleaved form; replayed (for CSE) with renamed labels
    and permuted operands."""
    n = b.draw(st.integers(1, 5))
    ops = [b.pick(lambda it: it.t.dtype.kind in "ifc") for _ in range(n)]
    if ops[0] is None:
        return False
    start = b.draw(st.integers(0, len(b.labels) - 1))
    pool = b.labels[start:] + b.labels[:start]
    use_ell = b.draw(st.integers(0, 3)) == 0
    size: dict[str, int] = {}
    repeated, mixed = set(), set()
    terms, ell_shape, has_ell = [], (), False
    for it in ops:
        shape = it.t.shape
        e = b.draw(st.integers(0, len(shape))) if use_ell else 0
        if e:
            try:
                ell_shape = tuple(np.broadcast_shapes(ell_shape, shape[:e]))
                has_ell = True
            except ValueError:
                e = 0
        term = ""
        for d in shape[e:]:
            opts = [c for c in size if _joinable(c, d, term, size, repeated, mixed)]
            k = b.draw(st.integers(0, len(opts)))
            if k == 0:
                c = pool[len(size)]
                size[c] = d
            else:
                c = opts[k - 1]
                if c in term:
                    repeated.add(c)
                if size[c] != d:
                    mixed.add(c)
                    size[c] = max(size[c], d)
            term += c
        terms.append(("..." if e else "") + term)
    labels = list(dict.fromkeys(c for t in terms for c in t if c != "."))
    once = sorted(c for c in labels if sum(t.count(c) for t in terms) == 1)
    implicit = b.draw(st.integers(0, 3)) == 0
    if implicit:
        out = ("..." if has_ell else "") + "".join(once)
    else:
        out = "".join(b.draw(st.permutations([c for c in labels if b.draw(st.booleans())])))
        if has_ell and b.draw(st.integers(0, 4)) > 0:
            k = b.draw(st.integers(0, len(out)))
            out = out[:k] + "..." + out[k:]
    count = math.prod(size[c] for c in labels if c not in out)
    if "..." not in out:
        count *= math.prod(ell_shape)
    if math.prod(it.bound for it in ops) * count > LIMIT:
        ops = [b.tame(it) for it in ops]
    bound = math.prod(it.bound for it in ops) * count
    exact = all(it.t.dtype.kind in "bi" for it in ops)
    interleaved = all(c in ASCII_LABELS for c in labels) and b.draw(st.integers(0, 5)) == 0

    def sub(term):
        return ([Ellipsis] if term.startswith("...") else []) + \
            [ASCII_LABELS.index(c) for c in term.replace("...", "")]

    def make(variant):
        if not variant:
            if interleaved:
                args = [x for it, t in zip(ops, terms) for x in (it.t, sub(t))]
                if not implicit:
                    out_sub = [ASCII_LABELS.index(c) if c != "." else Ellipsis
                               for c in out.replace("...", ".")]
                    args.append(out_sub)
                return b.add(gb.einsum(*args), bound, exact)
            eq = ",".join(terms) + ("" if implicit else "->" + out)
            return b.add(gb.einsum(eq, *(it.t for it in ops)), bound, exact)
        # The same contraction written differently: labels renamed, operands permuted.
        shift = b.draw(st.integers(1, len(b.labels) - 1))
        ren = {c: b.labels[(b.labels.index(c) + shift) % len(b.labels)] for c in labels}
        order = b.draw(st.permutations(range(len(ops))))
        eq = ",".join("".join(ren.get(c, c) for c in terms[i]) for i in order) + "->" + \
            "".join(ren.get(c, c) for c in out)
        return b.add(gb.einsum(eq, *(ops[i].t for i in order)), bound, exact)

    b.emit(make)
    return True


def chain(b) -> bool:
    """A chain of 2-3 pairwise contractions whose intermediates have one consumer each, as
    in ``((A B) C) D``: work for the contraction pass."""
    first = b.pick(lambda it: it.t.dtype.kind in "ifc" and it.t.ndim >= 1)
    if first is None:
        return False
    cur = b.tame(first)
    for _ in range(b.draw(st.integers(2, 3))):
        if cur.t.ndim == 0:
            break
        j = b.draw(st.integers(0, cur.t.ndim - 1))
        d = cur.t.shape[j]
        p = b.pick(lambda it, d=d, cur=cur: it.t.dtype.kind in "ifc" and d in it.t.shape
                   and it is not cur)
        if p is None:
            p = b.const((d, b.draw(st.integers(1, b.max_dim))),
                        "float64" if cur.t.dtype.kind != "f" else cur.t.dtype.name)
        p = b.tame(p)
        pj = p.t.shape.index(d)
        lc = ASCII_LABELS[:cur.t.ndim]
        lp = "".join(lc[j] if i == pj else ASCII_LABELS[26 + i] for i in range(p.t.ndim))
        keep = [c for c in lc if c != lc[j]] + [c for c in lp if c != lc[j]]
        out = "".join(keep[:4])
        count = d * math.prod(b.max_dim for _ in keep[4:])
        cur = b.add(gb.einsum(f"{lc},{lp}->{out}", cur.t, p.t), cur.bound * p.bound * count,
                    False)
    return True
