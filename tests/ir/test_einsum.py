"""Einsum parsing and evaluation against numpy.einsum / opt_einsum, canonical forms, errors."""

import importlib
import re

import numpy as np
import opt_einsum
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opt_einsum.parser import get_symbol

import graphopt as go
from graphopt.ir import ops
from graphopt.ir.einsum_numpy import evaluate
from graphopt.ir.interpreter import interpret
from graphopt.testing import einsum_equations

E = importlib.import_module("graphopt.ir.einsum")  # go.einsum (the op) shadows the module

HERE = re.escape(__file__.rsplit("/", 1)[-1])


def run_einsum(eq, arrays, dtype=None):
    """Build a one-einsum graph through the public builder and run the interpreter."""
    g = go.Graph("einsum")
    ts = [g.input(f"x{i}", a.shape, a.dtype.name) for i, a in enumerate(arrays)]
    g.output(go.einsum(eq, *ts))
    return interpret(g.to_ir(), *arrays)


def _arrays(shapes, seed=0, dtype="float64"):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def _ellipsis_summed(eq: str) -> bool:
    """Explicit output without '...' although an input has one: opt_einsum sums those dims,
    NumPy rejects the equation; graphopt follows opt_einsum."""
    return "->" in eq and "..." in eq.split("->")[0] and "..." not in eq.split("->")[1]


@given(einsum_equations(), st.integers(0, 2**16))
def test_parse_and_evaluate_match_numpy(case, seed):
    eq, shapes = case
    arrays = _arrays(shapes, seed)
    try:
        expected = np.einsum(eq, *arrays)
    except ValueError as numpy_error:
        if not _ellipsis_summed(eq):
            with pytest.raises(go.EinsumError):
                E.parse(eq, shapes)
            return
        if any(0 in s for s in shapes):
            return
        try:
            expected = opt_einsum.contract(eq, *arrays)
        except ValueError:
            with pytest.raises(go.EinsumError):
                E.parse(eq, shapes)
            return
        assert numpy_error is not None
    spec = E.parse(eq, shapes)
    assert spec.output_shape == np.shape(expected)
    assert "->" in spec.equation and "..." not in spec.equation
    got = run_einsum(eq, arrays)
    assert got.shape == np.shape(expected) and got.dtype == np.asarray(expected).dtype
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("eq,shapes", [
    ("ii->i", [(3, 3)]), ("ii", [(4, 4)]), ("iij->ij", [(2, 2, 3)]), ("ij,jk", [(2, 3), (3, 4)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]), ("i...", [(2, 3, 4)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]), ("ba", [(2, 3)]), ("Ba,aC", [(2, 3), (3, 4)]),
    ("i,j,k->ijk", [(2,), (3,), (4,)]), ("ab,bc,cd,de->ae", [(2, 3), (3, 4), (4, 5), (5, 2)]),
    ("", [()]), (",->", [(), ()]), ("...,...->...", [(2, 3), (3,)]),
    ("i ,j->ij", [(2,), (3,)]),
])
def test_known_equations(eq, shapes):
    arrays = _arrays(shapes, 1)
    np.testing.assert_allclose(run_einsum(eq, arrays), np.einsum(eq, *arrays), rtol=1e-12)


def test_ellipsis_dims_missing_from_output_are_summed_like_opt_einsum():
    a, b = _arrays([(2, 3), (3,)], 2)
    np.testing.assert_allclose(run_einsum("...i->i", [a]), opt_einsum.contract("...i->i", a))
    np.testing.assert_allclose(run_einsum("...i,...i->i", [a, b]),
                               opt_einsum.contract("...i,...i->i", a, b))


def test_more_than_52_unicode_labels_ring_trace():
    n = 60  # a ring of 60 matrices: 60 distinct labels, beyond ASCII's 52
    mats = _arrays([(2, 2)] * n, 3)
    mats = [m / 2 for m in mats]
    eq = ",".join(get_symbol(i) + get_symbol((i + 1) % n) for i in range(n)) + "->"
    assert len(set(eq) - set(",->")) == n and any(ord(c) > 127 for c in eq)
    expected = np.trace(np.linalg.multi_dot(mats))
    np.testing.assert_allclose(run_einsum(eq, mats), expected, rtol=1e-9)
    np.testing.assert_allclose(go.contract(eq, *mats, backend="numpy"), expected, rtol=1e-9)


def test_opt_einsum_symbols_that_are_unicode_spaces_ring_trace():
    """A network of thousands of indices written in opt_einsum's symbols holds Unicode
    spaces (its symbols 5620, 8052-8062, 8092, 8093, 8099, 8147, 12148): labels to
    opt_einsum, which drops only ASCII spaces, and so to graphopt."""
    picks = [i for i in range(13000) if get_symbol(i).isspace()] + list(range(20))
    assert len(picks) == 37 and get_symbol(5620) == "\u1680"
    n = len(picks)
    mats = [m / 2 for m in _arrays([(2, 2)] * n, 9)]
    eq = ",".join(get_symbol(picks[i]) + get_symbol(picks[(i + 1) % n]) for i in range(n))
    expected = opt_einsum.contract(eq + "->", *mats)
    for e in (eq + "->", eq):        # explicit and implicit output
        np.testing.assert_allclose(go.contract(e, *mats, backend="numpy"), expected,
                                   rtol=1e-9)
        np.testing.assert_allclose(go.contract(e, *mats), expected, rtol=1e-9)


@pytest.mark.parametrize("n", [80, 200])
def test_opt_einsum_symbols_beyond_the_letters_ring_trace(n):
    # get_symbol(i) past 52 gives code points from 192 on: '×' (75) and '÷' (107) are not
    # letters; every tool in the field writes large networks with these symbols
    mats = [m / 2 for m in _arrays([(2, 2)] * n, 7)]
    eq = ",".join(get_symbol(i) + get_symbol((i + 1) % n) for i in range(n)) + "->"
    assert "×" in eq and not all(c.isalpha() for c in set(eq) - set(",->"))
    expected = opt_einsum.contract(eq, *mats)
    np.testing.assert_allclose(go.contract(eq, *mats, backend="numpy"), expected, rtol=1e-9)
    spec = E.parse(eq, [m.shape for m in mats])
    assert all(E.is_ir_label(c) for c in spec.equation if c not in ",->")


@pytest.mark.parametrize("eq, shapes", [
    ("i1", [(2, 3)]), ("a1,1b->ab", [(2, 3), (3, 4)]), ("#x,x$", [(2, 3), (3, 2)]),
    ("0 1 , 1 2 -> 2 0", [(2, 3), (3, 4)]), ("×a,a÷->÷×", [(2, 3), (3, 4)]),
    ("...1,1->...", [(2, 3, 4), (4,)]), ("11->1", [(3, 3)]),
    # Unicode spaces: opt_einsum's symbols 5620 and 8052 on (a network of thousands of
    # indices is written with them), and a tab; only an ASCII space is no label
    (f"a{get_symbol(5620)},{get_symbol(5620)}{get_symbol(8052)}->{get_symbol(8052)}a",
     [(2, 3), (3, 4)]), ("\t\u3000,\u3000 x", [(2, 3), (3, 4)])])
def test_any_label_opt_einsum_accepts_matches_opt_einsum(eq, shapes):
    arrays = _arrays(shapes, 8)
    expected = opt_einsum.contract(eq, *arrays)
    got = run_einsum(eq, arrays)
    assert got.shape == expected.shape      # the implicit output orders the user's labels
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_non_letter_labels_become_ir_letters_and_ir_equations_stay_letters():
    spec = E.parse("i1", [(2, 3)])
    assert spec.equation == "ia->ai"      # implicit output: '1' < 'i' in code points
    with pytest.raises(go.GraphError, match="must use letters"):
        ops.infer("einsum", [(2, 3)], ["float64"], {"equation": "i1->1i"})


@given(einsum_equations(max_operands=5))
def test_the_ir_form_of_an_equation_parses_to_its_own_spec(case):
    """What ``parse`` relies on where it keeps a spec under its IR form too: the IR
    equation, on the same shapes, parses to the very spec its source did."""
    eq, shapes = case
    spec = E._parse(eq, shapes)
    if all(b is None for b in spec.broadcast):
        assert E._parse(spec.equation, shapes) == spec


def test_parse_memo_serves_numpy_integer_dims_and_the_ir_form():
    times, divide = get_symbol(75), get_symbol(107)     # opt_einsum's '×' and '÷': no letters
    eq = f"{times}bc,cd{divide}->{times}{divide}"
    shapes = [(2, 3, 4), (4, 5, 6)]
    spec = E.parse(eq, [tuple(np.int64(d) for d in s) for s in shapes])
    assert spec == E.parse(eq, shapes) and spec.equation != eq
    assert E.parse(spec.equation, shapes) == spec == E._parse(spec.equation, shapes)
    assert all(type(d) is int for d in spec.sizes.values())
    spec.sizes["a"] = 99        # a caller's copy: the memo's spec is not changed
    assert E.parse(eq, shapes).sizes["a"] == 2


def test_ir_label_table_is_filled_once_under_threads(monkeypatch):
    """Threads asking for IR labels beyond the table at once each get the same labels, and
    no label is listed twice (two threads appending at once would skip or repeat one)."""
    import sys
    import threading
    from concurrent.futures import ThreadPoolExecutor
    monkeypatch.setattr(E, "_LABELS", list(E.ASCII_LETTERS))
    # threads switch every microsecond: the table filled without its lock lists labels
    # twice in 91 of 100 such runs
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    want = [c for c in map(chr, range(0xC0, 0x3000)) if E.is_ir_label(c)][:1500 - 52]
    got: list = []
    start = threading.Barrier(8)

    def ask():
        start.wait()
        got.append([E.label(i) for i in range(1499, -1, -7)])

    try:
        with ThreadPoolExecutor(8) as pool:
            for f in [pool.submit(ask) for _ in range(8)]:
                f.result()
    finally:
        sys.setswitchinterval(old_interval)
    assert E._LABELS[:1500] == list(E.ASCII_LETTERS) + want
    assert len(set(E._LABELS)) == len(E._LABELS)
    assert all(g == got[0] for g in got) and got[0][0] == want[-1]


def test_odd_labels_get_the_lowest_free_letters():
    """Labels that are no letters take the lowest IR letters no other label uses, in code
    point order: as the table's walk from its start gave them."""
    times, divide = get_symbol(75), get_symbol(107)
    used = E.ir_labels(120)[:118]        # every letter up to two short of 120 taken
    rename = E._letters_for(set(used) | {divide, times, "1"})
    assert rename == {"1": E.label(118), times: E.label(119), divide: E.label(120)}
    assert E._letters_for({"a", "c", "2"}) == {"2": "b"}
    assert E._letters_for({"a", "b"}) == {}


def test_parse_without_ellipsis_reports_as_with_one():
    """The ellipsis-free fast path names the same mistakes: a bad label, a rank mismatch."""
    with pytest.raises(go.GraphError, match="invalid index label '-'"):
        E.parse("a-b,bc->ac", [(2, 3), (3, 4)])
    with pytest.raises(go.GraphError, match="invalid index label ','"):
        E.parse("ab,bc->a,c", [(2, 3), (3, 4)])
    with pytest.raises(go.GraphError, match="term 'bc' has 2 labels but its operand has 3 dims"):
        E.parse("ab,bc->ac", [(2, 3), (3, 4, 5)])
    with pytest.raises(go.GraphError, match="stray '.'"):
        E.parse("a.b,bc->ac", [(2, 3), (3, 4)])


def test_many_operands_beyond_numpy_argument_limit():
    n = 100  # numpy.einsum takes at most 32 operands
    vecs = _arrays([(3,)] * n, 4)
    eq = ",".join("i" for _ in range(n)) + "->i"
    np.testing.assert_allclose(run_einsum(eq, vecs), np.prod(vecs, axis=0), rtol=1e-9)


def test_unicode_labels_single_term():
    a = _arrays([(2, 3)], 5)[0]
    np.testing.assert_allclose(run_einsum("αβ->βα", [a]), a.T)
    np.testing.assert_allclose(run_einsum("αβ", [a]), a)  # implicit: code-point order


def test_interleaved_form():
    g = go.Graph()
    a, b = _arrays([(2, 3), (3, 4)], 6)
    ta, tb = g.input("a", a.shape), g.input("b", b.shape)
    outs = (go.einsum(ta, [0, 1], tb, [1, 2], [0, 2]), go.einsum(ta, [0, 1], tb, [1, 2]),
            go.einsum(ta, [Ellipsis, 1], [Ellipsis]), go.einsum(tb, [np.int64(0), 1], [1, 0]))
    g.output(outs)
    got = interpret(g.to_ir(), a, b)
    expected = (np.einsum(a, [0, 1], b, [1, 2], [0, 2]), np.einsum(a, [0, 1], b, [1, 2]),
                np.einsum(a, [Ellipsis, 1], [Ellipsis]), b.T)
    for x, y in zip(got, expected):
        np.testing.assert_allclose(x, y, rtol=1e-12)


@pytest.mark.parametrize("sub, out", [([0, 30], None), ([30, 0], None), ([25, 26], None),
                                      ([51, 52], None), ([60, 3], [3, 60])])
def test_interleaved_implicit_output_orders_labels_as_numpy(sub, out):
    # NumPy sorts interleaved int labels for the implicit output; opt_einsum's symbols are
    # not in code-point order across 25/26 ('z' > 'A'), which once transposed the result
    a = _arrays([(2, 3)], 9)[0]
    args = (a, sub) if out is None else (a, sub, out)
    # NumPy takes labels below 52; opt_einsum ranks two labels in order (a correct oracle)
    want = np.einsum(*args) if max(sub) < 52 else opt_einsum.contract(*args)
    np.testing.assert_array_equal(go.contract(*args, backend="numpy"), want)


def test_interleaved_form_takes_any_hashable_labels_like_opt_einsum():
    a, b = _arrays([(2, 3), (3, 4)], 10)
    for la, lb, lo in [(["x", "y"], ["y", "z"], ["z", "x"]), ([-1, 0], [0, 7], [7, -1]),
                       ([("p", 1), "q"], ["q", 2.5], [2.5, ("p", 1)])]:
        want = (a @ b).T
        np.testing.assert_allclose(go.contract(a, la, b, lb, lo, backend="numpy"), want,
                                   rtol=1e-12)
    np.testing.assert_allclose(go.contract(a, ["x", "y"], b, ["y", "z"], backend="numpy"),
                               opt_einsum.contract(a, ["x", "y"], b, ["y", "z"]), rtol=1e-12)


def test_builder_inserts_broadcast_for_size_one_labels():
    g = go.Graph()
    a, b = g.input("a", (2, 1)), g.input("b", (3, 4))
    g.output(go.einsum("ij,jk->ik", a, b))
    G = g.to_ir()
    ops = [d["op"] for _, d in G.nodes(data=True)]
    assert "broadcast_to" in ops
    eqs = [d["attrs"]["equation"] for _, d in G.nodes(data=True) if d["op"] == "einsum"]
    assert eqs == ["ij,jk->ik"]


# ----------------------------------------------------------------------------- canonical form


def _relabel(eq, mapping):
    return "".join(mapping.get(c, c) for c in eq)


@given(einsum_equations(ellipsis=False, broadcast=False), st.data())
def test_canonical_form_ignores_label_names_and_operand_order(case, data):
    eq, shapes = case
    spec = E.parse(eq, shapes)
    inputs, output = E.split(spec.equation)
    n = len(inputs)
    keys = data.draw(st.lists(st.sampled_from("pq"), min_size=n, max_size=n), label="keys")
    order = data.draw(st.permutations(range(n)), label="order")
    labels = sorted(set(spec.equation) - set(",->"))
    target = data.draw(st.permutations(labels), label="rename")
    ren = dict(zip(labels, target))
    eq2 = ",".join(_relabel(inputs[i], ren) for i in order) + "->" + _relabel(output, ren)
    keys2 = [keys[i] for i in order]
    o1, c1 = E.canonical_form(spec.equation, keys)
    o2, c2 = E.canonical_form(eq2, keys2)
    assert c1 == c2
    assert [keys[i] for i in o1] == [keys2[i] for i in o2]
    # The canonical equation on the reordered operands is the same contraction.
    ops = _arrays(shapes, 8)
    np.testing.assert_allclose(evaluate(c1, [ops[i] for i in o1]),
                               evaluate(spec.equation, ops), rtol=1e-10, atol=1e-12)


def test_canonical_form_matches_duplicate_spelled_differently():
    assert E.canonical_form("ij,jk->ik", ["a", "a"])[1] == E.canonical_form("jk,ij->ik",
                                                                            ["a", "a"])[1]
    assert E.canonical_form("ij,jk->ik", ["a", "b"]) != E.canonical_form("ij,jk->ki",
                                                                         ["a", "b"])


# ------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("eq,shapes,pattern", [
    ("ij->i->j", [(2, 3)], "more than one '->'"),
    ("ij,jk->ik", [(2, 3)], "2 operand term"),
    ("i.j", [(2, 3)], "stray '.'"),
    ("......i", [(2, 3)], "more than one '...'"),
    ("i-j", [(2, 3)], "invalid index label '-'"),
    ("i>j", [(2, 3)], "invalid index label '>'"),
    ("ij...k", [(2, 3)], "names 3 dims"),
    ("ijk", [(2, 3)], "has 3 labels but its operand has 2 dims"),
    ("ij,jk", [(2, 3), (4, 5)], "label 'j' has size 3 and 4"),
    ("ii", [(2, 3)], "label 'i' has size 2 and 3"),
    ("ii", [(1, 3)], "repeated label 'i'"),
    ("ij->k", [(2, 3)], "output label 'k' does not appear"),
    ("ij->ii", [(2, 3)], "repeats a label"),
])
def test_parse_errors_name_equation_and_shapes(eq, shapes, pattern):
    with pytest.raises(go.EinsumError, match=re.escape(pattern)) as info:
        E.parse(eq, shapes)
    assert repr(eq) in str(info.value)
    assert f"operand shapes {[tuple(s) for s in shapes]}" in str(info.value)


def test_builder_errors_name_op_shapes_and_source_line():
    g = go.Graph()
    a, b = g.input("a", (2, 3)), g.input("b", (4, 5))
    with pytest.raises(go.EinsumError) as info:
        go.einsum("ij,jk->ik", a, b)
    msg = str(info.value)
    assert "op 'einsum'" in msg and "(2, 3)" in msg and "(4, 5)" in msg
    assert re.search(HERE + r":\d+", msg), msg
    assert info.value.src == f"{__file__}:{info.tb.tb_lineno}"
    for bad_call, pattern in [
        (lambda: go.einsum(), "needs an equation"),
        (lambda: go.einsum("ij"), "has no operands"),
        (lambda: go.einsum(a, 5), "sublists"),
        (lambda: go.einsum(123, [0]), "no operand is a Tensor"),
        (lambda: go.einsum(a, [0, [1]]), "sublists of hashable labels"),
        (lambda: go.einsum("ij,k", a, "text"), "str is not a Tensor"),
    ]:
        with pytest.raises(go.GraphError, match=pattern) as info:
            bad_call()
        assert "einsum" in str(info.value)
        assert re.search(HERE + r":\d+", str(info.value)), str(info.value)


def test_equation_must_be_a_string():
    with pytest.raises(go.EinsumError, match="must be a str"):
        E.parse(["ij"], [(2, 3)])
    with pytest.raises(go.GraphError, match="has 3 labels but its operand has 1 dims"):
        go.contract(np.ones(3), np.ones(3))     # the interleaved form: [1., 1., 1.] labels
    with pytest.raises(go.GraphError, match="sublists of hashable labels"):
        go.contract(np.ones(3), [[0]])


def test_ir_einsum_must_be_explicit():
    from graphopt.ir import ops
    with pytest.raises(go.GraphError, match="explicit"):
        ops.infer("einsum", [(2, 3)], ["float64"], {"equation": "ij"})
    with pytest.raises(go.GraphError, match="broadcast"):
        ops.infer("einsum", [(2, 1), (3, 4)], ["float64"] * 2, {"equation": "ij,jk->ik"})


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("dtypes", [("bool", "bool", "float64"), ("float64", "bool", "bool"),
                                    ("bool", "int32", "bool"), ("bool", "bool", "bool")])
def test_three_operands_mixing_bool_follow_numpy_promotion(backend, dtypes):   # ISSUE 12: 3
    import graphopt as go

    if backend == "numba":
        pytest.importorskip("numba")
    rng = np.random.default_rng(5)
    g = go.Graph()
    ts = [g.input(f"t{i}", s, dt) for i, (s, dt) in enumerate(zip([(3, 4), (4, 5), (5, 2)],
                                                                   dtypes))]
    g.output(go.einsum("ij,jk,kl->il", *ts))
    arrays = {f"t{i}": (rng.random(s) > 0.3).astype(dt) for i, (s, dt) in
              enumerate(zip([(3, 4), (4, 5), (5, 2)], dtypes))}
    want = np.einsum("ij,jk,kl->il", *arrays.values())
    got = go.compile(g, backend=backend, cache=False)(**arrays)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def _numpy_test_equations() -> list[str]:
    """The einsum equations of NumPy's own test suite (``numpy/_core/tests/test_einsum.py``,
    shipped with NumPy), valid and invalid, as written there; empty where it is not
    installed."""
    import pathlib

    path = pathlib.Path(np.__file__).parent / "_core" / "tests" / "test_einsum.py"
    if not path.exists():
        return []
    found = re.findall(r"""["']([A-Za-z.,\s]*->[A-Za-z.\s]*|[A-Za-z.]+(?:,[A-Za-z.]+)+)["']""",
                       path.read_text())
    return sorted({e for e in found if any(c.isalpha() for c in e)})


NUMPY_EQUATIONS = _numpy_test_equations()


def _operand_shapes(eq: str, rng) -> list[tuple[int, ...]]:
    """Operand shapes for ``eq``: each label 1-3 long (1 broadcasts, as NumPy allows), an
    ellipsis 0-2 dims of 1-3, each operand taking its trailing share of them."""
    labels = {c: int(rng.integers(1, 4)) for c in eq if c.isalpha()}
    ell = [int(d) for d in rng.integers(1, 4, size=int(rng.integers(0, 3)))]
    shapes = []
    for term in eq.split("->")[0].replace(" ", "").split(","):
        head, dots, tail = term.partition("...")
        extra = ell[len(ell) - int(rng.integers(0, len(ell) + 1)):] if dots else []
        shapes.append(tuple([labels[c] for c in head] + extra + [labels[c] for c in tail]))
    return shapes


@pytest.mark.skipif(not NUMPY_EQUATIONS, reason="NumPy's tests are not installed")
@pytest.mark.parametrize("backend, dtype", [("numba", "float64"), ("numba", "int64"),
                                            ("numba", "complex64"), ("numpy", "float32"),
                                            ("numpy", "bool")])
def test_numpys_own_equations_run_as_numpy_runs_them(backend, dtype):
    """Every equation of NumPy's einsum tests (ellipses, traces, scalars, spaces, size-1
    broadcasting; invalid ones too) through ``go.contract``: what NumPy rejects is a
    GraphError; the rest has NumPy's shape and dtype, integers and bools exactly its values,
    floats within rounding of the float64 (complex128) result."""
    rng = np.random.default_rng(sum(map(ord, backend + dtype)))
    checked = refused = 0
    for eq in NUMPY_EQUATIONS:
        shapes = _operand_shapes(eq, rng)
        arrays = [(rng.normal(size=s) * 2).astype(dtype) if dtype != "bool"
                  else rng.normal(size=s) > 0 for s in shapes]
        if dtype.startswith("complex"):
            arrays = [a + 1j * rng.normal(size=a.shape).astype(dtype) for a in arrays]
        try:
            want = np.einsum(eq, *arrays)
        except ValueError:
            with pytest.raises(go.GraphError):
                go.contract(eq, *arrays, backend=backend)
            refused += 1
            continue
        got = go.contract(eq, *arrays, backend=backend)
        assert np.shape(got) == np.shape(want) and got.dtype == np.asarray(want).dtype, eq
        if dtype in ("int64", "bool"):
            np.testing.assert_array_equal(got, want, err_msg=eq)
        else:
            wide = np.einsum(eq, *[a.astype(np.complex128 if a.dtype.kind == "c"
                                            else np.float64) for a in arrays])
            scale = np.einsum(eq, *[np.abs(a).astype(np.float64) for a in arrays])
            tol = 8 * len(arrays) * np.finfo(dtype).eps * (np.asarray(scale) + 1)
            assert np.all(np.abs(got - wide) <= tol), eq
        checked += 1
    assert checked > 100 and refused >= 3     # (ij->jij, i->ij, j->..j, ...)


def test_a_steps_first_use_renaming_is_the_general_one():
    """``first_use_equation`` of one to three terms renames in one pass over the equation:
    the same equation as the general renaming (by ``str.translate``), on labels past the
    ASCII letters and ``get_symbol``'s non-letters too."""
    first_use_equation = E.first_use_equation
    rng = np.random.default_rng(11)
    for _ in range(500):
        pool = [get_symbol(int(i)) for i in rng.choice(300, size=int(rng.integers(1, 40)),
                                                      replace=False)]
        terms = ["".join(rng.choice(pool, size=int(rng.integers(0, 7))))
                 for _ in range(int(rng.integers(1, 4)))]
        output = "".join(rng.choice(pool, size=int(rng.integers(0, min(4, len(pool)))),
                                    replace=False))
        general = first_use_equation(terms, output, symbol=lambda i: E.label(i))
        assert first_use_equation(terms, output) == general, (terms, output)
