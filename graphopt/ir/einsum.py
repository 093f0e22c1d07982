"""Einsum equations: parsing, validation, the explicit IR form, and a canonical form for CSE.

In the IR every einsum equation is *explicit* (it has ``->``), has no ``...`` (ellipsis
dimensions are expanded into fresh labels) and has one size per label (operands whose
size-1 dimensions NumPy would broadcast get an explicit ``broadcast_to`` first). IR labels
are single Unicode letters (``label(i)``).

Users may write any label opt_einsum accepts: every character but the syntax (``,``,
``-``, ``>``, ``.``), so digits and the non-letters among ``opt_einsum.get_symbol``'s
symbols (``×``, ``÷``, and from its 5621st symbol on the Unicode spaces ``\u1680``,
``\u2000``... that a network of thousands of indices is written with) too; ASCII spaces
are dropped, as opt_einsum drops them. ``parse`` renames such labels to letters for the
IR, after the implicit output has been ordered by the user's labels.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

from opt_einsum.parser import get_symbol

from ..errors import EinsumError

# the labels numpy.einsum takes (``einsum_numpy.to_ascii``), and the first IR labels
ASCII_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class EinsumSpec:
    """A parsed, validated equation in IR form.

    Attributes:
        inputs: one term per operand, ellipsis expanded.
        output: the output term.
        sizes: the size of every label.
        broadcast: per operand, the shape it must be broadcast to first, or None.
    """

    inputs: tuple[str, ...]
    output: str
    sizes: dict
    broadcast: tuple

    @property
    def equation(self) -> str:
        return ",".join(self.inputs) + "->" + self.output

    @property
    def output_shape(self) -> tuple[int, ...]:
        return tuple(self.sizes[c] for c in self.output)


def split(equation: str) -> tuple[list[str], str]:
    """Split an explicit IR equation into its input terms and output term."""
    lhs, out = equation.split("->")
    return lhs.split(","), out


def abbreviate(equation: str, width: int = 80) -> str:
    """``equation`` quoted for a message: whole where it fits ``width`` characters, else
    its first terms, an ellipsis, its output and the operand count."""
    if len(equation) <= width:
        return repr(equation)
    terms, out = split(equation)
    head = ""
    for t in terms:
        if len(head) + len(t) + 1 > width // 2:
            break
        head += t + ","
    return f"'{head}...->{out}' ({len(terms)} operands)"


_LABELS: list[str] = list(ASCII_LETTERS)   # the IR labels listed so far, in order
_labels_lock = threading.Lock()


def ir_labels(n: int) -> list[str]:
    """A list whose first ``n`` items are the first ``n`` IR labels: ASCII letters first,
    then other Unicode letters (the shared table: read it, never change it)."""
    if len(_LABELS) < n:
        with _labels_lock:     # (two threads appending at once would list a label twice)
            cp = ord(_LABELS[-1]) if len(_LABELS) > 52 else 0xBF
            while len(_LABELS) < n:
                cp += 1
                if is_ir_label(chr(cp)):
                    _LABELS.append(chr(cp))
    return _LABELS


def label(i: int) -> str:
    """The ``i``-th IR label (``ir_labels``)."""
    return ir_labels(i + 1)[i]


def is_ir_label(c: str) -> bool:
    """``c`` may stand in an IR equation (a Unicode letter, not a surrogate)."""
    return c.isalpha() and not 0xD800 <= ord(c) < 0xE000


# What no label may be: the syntax characters, and surrogates, which no string of labels
# can encode (any other character is one, as opt_einsum takes it: Unicode spaces too, which
# ``opt_einsum.get_symbol`` gives as symbols 5620, 8052-8062, ...)
_NOT_A_LABEL = re.compile("[,\\->.\ud800-\udfff]")


def _check_labels(body: str, where) -> None:
    """``EinsumError`` naming the first character of ``body`` that is no label."""
    bad = _NOT_A_LABEL.search(body)
    if bad:
        raise EinsumError(f"invalid index label {bad.group()!r} in {where}: a label is any "
                          "character but ',', '-', '>' and '.' ('...', ',' and '->' are "
                          "syntax; spaces are dropped)")


def _letters_for(labels: set) -> dict[str, str]:
    """A letter for each of ``labels`` that is not one, unused by the others: the lowest
    free IR labels, in the order of the odd labels' code points."""
    odd = sorted(c for c in labels if not is_ir_label(c))
    if not odd:
        return {}
    # at most len(labels) - len(odd) of the first len(labels) IR labels are taken
    first = ir_labels(len(labels))[:len(labels)]
    return dict(zip(odd, [c for c in first if c not in labels]))


def _fresh_labels(used: set, n: int) -> list[str]:
    out, i = [], 0
    while len(out) < n:
        s = get_symbol(i)
        if s not in used:
            out.append(s)
        i += 1
    return out


def parse(equation: str, shapes: Sequence[Sequence[int]]) -> EinsumSpec:
    """Validate ``equation`` against operand ``shapes`` and return its IR form (see
    ``_parse``; the IR verifier asks again after every pass, so answers are memoized)."""
    if not isinstance(equation, str):
        raise EinsumError(f"equation must be a str, got {type(equation).__name__}")
    # (a dim NumPy gives as np.int64 hashes and compares as its int: ``_parse`` converts)
    key = (equation, tuple(map(tuple, shapes)))
    with _specs_lock:
        spec = _SPECS.get(key)
        if spec is not None:
            _SPECS.move_to_end(key)
    if spec is None:
        spec = _parse(*key)
        with _specs_lock:
            _SPECS[key] = spec
            # where no operand broadcasts, the IR form parses to this same spec, and the
            # builder's inference asks it next: a network's equation of hundreds of
            # operands in opt_einsum's symbols is not parsed twice as it is built
            if spec.equation != equation and all(b is None for b in spec.broadcast):
                _SPECS[(spec.equation, key[1])] = spec
            while len(_SPECS) > SPEC_MEMO_ENTRIES:
                _SPECS.popitem(last=False)
    return dataclasses.replace(spec, sizes=dict(spec.sizes))


SPEC_MEMO_ENTRIES = 4096
_SPECS: OrderedDict = OrderedDict()     # (equation, shapes) -> EinsumSpec, least recent first
_specs_lock = threading.Lock()


def _parse(equation: str, shapes: Sequence[Sequence[int]]) -> EinsumSpec:
    """Validate ``equation`` against operand ``shapes`` and return its IR form.

    Follows ``numpy.einsum``: implicit output (labels seen once, in code-point order, after
    the ellipsis dims), ``...`` broadcasting, repeated labels (traces/diagonals), and size-1
    broadcasting of a label against a larger size.

    Raises:
        EinsumError: naming the equation and the operand shapes.
    """
    if not isinstance(equation, str):
        raise EinsumError(f"equation must be a str, got {type(equation).__name__}")
    eq = equation.replace(" ", "")   # an ASCII space is no label: opt_einsum drops it too
    shapes = [tuple(map(int, s)) for s in shapes]
    where = _Where(equation, shapes)
    if eq.count("->") > 1:
        raise EinsumError(f"more than one '->' in {where}")
    lhs, rhs = eq.split("->") if "->" in eq else (eq, None)
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise EinsumError(f"{len(terms)} operand term(s) but {len(shapes)} operand(s) in {where}")
    if "." in eq:
        _check_terms(terms + ([rhs] if rhs is not None else []), where)
        expanded, ell = _expand_ellipses(terms, shapes, set(eq) - set(",.->"), where)
    else:   # (a network's hundreds of terms: no ellipsis, so each term names every dim)
        _check_labels(lhs.replace(",", "") + (rhs or ""), where)
        for t, s in zip(terms, shapes):
            if len(t) != len(s):
                _expand_ellipses([t], [s], (), where)     # (which says what is wrong)
        expanded, ell = terms, []
    sizes = _sizes_of_labels(expanded, shapes, where)
    out = _output_term(terms, rhs, expanded, ell, where)
    rename = _letters_for(set(sizes))
    if rename:
        table = str.maketrans(rename)
        expanded = [t.translate(table) for t in expanded]
        out = out.translate(table)
        sizes = {rename.get(c, c): s for c, s in sizes.items()}
    broadcast = []
    for t, s in zip(expanded, shapes):
        full = tuple(map(sizes.__getitem__, t))
        broadcast.append(full if full != s else None)
    return EinsumSpec(tuple(expanded), out, sizes, tuple(broadcast))


class _Where:
    """``equation ... with operand shapes ...`` for an error message (the ``where`` the
    checks below take), formatted only where one is raised: a network's hundreds of shapes
    are not written out at every parse."""

    __slots__ = ("equation", "shapes")

    def __init__(self, equation: str, shapes):
        self.equation, self.shapes = equation, shapes

    def __str__(self) -> str:
        return f"equation {self.equation!r} with operand shapes {self.shapes}"


def _check_terms(terms: list[str], where) -> None:
    for t in terms:
        body = t.replace("...", "")
        if "." in body:
            raise EinsumError(f"stray '.' (only '...' is allowed) in {where}")
        if t.count("...") > 1:
            raise EinsumError(f"more than one '...' in a term of {where}")
        _check_labels(body, where)


def _expand_ellipses(terms, shapes, used: set, where) -> tuple[list[str], list[str]]:
    """Terms with each ``...`` replaced by fresh labels, right-aligned as NumPy broadcasting
    aligns them; and the labels of the widest ellipsis."""
    ell_ranks = []
    for t, s in zip(terms, shapes):
        named = len(t.replace("...", ""))
        if "..." in t:
            if len(s) < named:
                raise EinsumError(f"term {t!r} names {named} dims but its operand has shape {s}"
                                  f" in {where}")
            ell_ranks.append(len(s) - named)
        else:
            if len(s) != named:
                raise EinsumError(f"term {t!r} has {named} labels but its operand has "
                                  f"{len(s)} dims (shape {s}) in {where}")
            ell_ranks.append(0)
    n_ell = max(ell_ranks, default=0)
    ell = _fresh_labels(used, n_ell)
    expanded = [t.replace("...", "".join(ell[n_ell - k:])) if "..." in t else t
                for t, k in zip(terms, ell_ranks)]
    return expanded, ell


def _sizes_of_labels(expanded, shapes, where) -> dict[str, int]:
    """Each label's size; a size-1 dim broadcasts against a larger one, as in NumPy."""
    sizes: dict[str, int] = {}
    setdefault = sizes.setdefault
    for t, s in zip(expanded, shapes):
        for c, d in zip(t, s):
            e = setdefault(c, d)
            if e != d:
                if e == 1:
                    sizes[c] = d
                elif d != 1:
                    raise EinsumError(f"label {c!r} has size {e} and {d} in {where}")
    # a label repeated in one term takes a diagonal: its dims there are equal, as NumPy
    # asks; all of size 1 they broadcast against a larger size elsewhere, as one dim would
    for t, s in zip(expanded, shapes):
        if len(t) < 2 or len(set(t)) == len(t):
            continue
        for c in set(t):
            dims = sorted({d for cc, d in zip(t, s) if cc == c})
            if len(dims) > 1:
                raise EinsumError(f"repeated label {c!r} in term {t!r} has dims {dims} (shape "
                                  f"{s}): its diagonal needs equal dims, in {where}")
    return sizes


def _output_term(terms, rhs, expanded, ell, where) -> str:
    if rhs is None:
        counts: dict[str, int] = {}
        for t in terms:
            for c in t.replace("...", ""):
                counts[c] = counts.get(c, 0) + 1
        return "".join(ell) + "".join(sorted(c for c, n in counts.items() if n == 1))
    # Without '...' in the output, ellipsis dims are summed over, as opt_einsum does
    # (NumPy rejects such equations).
    out = rhs.replace("...", "".join(ell))
    all_labels = set("".join(expanded))
    for c in out:
        if c not in all_labels:
            raise EinsumError(f"output label {c!r} does not appear in any input of {where}")
    if len(set(out)) != len(out):
        raise EinsumError(f"output {rhs!r} repeats a label in {where}")
    return out


def _ordered_symbol(k: int) -> str:
    """The ``k``-th of a run of labels whose code points increase: ``A-Z``, ``a-z``, then
    the other Unicode letters (``label``), so sorted user labels keep their order."""
    return chr(65 + k) if k < 26 else chr(97 + k - 26) if k < 52 else label(k)


def interleaved_to_equation(args: Sequence) -> tuple[str, list]:
    """Convert NumPy's interleaved form ``(a, [0, 1], b, [1, 2], [0, 2])`` to ``(eq, operands)``.

    Sublist entries are ``Ellipsis`` or any hashable labels (ints as in NumPy, strings,
    tuples...). Labels are renamed in sorted order (order of first appearance where they do
    not compare), so the implicit output orders them as ``numpy.einsum`` orders ints.
    """
    args = list(args)
    out = args.pop() if len(args) % 2 == 1 else None
    operands, terms = args[0::2], args[1::2]
    subs = terms + ([out] if out is not None else [])
    try:
        subs = [list(sub) for sub in subs]
        seen = list(dict.fromkeys(v for sub in subs for v in sub if v is not Ellipsis))
    except TypeError:
        raise EinsumError(f"interleaved einsum expects sublists of hashable labels or "
                          f"Ellipsis, got {subs!r}") from None
    try:
        seen = sorted(seen)
    except TypeError:  # labels that do not compare (e.g. ints and strings): first appearance
        pass
    symbol = {v: _ordered_symbol(k) for k, v in enumerate(seen)}

    def term(sub) -> str:
        return "".join("..." if v is Ellipsis else symbol[v] for v in sub)

    eq = ",".join(term(t) for t in subs[:len(terms)])
    if out is not None:
        eq += "->" + term(subs[-1])
    return eq, operands


def first_use_equation(inputs: Sequence[str], output: str, symbol=label) -> str:
    """``inputs->output`` with labels renamed ``symbol(0), symbol(1), ...`` in order of
    first use (inputs, then output): ``xy,yz->xz`` and ``ij,jk->ik`` both become
    ``ab,bc->ac``. With ``label`` (the default) the result is an IR equation."""
    if symbol is label and len(inputs) <= 3:
        return _first_use_short(",".join(inputs) + "->" + output)
    used = dict.fromkeys("".join(inputs) + output)
    if symbol is label:
        names = ir_labels(len(used))
    else:
        names = [symbol(i) for i in range(len(used))]
    return (",".join(inputs) + "->" + output).translate(dict(zip(map(ord, used), names)))


def _first_use_short(equation: str) -> str:
    """``first_use_equation`` of an IR ``equation`` of a few terms (a contraction program's
    step: one per step of a network, where this is faster than ``str.translate``)."""
    table = ir_labels(len(equation))     # (no more labels than characters)
    names, renamed = {",": ",", "-": "-", ">": ">"}, []
    for c in equation:
        r = names.get(c)
        if r is None:
            r = names[c] = table[len(names) - 3]
        renamed.append(r)
    return "".join(renamed)


def canonical_labels(inputs: Sequence[str], output: str) -> str:
    """``first_use_equation`` in opt_einsum's symbols (``get_symbol``)."""
    return first_use_equation(inputs, output, get_symbol)


def _term_pattern(term: str) -> str:
    """A term's shape of repetition, independent of label names: ``iji`` -> ``aba``."""
    return canonical_labels([term], "").split("->")[0]


# Above this many orderings of tied operands, canonical_form keeps their given order.
MAX_TIE_ORDERS = 5040


def canonical_form(equation: str, operand_keys: Sequence) -> tuple[tuple[int, ...], str]:
    """Canonical form of an IR equation whose operands are identified by ``operand_keys``.

    Returns ``(order, canonical_equation)``: applying ``canonical_equation`` to the
    operands taken in ``order`` is the same contraction as the original. Operand order
    (einsum is commutative) and label names do not change the result, so CSE can compare
    ``ij,jk->ik`` on (a, b) with ``jk,ij->ik`` on (b, a). Operands with equal keys (the
    same tensor used twice) are ordered by trying their orderings and keeping the least
    renamed equation, up to ``MAX_TIE_ORDERS`` orderings (beyond that a duplicate may be
    missed, never a false match).
    """
    inputs, output = split(equation)
    rank = lambda i: (str(operand_keys[i]), _term_pattern(inputs[i]))
    base = sorted(range(len(inputs)), key=lambda i: (rank(i), i))
    groups = [list(g) for _, g in itertools.groupby(base, key=rank)]
    if math.prod(math.factorial(len(g)) for g in groups) > MAX_TIE_ORDERS:
        orders = [base]
    else:
        orders = [[i for part in parts for i in part]
                  for parts in itertools.product(*(itertools.permutations(g) for g in groups))]
    best = min((canonical_labels([inputs[i] for i in o], output), o) for o in orders)
    return tuple(best[1]), best[0]
