"""The contraction program (graphopt/contraction/program/run.py): einsum along a path, one GEMM
or np.einsum per step, against NumPy's einsum in float64 or exactly, on equations from
opt_einsum's generator and on the cases a step must not take for a GEMM."""

import tracemalloc

import numpy as np
import opt_einsum
import pytest
from opt_einsum.testing import rand_equation

from graphopt.analysis.call_bytes import GEMM_VIEW_BYTES
from graphopt.analysis.liveness import ALIGN
from graphopt.contraction.program.build import ARENA_COPY_BYTES, UNSHARED_ARENA_BYTES, build_program
from graphopt.contraction.program.einsum_bytes import np_einsum_bytes
from graphopt.contraction.program.gemm import _reduced_strides, reshaped_strides
from graphopt.contraction.program.run import PathContraction
from graphopt.contraction.rates import SMALL_PAIR_WORK
from graphopt.ir.einsum import split


def _arrays(shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    out = []
    for s in shapes:
        if np.dtype(dtype).kind == "b":
            out.append(rng.random(s) < 0.5)
        elif np.dtype(dtype).kind in "iu":
            out.append(rng.integers(0, 4, size=s).astype(dtype))
        elif np.dtype(dtype).kind == "c":
            out.append((rng.normal(size=s) + 1j * rng.normal(size=s)).astype(dtype))
        else:
            out.append(rng.normal(size=s).astype(dtype))
    return out


def _reference(eq, arrays):
    """np.einsum in float64 (complex128) for floats, exact for integers and bool."""
    kind = arrays[0].dtype.kind
    wide = {"f": np.float64, "c": np.complex128}.get(kind)
    return np.einsum(eq, *(a.astype(wide) if wide else a for a in arrays))


def _check(eq, arrays, path, **kw):
    got = PathContraction(eq, path)(*arrays, **kw)
    ref = _reference(eq, arrays)
    assert got.shape == ref.shape and got.dtype == np.result_type(*arrays)
    if arrays[0].dtype.kind in "fc":
        tol = 64 * np.finfo(arrays[0].dtype).eps   # of the sum of |terms|, over a few steps
        scale = np.sum(np.abs(_reference(eq, [np.abs(a) for a in arrays])))
        assert np.max(np.abs(got - ref), initial=0) <= tol * max(scale, 1)
    else:
        np.testing.assert_array_equal(got, ref)
    return got


# Every test here plans a GEMM for every pair step that maps onto one, however small (the
# arrays are), except where a test asks for the default (conftest's ``small_steps``).
pytestmark = pytest.mark.usefixtures("gemm_every_step")


@pytest.mark.parametrize("form", ["gemm", "small steps on np.einsum"])
@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("optimize", ["greedy", "optimal"])
def test_random_equations_along_opt_einsum_paths(seed, optimize, form, request):
    if form != "gemm":
        request.getfixturevalue("small_steps")
    eq, shapes = rand_equation(3 + seed % 5, 2 + seed % 3, seed=seed, d_min=1, d_max=4,
                               n_out=seed % 3, return_size_dict=False)
    dtype = ["float64", "float32", "complex128", "complex64", "int64", "int8"][seed % 6]
    arrays = _arrays(shapes, dtype, seed)
    path, _ = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=optimize)
    _check(eq, arrays, path)


@pytest.mark.parametrize("eq, shapes, path", [
    ("iij,jk,kl->il", [(3, 3, 4), (4, 5), (5, 2)], [(0, 1), (0, 1)]),       # a diagonal
    ("ij,jk,kl->", [(2, 3), (3, 4), (4, 5)], [(1, 2), (0, 1)]),            # a full sum
    ("ij,jk,kl->li", [(2, 3), (3, 4), (4, 5)], [(0, 2), (0, 1)]),          # an outer step
    ("ab,ab,ab->ab", [(3, 4), (3, 4), (3, 4)], [(0, 1), (0, 1)]),          # batch only
    ("bij,bjk,bkl->bil", [(2, 3, 4), (2, 4, 5), (2, 5, 3)], [(0, 1), (0, 1)]),
    ("ij,jk,kl->il", [(2, 1), (3, 4), (4, 5)], [(0, 1), (0, 1)]),          # size-1 broadcast
    ("ij,jk,kl->il", [(2, 3), (3, 0), (0, 5)], [(0, 1), (0, 1)]),          # size 0
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], [(0, 1, 2)]),               # one 3-way step
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], [(0,), (0, 1), (0, 1)]),    # a 1-operand step
])
@pytest.mark.parametrize("dtype", ["float64", "complex64", "float16", "int16", "bool"])
def test_steps_that_are_not_plain_gemms(eq, shapes, path, dtype):
    _check(eq, _arrays(shapes, dtype, 0), path)


def test_gemm_steps_in_every_dtype_and_einsum_steps_where_labels_broadcast():
    # a dtype BLAS does not multiply has its GEMMs' products run by einsum_matmul
    terms, out = split("ij,jk,kl->il")
    shapes = [(2, 3), (3, 4), (4, 5)]
    for dtype in ("float32", "float16", "int64", "bool"):
        assert all(s.gemm is not None for s in build_program(terms, out, [(0, 1), (0, 1)],
                                                            shapes, dtype).steps)
    broadcast = build_program(terms, out, [(0, 1), (0, 1)], [(2, 1), (3, 4), (4, 5)],
                             "float64").steps
    assert broadcast[0].gemm is None and broadcast[1].gemm is not None


def test_pair_steps_smaller_than_small_pair_work_run_on_np_einsum(small_steps):
    # 'ij,jk->ik' of 4x4 by 4x4 is 64 multiply-adds: np.einsum; 'ik,kl->il' of 4x4 by 4x16,
    # 256: a GEMM
    terms, out = split("ij,jk,kl->il")
    assert SMALL_PAIR_WORK == 128
    steps = build_program(terms, out, [(0, 1), (0, 1)], [(4, 4), (4, 4), (4, 16)],
                         "float64").steps
    assert steps[0].gemm is None and steps[1].gemm is not None
    # np.einsum's own iterator and buffers (it sums b) are the step's scratch
    assert steps[0].scratch == np_einsum_bytes(["ab", "bc"], "ac", dict.fromkeys("abc", 4), 8,
                                               c_contiguous=True)
    arrays = _arrays([(4, 4), (4, 4), (4, 16)], "float64", 5)
    _check("ij,jk,kl->il", arrays, [(0, 1), (0, 1)])


def test_out_receives_the_result_where_it_can():
    eq, path = "ij,jk,kl->il", [(0, 1), (0, 1)]
    arrays = _arrays([(2, 3), (3, 4), (4, 5)], "float64", 1)
    out = np.full((2, 5), np.nan)
    assert _check(eq, arrays, path, out=out) is out
    strided = np.full((5, 2), np.nan).T            # not C-contiguous: a new array instead
    got = _check(eq, arrays, path, out=strided)
    assert got is not strided and np.isnan(strided).all()
    wrong = np.zeros((2, 5), np.float32)
    assert _check(eq, arrays, path, out=wrong) is not wrong


def test_matmul_runs_every_gemm_and_inputs_are_untouched():
    eq, path = "abc,cd,de->abe", [(1, 2), (0, 1)]
    arrays = _arrays([(2, 3, 4), (4, 5), (5, 6)], "float64", 2)
    before = [a.copy() for a in arrays]
    calls = []

    def matmul(a, b, c):
        calls.append((a.shape, b.shape))
        return np.matmul(a, b, out=c)

    _check(eq, arrays, path, matmul=matmul)
    assert len(calls) == 2
    for a, b in zip(arrays, before):
        np.testing.assert_array_equal(a, b)


def test_a_program_is_planned_once_per_shapes_and_pickles_without_it():
    import pickle

    pc = PathContraction("ij,jk,kl->il", [(1, 2), (0, 1)])
    a = _arrays([(2, 3), (3, 4), (4, 5)], "float64", 3)
    b = _arrays([(3, 3), (3, 4), (4, 5)], "float64", 3)
    before = len(pc._programs)
    pc(*a), pc(*a), pc(*b)
    assert len(pc._programs) - before <= 2
    # another contraction of the same path and forms runs what this one planned
    other = PathContraction("ij,jk,kl->il", [(1, 2), (0, 1)])
    assert other._programs is pc._programs
    state = pc.__getstate__()
    assert "_programs" not in state and "_idle" not in state
    clone = pickle.loads(pickle.dumps(pc))
    assert np.allclose(clone(*a), pc(*a))


def test_intermediates_share_an_arena_kept_between_calls_and_never_returned():
    # a chain: step k's result is read by step k + 1 only, so two buffers alternate
    # (above UNSHARED_ARENA_BYTES in all: 6 x 32 KiB)
    n = 8
    eq = ",".join(f"{chr(97 + i)}{chr(98 + i)}" for i in range(n)) + "->a" + chr(97 + n)
    shapes = [(64, 64)] * n
    path = [(0, 1)] + [(0, n - 2 - k) for k in range(n - 2)]
    terms, out = split(eq)
    prog = build_program(terms, out, path, shapes, "float64")
    offsets = [s.offset for s in prog.steps]
    assert offsets[-1] is None and len(set(offsets[:-1])) == 2
    assert prog.arena_bytes == 2 * 64 * 64 * 8
    pc = PathContraction(eq, path, keep_arenas=True)
    arrays = _arrays(shapes, "float64", 4)
    first = pc(*arrays)
    assert pc.idle_arena_bytes() == prog.arena_bytes
    second = pc(*[a * 2 for a in arrays])
    assert not np.shares_memory(first, second)
    np.testing.assert_allclose(second, first * 2 ** n, rtol=1e-12)
    pc.release_arenas()
    assert pc.idle_arena_bytes() == 0
    assert PathContraction(eq, path)(*arrays) is not None
    shared = PathContraction(eq, path)
    shared(*arrays)
    assert shared.idle_arena_bytes() == 0


def test_gemm_operand_copies_are_made_in_the_arena_kept_between_calls():
    # 'ijk,jil->kl': B's matrix (ij, l) is no view of a C-contiguous jil, so run_gemm copies
    # it; a copy of at least ARENA_COPY_BYTES is made in the program's arena (a buffer living
    # within its step), so with the arena kept a call allocates its result and Python
    # objects, not the copy
    eq, shapes = "ijk,jil->kl", [(16, 16, 32), (16, 16, 72)]
    terms, out = split(eq)
    prog = build_program(terms, out, [(0, 1)], shapes, "float64")
    step = prog.steps[0]
    copy_bytes = 16 * 16 * 72 * 8
    assert copy_bytes >= ARENA_COPY_BYTES
    assert step.gemm is not None and step.copies == (None, (0, (16, 16, 72)))
    assert prog.arena_bytes == copy_bytes and step.scratch == GEMM_VIEW_BYTES   # views only
    assert prog.peak_bytes() < copy_bytes + 4096
    pc = PathContraction(eq, [(0, 1)], keep_arenas=True)
    arrays = _arrays(shapes, "float64", 6)
    before = [a.copy() for a in arrays]
    first = pc(*arrays)
    tracemalloc.start()
    try:
        second = pc(*arrays)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 72 * 8 + 4096 < copy_bytes, peak
    assert not np.shares_memory(first, second)
    assert all(np.array_equal(a, b) for a, b in zip(arrays, before))
    assert np.array_equal(first, second)
    np.testing.assert_allclose(second, np.einsum(eq, *arrays), rtol=1e-12, atol=1e-12)
    # a ragged slice's program copies in the full slice's places where it fits
    ragged = build_program(terms, out, [(0, 1)], [(16, 15, 32), (15, 16, 72)], "float64",
                          layout_of=prog)
    assert ragged.steps[0].copies == (None, (0, (16, 15, 72)))
    assert ragged.arena_bytes == prog.arena_bytes and \
        ragged.steps[0].scratch == GEMM_VIEW_BYTES
    # smaller copies are scratch: NumPy's, from memory malloc reuses
    small = build_program(terms, out, [(0, 1)], [(16, 16, 32), (16, 16, 24)], "float64")
    assert small.steps[0].copies is None and small.arena_bytes == 0
    assert small.steps[0].scratch == 16 * 16 * 24 * 8 + GEMM_VIEW_BYTES


def test_tiny_intermediates_each_get_their_own_place_in_the_arena():
    # the same chain at 4x4: 6 intermediates of 128 bytes, below UNSHARED_ARENA_BYTES, are
    # laid out back to back (aligned), not planned for sharing
    n = 8
    eq = ",".join(f"{chr(97 + i)}{chr(98 + i)}" for i in range(n)) + "->a" + chr(97 + n)
    path = [(0, 1)] + [(0, n - 2 - k) for k in range(n - 2)]
    terms, out = split(eq)
    prog = build_program(terms, out, path, [(4, 4)] * n, "float64")
    offsets = [s.offset for s in prog.steps[:-1]]
    assert offsets == [k * ALIGN * 2 for k in range(n - 2)]
    assert prog.arena_bytes == (n - 2) * 128 <= UNSHARED_ARENA_BYTES
    arrays = _arrays([(4, 4)] * n, "float64", 5)
    np.testing.assert_allclose(PathContraction(eq, path, keep_arenas=True)(*arrays),
                               np.linalg.multi_dot(arrays), rtol=1e-12)


def test_a_last_step_that_permutes_an_intermediate_returns_a_copy():
    # the last step only transposes the intermediate before it
    pc = PathContraction("ij,jk,kl->li", [(0, 1), (0, 1), (0,)], keep_arenas=True)
    arrays = _arrays([(2, 3), (3, 4), (4, 5)], "float64", 5)
    a = pc(*arrays)
    b = pc(*[x * 2 for x in arrays])
    np.testing.assert_allclose(b, 8 * a, rtol=1e-12)


# ------------------------------------------------------------------- what a call allocates


def _strided(rng, shape):
    """A float64 array of ``shape`` laid out as a random transpose and step of a larger one."""
    order = rng.permutation(len(shape))
    steps = rng.integers(1, 3, size=len(shape))
    base = np.zeros(tuple(int(shape[i] * steps[i]) for i in order))
    view = base[tuple(slice(None, None, int(steps[i])) for i in order)]
    return view.transpose(np.argsort(order))


def _strided_copy(rng, a):
    v = _strided(rng, a.shape)
    v[...] = a
    return v


def test_reshaped_strides_tell_a_view_as_numpy_does():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(400):
        shape = tuple(int(d) for d in rng.integers(1, 4, size=rng.integers(1, 5)))
        a = _strided(rng, shape)
        perm = tuple(int(p) for p in rng.permutation(len(shape)))
        t = a.transpose(perm)
        lo, hi = sorted(int(c) for c in rng.integers(0, len(shape) + 1, size=2))
        new = tuple(int(np.prod(t.shape[i:j])) for i, j in ((0, lo), (lo, hi), (hi, None)))
        if rng.integers(0, 2):                  # M, K, or batch, M, K as run_gemm groups
            new = (new[0] * new[1], new[2])
        strides = [s // 8 for s in a.strides]
        assert (reshaped_strides(shape, strides, perm, new) is not None) == \
            np.shares_memory(t.reshape(new), a), (shape, a.strides, perm, new)
        checked += 1
    assert checked == 400


def test_a_reduction_is_laid_out_in_its_operand_s_stride_order():
    rng = np.random.default_rng(1)
    for _ in range(200):
        shape = tuple(int(d) for d in rng.integers(2, 5, size=rng.integers(2, 5)))
        a = _strided(rng, shape)
        drop = tuple(sorted(rng.choice(len(shape), size=rng.integers(1, len(shape)),
                                       replace=False).tolist()))
        got = a.sum(axis=drop)
        new_shape, strides = _reduced_strides(shape, [s // 8 for s in a.strides], drop)
        assert new_shape == got.shape
        assert tuple(8 * s for s in strides) == got.strides, (shape, a.strides, drop)


def _measured(pc, arrays, out):
    pc.release_arenas()
    tracemalloc.start()
    try:
        pc(*arrays, out=out)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("seed", range(6))
def test_a_call_allocates_what_its_program_predicts(seed):
    # opt_einsum's random equations at sizes where arrays, not Python objects, dominate;
    # operands C-contiguous or strided views, result into ``out``: tracemalloc's peak within
    # 10 % of Program.peak_bytes, with the GEMMs' operand copies counted
    rng = np.random.default_rng(seed)
    eq, shapes = rand_equation(8, 4, seed=seed, d_min=4, d_max=8)
    arrays = [rng.normal(size=s) for s in shapes]
    if seed % 2:
        arrays = [_strided_copy(rng, a) for a in arrays]
    path = opt_einsum.contract_path(eq, *arrays, optimize="greedy")[0]
    pc = PathContraction(eq, path, keep_arenas=True)
    ref = pc(*arrays)
    out = np.empty_like(ref)
    strides = [[s // 8 for s in a.strides] for a in arrays]
    prog = pc.program([a.shape for a in arrays], "float64", strides)
    assert prog.peak_bytes() > 2**16   # arrays, not Python objects, dominate
    got = _measured(pc, arrays, out)
    assert abs(got - prog.peak_bytes()) <= 0.1 * prog.peak_bytes(), (got, prog.peak_bytes())
    np.testing.assert_allclose(out, opt_einsum.contract(eq, *arrays, optimize=path), rtol=1e-9)


@pytest.mark.parametrize("eq, shapes", [
    ("abcd,bdef->acef", [(3, 4, 2, 5), (4, 5, 3, 2)]),   # both operands copied, C direct
    ("dcfb,fbed->cfe", [(2, 3, 4, 5), (4, 5, 3, 2)]),    # and the product permuted
    ("abc,cd->abd", [(4, 5, 6), (6, 7)]),                # free views
    ("bac,bcd->bad", [(3, 4, 5), (3, 5, 2)]),            # batched
])
def test_a_gemm_step_holds_no_more_than_its_scratch_its_views_included(eq, shapes):
    """A GEMM step's scratch counts the views ``run_gemm`` holds while its product runs
    (``GEMM_VIEW_BYTES``): on a short program the step at the peak is most of the call's
    objects, which the flat per-step allowance under-counted (a 6-step sliced network
    measured 1.15x its prediction, over its limit)."""
    (ta, tb), out = split(eq)
    prog = build_program([ta, tb], out, [(0, 1)], shapes, np.float64)
    (step,) = prog.steps
    assert step.gemm is not None
    a, b = (np.ones(s) for s in shapes)
    for target in (np.empty(step.shape), None):
        step.run([a, b], target, None, None, np, None)     # warm
        tracemalloc.start()
        try:
            res = step.run([a, b], target, None, None, np, None)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        del res
        counted = step.scratch if target is not None else step.scratch_new
        assert peak <= counted + 64, (peak, counted)
        assert peak >= counted - GEMM_VIEW_BYTES, (peak, counted)


def test_labels_of_size_one_are_dropped_so_intermediates_stay_within_numpy_s_dims():
    # two operands of 40 size-1 labels each and no shared one: their outer product along
    # this path is an 80-dimensional intermediate, which NumPy cannot make; a label that
    # takes one value changes no value, so the program contracts without it
    from opt_einsum import get_symbol

    a = "".join(get_symbol(i) for i in range(40))
    b = "".join(get_symbol(40 + i) for i in range(40))
    x, y, z = get_symbol(100), get_symbol(101), get_symbol(102)
    eq = f"{a}{x},{b}{y},{x}{y}{z},{a[:3]}->{z}{a[:2]}"
    shapes = [(1,) * 40 + (3,), (1,) * 40 + (4,), (3, 4, 5), (1, 1, 1)]
    arrays = _arrays(shapes, "float64", 7)
    pc = PathContraction(eq, [(0, 1), (0, 1), (0, 1)])
    got = pc(*arrays)
    squeezed = [v.reshape([d for d in v.shape if d != 1]) for v in arrays]
    want = np.einsum("x,y,xyz->z", *squeezed[:3]) * arrays[3].item()
    assert got.shape == (5, 1, 1)
    np.testing.assert_allclose(got.reshape(5), want, rtol=1e-12)
    out = np.full((5, 1, 1), np.nan)
    assert pc(*arrays, out=out) is out
    np.testing.assert_allclose(out.reshape(5), want, rtol=1e-12)
    # a label of size 1 on one operand and 4 on another broadcasts: kept
    eq2, s2 = "ab,bc,cd->ad", [(3, 1), (4, 5), (5, 2)]
    arrays2 = _arrays(s2, "float64", 8)
    got2 = PathContraction(eq2, [(0, 1), (0, 1)])(*arrays2)
    np.testing.assert_allclose(got2, np.einsum(eq2, *arrays2), rtol=1e-12)


def test_another_array_module_runs_the_steps_the_arena_and_the_slices(small_steps):
    # the cupy backend runs a network's path with ``xp=cupy``: the arena, the promoted
    # operands, the einsum steps and a sliced loop's result come from ``xp`` (here NumPy
    # behind a counting stand-in; tests/backends/test_cupy_networks.py runs cupy itself)
    from types import SimpleNamespace

    from graphopt.contraction.slicing.run import sliced_contract

    calls = {"empty": 0, "einsum": 0, "asarray": 0}

    def counted(name):
        def f(*a, **k):
            calls[name] += 1
            return getattr(np, name)(*a, **k)
        return f
    xp = SimpleNamespace(empty=counted("empty"), einsum=counted("einsum"),
                         asarray=counted("asarray"), copyto=np.copyto, array=np.array,
                         may_share_memory=np.may_share_memory, matmul=np.matmul)
    eq, shapes = rand_equation(8, 3, seed=4, d_min=2, d_max=4)
    arrays = _arrays(shapes, "float64", 4)
    path = opt_einsum.contract_path(eq, *arrays, optimize="greedy")[0]
    expected = opt_einsum.contract(eq, *arrays, optimize=path)
    pc = PathContraction(eq, path, keep_arenas=True, xp=xp)
    gemms = []
    got = pc(*arrays, matmul=lambda a, b, c: gemms.append(1) or np.matmul(a, b, out=c))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    prog = next(iter(pc._programs.values()))
    n_einsum = sum(s.gemm is None for s in prog.steps)
    assert calls["einsum"] == n_einsum and len(gemms) == len(prog.steps) - n_einsum
    # the arena (kept for the next call), and any product made outside it
    assert prog.arena_bytes > 0 and calls["asarray"] == len(arrays) and calls["empty"] >= 1
    assert pc.idle_arena_bytes() >= prog.arena_bytes
    # on a device every pair a GEMM maps is one, however small (no einsum parsed per call)
    small, small_shapes = rand_equation(8, 3, seed=4, d_min=2, d_max=2)
    small_path = opt_einsum.contract_path(small, *_arrays(small_shapes, "float64", 4))[0]
    on_host = PathContraction(small, small_path).program(small_shapes, "float64")
    on_device = PathContraction(small, small_path, xp=xp).program(small_shapes, "float64")
    assert sum(s.gemm is None for s in on_host.steps) >= 5
    assert all(s.gemm is not None for s in on_device.steps)
    sizes = dict(zip("".join(split(eq)[0]), [d for s in shapes for d in s]))
    label = max(sizes, key=sizes.get)
    sliced = sliced_contract(eq, path, [label], arrays, contraction=pc)
    np.testing.assert_allclose(sliced, expected, rtol=1e-12, atol=1e-12)
