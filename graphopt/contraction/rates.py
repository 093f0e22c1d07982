"""A backend's machine-rate model: the one table the contraction library's choices read.

Each backend names one ``Rates`` (``Backend.rates``): ``HOST_RATES`` for the backends that
compute on the host (numpy, numba, dask), ``DEVICE_RATES`` for a GPU (cupy). The compile
hands it to the passes (``PassContext.rates``); from it come

- each contraction step's form, GEMM or ``np.einsum`` (``step_form``), the one rule the
  contraction program's steps and the pairwise einsum nodes follow on every backend;
- the predicted seconds of each form, which order the candidates a kernel reports and
  times at ``opt_level=3`` (``gemm_seconds``, ``einsum_seconds``);
- the combo cost (FLOPs plus 64 per element written) run a second, which sizes the default
  path-search budget and weighs sliced paths against unsliced ones (``combo``);
- whether the memory a contraction runs in holds its Python objects (``device``: no).

Only the rates' ratios matter to a choice: they order forms and size budgets, and no figure
printed as a measurement comes from them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

# A pair contraction of fewer multiply-adds than this runs faster on np.einsum than as a
# GEMM on the host: the GEMM's views and its BLAS call cost more than np.einsum's whole loop.
SMALL_PAIR_WORK = 128


@dataclass(frozen=True, eq=False)
class Rates:
    """The rates a backend runs contractions at (see the module docstring).

    ``gemm_flops``: a BLAS GEMM's FLOP rate per dtype; in a dtype without BLAS a GEMM's
    product is ``np.einsum``'s over its matrices, at ``einsum_gemm_flops``.
    ``einsum_flops``: ``np.einsum``'s own loops. ``copy_bytes``: bytes a second a transpose
    copies. ``gemm_call``/``einsum_call``: seconds each form costs per call.
    ``small_pair_work``: below this many multiply-adds a pair runs on ``np.einsum`` (0: every
    pair that maps onto a GEMM is one). ``einsum_when_nothing_summed``: in a BLAS dtype, a
    pair that sums nothing (an outer or broadcast product, a GEMM of K = 1) runs on
    ``np.einsum``, which writes it faster than a batched GEMM. ``slice_step``: seconds a
    sliced contraction's step costs per slice beside its FLOPs (the loop, the views).
    ``device``: the contraction runs in a device's memory, which holds its arrays only.
    Compared and hashed by identity: a backend's table is one object, and what is planned
    with it is memoized by it."""

    combo: float
    gemm_flops: Mapping[str, float] = field(default_factory=dict)
    einsum_gemm_flops: float = 3e9
    einsum_flops: float = 1.3e9
    copy_bytes: float = 20e9
    gemm_call: float = 2.2e-6
    einsum_call: float = 2.0e-6
    small_pair_work: int = SMALL_PAIR_WORK
    einsum_when_nothing_summed: bool = True
    slice_step: float = 5e-6
    device: bool = False

    def einsum_is_faster(self, work: int, gemm=None, blas: bool = True) -> bool:
        """Whether ``np.einsum`` runs a pair of ``work`` multiply-adds (the product of its
        labels' sizes) faster than ``gemm`` (a ``program.gemm.Gemm``, or None where the size
        rule alone decides): below ``small_pair_work``, or in a BLAS dtype where the GEMM
        would sum nothing. In a dtype without BLAS the size rule alone: np.einsum over a
        step's own labels may fill buffers of sizes NumPy picks, which a predicted peak can
        only bound, where the GEMM's product allocates what is counted exactly."""
        return work < self.small_pair_work or (
            self.einsum_when_nothing_summed and blas and gemm is not None and
            gemm.bmkn[2] == 1)

    def step_form(self, work: int, gemm, blas: bool) -> str:
        """``"gemm"`` or ``"einsum"``: the form of a pair step of ``work`` multiply-adds
        whose labels map onto ``gemm`` (None: no GEMM maps them)."""
        return "gemm" if gemm is not None and not self.einsum_is_faster(work, gemm, blas) \
            else "einsum"

    def gemm_seconds(self, gemm, dtype: str, blas: bool, copied_bytes: int) -> float:
        """Predicted seconds of ``gemm`` in ``dtype`` copying ``copied_bytes`` of
        transposes."""
        B, M, K, N = gemm.bmkn
        rate = self.gemm_flops.get(dtype, self.einsum_gemm_flops) if blas else \
            self.einsum_gemm_flops
        return self.gemm_call + 2.0 * B * M * K * N / rate + copied_bytes / self.copy_bytes

    def einsum_seconds(self, work: int) -> float:
        """Predicted seconds of ``np.einsum`` over ``work`` multiply-adds."""
        return self.einsum_call + 2.0 * work / self.einsum_flops

    def seconds(self, combo: float) -> float:
        """Seconds a path of combo cost ``combo`` takes at this backend's rate."""
        return combo / self.combo

    def sliced_seconds(self, flops: int, n_slices: int, n_terms: int) -> float:
        """Predicted seconds of a contraction of ``n_terms`` operands in ``n_slices`` slices
        costing ``flops`` in all: the FLOPs at ``combo``, and ``slice_step`` per step of
        every slice."""
        return flops / self.combo + n_slices * max(1, n_terms - 1) * self.slice_step


def _flops(single: float) -> Mapping[str, float]:
    """A GEMM rate per BLAS dtype: single precision (real and complex) at ``single``,
    double at half of it."""
    return MappingProxyType({"float32": single, "complex64": single,
                             "float64": single / 2, "complex128": single / 2})


# The host's: a 2-core x86 machine's BLAS, np.einsum and copies. The combo rate is
# conservative (a complex network runs below a real one), so that the default path-search
# budget is up to a few times a path's run time, never a fraction of it.
HOST_RATES = Rates(combo=1e10, gemm_flops=_flops(150e9))

# A GPU's (an H100-class card): cuBLAS's call costs microseconds where cupy.einsum parses its
# equation in Python first, so every pair that maps onto a GEMM is one, however small. The
# combo rate is conservative as the host's is: small networks run at a fraction of it (a
# launch per step).
DEVICE_RATES = Rates(combo=2e12, gemm_flops=_flops(50e12), einsum_gemm_flops=5e12,
                     einsum_flops=5e12, copy_bytes=3.0e12, gemm_call=1e-5, einsum_call=5e-5,
                     small_pair_work=0, einsum_when_nothing_summed=False, device=True)


def host_rates() -> Rates:
    """``HOST_RATES``, read when asked (a test may swap the host's table)."""
    return HOST_RATES


def pair_work(sizes: Mapping[str, int]) -> int:
    """The multiply-adds of a pair step over labels of ``sizes``: the product of them all."""
    return math.prod(sizes.values())
