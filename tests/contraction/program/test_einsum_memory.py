"""np.einsum's own memory (graphopt/contraction/program/einsum_bytes.py) against tracemalloc."""

import numpy as np


def test_np_einsum_allocates_within_np_einsum_bytes():
    # tracemalloc's peak of np.einsum (out given) on random pairs: C-contiguous or not,
    # summing or not, four dtypes: never above the bound, and where np_einsum_fills_no_buffer
    # says so (a product that sums nothing, each operand a run of the output's labels),
    # within the iterator's bytes
    import random
    import tracemalloc

    from graphopt.contraction.program.einsum_bytes import (
        NP_EINSUM_ITER_BYTES,
        NP_EINSUM_ITER_BYTES_PER_DIM,
        np_einsum_bytes,
        np_einsum_fills_no_buffer,
    )

    pick, rng = random.Random(3), np.random.default_rng(3)
    free_products = 0
    for _ in range(150):
        labels = "abcdef"[:pick.randint(2, 6)]
        sizes = {c: pick.choice([1, 2, 3, 8, 16]) for c in labels}
        terms = ["".join(pick.sample(labels, pick.randint(1, len(labels)))) for _ in range(2)]
        used = sorted(set("".join(terms)))
        out = "".join(pick.sample(used, pick.randint(0, len(used))))
        if pick.random() < 0.3:          # an outer product of blocks: nothing summed
            out = "".join(dict.fromkeys("".join(terms)))
            cut = pick.randint(1, len(out))
            terms = [out[:cut], out[pick.randint(0, min(cut, len(out) - 1)):]]
        dtype = pick.choice(["float32", "float64", "complex128", "int64"])
        ops = []
        for t in terms:
            a = rng.standard_normal([sizes[c] for c in t]).astype(dtype)
            ops.append(a.T.copy().T if pick.random() < 0.3 else a)   # F-ordered, at times
        eq = ",".join(terms) + "->" + out
        res = np.empty([sizes[c] for c in out], dtype)
        np.einsum(eq, *ops, out=res)
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            np.einsum(eq, *ops, out=res)
            took = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        used_sizes = {c: sizes[c] for c in set("".join(terms))}
        contiguous = all(a.flags.c_contiguous for a in ops)
        bound = np_einsum_bytes(terms, out, used_sizes, np.dtype(dtype).itemsize, contiguous)
        assert took <= bound, (eq, [a.shape for a in ops], dtype, contiguous, took, bound)
        if contiguous and np_einsum_fills_no_buffer(terms, out):   # no buffer was filled
            free_products += 1
            dims = sum(map(len, terms)) + len(out)
            assert took <= NP_EINSUM_ITER_BYTES + NP_EINSUM_ITER_BYTES_PER_DIM * dims, eq
    assert free_products > 5
