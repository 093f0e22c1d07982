"""Contract a tensor network with graphopt: the norm of a periodic MPS and the expectation
value of a local operator, each one einsum over dozens of tensors.

graphopt merges the network into one contraction, picks the order with opt_einsum,
splits it into pairwise steps and plans the memory; the report shows the FLOPs saved.

Run: python examples/tensor_network.py
"""

import numpy as np
import opt_einsum

import graphopt as go

SITES, BOND, PHYS = 24, 8, 2


def label(i: int) -> str:
    """Index labels beyond the 52 ASCII letters are other Unicode letters, as in opt_einsum."""
    return opt_einsum.get_symbol(i)


def ring_terms(offset: int, spins: list[str]) -> list[str]:
    """Terms 'left spin right' of a periodic chain whose bond labels start at ``offset``."""
    return [label(offset + i) + spins[i] + label(offset + (i + 1) % SITES) for i in range(SITES)]


rng = np.random.default_rng(1)
mps = [(rng.standard_normal((BOND, PHYS, BOND)) + 1j * rng.standard_normal((BOND, PHYS, BOND)))
       / np.sqrt(2 * BOND * PHYS) for _ in range(SITES)]
sz = np.diag([1.0, -1.0]).astype(complex)

g = go.Graph("mps")
a = [g.input(f"a{i}", (BOND, PHYS, BOND), "complex128") for i in range(SITES)]
op = g.input("op", (PHYS, PHYS), "complex128")
spins = [label(2 * SITES + i) for i in range(SITES)]
ket, bra = ring_terms(0, spins), ring_terms(SITES, spins)
norm = go.einsum(",".join(ket + bra) + "->", *a, *[t.conj() for t in a]).real
# <psi| Z_0 |psi>: the bra's first spin index is replaced by a new label joined through op
s0 = label(3 * SITES)
bra_z = [bra[0].replace(spins[0], s0)] + bra[1:]
expect = go.einsum(",".join(ket + bra_z + [spins[0] + s0]) + "->", *a,
                   *[t.conj() for t in a], op).real
g.output({"norm": norm, "z0": expect / norm})

plan = go.compile(g)
inputs = {f"a{i}": t for i, t in enumerate(mps)} | {"op": sz}
out = plan(**inputs)
print(f"<psi|psi> = {out['norm']:.6e}   <Z_0> = {out['z0']:.6f}")
print(plan.report)

# The same numbers from a transfer-matrix product in NumPy.
m = np.eye(BOND * BOND, dtype=complex)
mz = np.eye(BOND * BOND, dtype=complex)
for i, t in enumerate(mps):
    e = np.einsum("asb,csd->acbd", t, t.conj()).reshape(BOND * BOND, -1)
    ez = np.einsum("asb,st,ctd->acbd", t, sz if i == 0 else np.eye(PHYS), t.conj())
    m, mz = m @ e, mz @ ez.reshape(BOND * BOND, -1)
ref_norm = np.trace(m).real
ref_z0 = np.trace(mz).real / ref_norm
print(f"NumPy transfer matrices: <psi|psi> = {ref_norm:.6e}   <Z_0> = {ref_z0:.6f}")
assert np.isclose(out["norm"], ref_norm, rtol=1e-9) and np.isclose(out["z0"], ref_z0)

# go.contract is a drop-in for opt_einsum.contract on any one network, e.g. 24 matrices
# forming two loops that share the index a.
grid = [rng.standard_normal((3, 3)) / 3 for _ in range(24)]
eq = "ab,bc,cd,de,ef,fg,gh,ha,ai,ij,jk,kl,lm,mn,no,op,pq,qr,rs,st,tu,uv,vw,wa->"
print("grid contraction:", go.contract(eq, *grid), "opt_einsum:",
      opt_einsum.contract(eq, *grid))
