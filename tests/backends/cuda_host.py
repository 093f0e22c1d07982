"""Runs generated CUDA programs on the host: a shim makes the stage bodies plain C++
(``__device__`` dropped, ``complex`` = ``std::complex``, cupy's ``float16`` a float that
rounds on construction), g++ compiles the programs once, and each stage runs the way cupy
runs it (ElementwiseKernel: one body per element; ReductionKernel: ``map -> REDUCE ->
POST_MAP`` with cupy's macros). Einsum stages run through the GEMM mapping with NumPy.

Shared by the CUDA generator's tests and the scalar-semantics table's tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from graphopt.backends.cupy import codegen as cg
from graphopt.contraction.program.gemm import gemm_of, run_gemm
from graphopt.ir.einsum_numpy import evaluate as einsum_evaluate

GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ not found: cannot run emitted C on host")

SHIM = r"""
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
using namespace std;
#define __device__
static inline unsigned int __float_as_uint(float x) { unsigned int u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float x; memcpy(&x, &u, 4); return x; }
static inline float __int_as_float(int u) { float x; memcpy(&x, &u, 4); return x; }
static inline double __longlong_as_double(long long u) { double x; memcpy(&x, &u, 8); return x; }
static float shim_f16(float x);
struct float16 { float v; float16() : v(0) {} float16(float x) : v(shim_f16(x)) {}
                 explicit float16(double x) : v(shim_f16((float)x)) {}
                 operator float() const { return v; } };
static float shim_f16(float x) {  // reference rounding, independent of the generated helper
  return (float)(_Float16)x;
}
#include <string>
template <typename T> static vector<T> load(const string& p, size_t n) {
  vector<T> v(n); FILE* f = fopen(p.c_str(), "rb");
  if (n && fread(v.data(), sizeof(T), n, f) != n) exit(3);
  fclose(f); return v; }
template <typename T> static void save(const string& p, const vector<T>& v) {
  FILE* f = fopen(p.c_str(), "wb"); fwrite(v.data(), sizeof(T), v.size(), f); fclose(f); }
"""

HOST = {"float16": ("float", np.float32), "bool": ("unsigned char", np.uint8)}


def _host(dtype):
    """(C type of the file data, numpy dtype written) for a storage dtype."""
    return HOST.get(dtype, (cg.CTYPES[dtype], np.dtype(dtype)))


def _stage_code(t: str, s) -> str:
    decl, loads = [], []
    for k, o in enumerate(s.operands):
        ht, _ = _host(o.dtype)
        loads.append(f"auto _f{k} = load<{ht}>(dir + \"/{t}_in{k}.bin\", n_in);")
        decl.append(f"const {cg.CTYPES[o.dtype]} in{k} = ({cg.CTYPES[o.dtype]})_f{k}[_j];")
    oht, _ = _host(s.dtype)
    oct_ = cg.CTYPES[s.dtype]
    head = [f"static void stage{t}(const string& dir, size_t n_in, size_t n_out) {{"] + \
        ["  " + x for x in loads] + [f"  vector<{oht}> _out(n_out);"]
    if s.kind == "elementwise":
        body = ["  for (size_t _j = 0; _j < n_out; ++_j) {"] + ["    " + x for x in decl] + \
            [f"    {oct_} _o; {oct_}& out0 = _o;", "    {", s.operation, "    }",
             f"    _out[_j] = ({oht})(_o);", "  }"]
    else:
        body = ["  size_t red = n_out ? n_in / n_out : 0;",
                "  for (size_t _o_i = 0; _o_i < n_out; ++_o_i) {",
                f"    _type_reduce _s = _type_reduce({s.identity});",
                "    for (size_t _r = 0; _r < red; ++_r) { size_t _j = _o_i * red + _r;"] + \
            ["      " + x for x in decl] + \
            [f"      _type_reduce _a = static_cast<_type_reduce>({s.map_expr});",
             "      _s = REDUCE(_s, _a); }",
             f"    {oct_} _o; {oct_}& out0 = _o; POST_MAP(_s); _out[_o_i] = ({oht})(_o);", "  }"]
    out = head + body + [f"  save(dir + \"/{t}_out.bin\", _out);", "}"]
    if s.kind == "reduction":
        out = [f"#define REDUCE(a, b) ({s.reduce_expr})",
               f"#define POST_MAP(a) ({s.post_map_expr})",
               f"typedef {s.reduce_type} _type_reduce;"] + out + \
            ["#undef REDUCE", "#undef POST_MAP"]
    return s.preamble + "\n" + "\n".join(out)


def _program_source(progs) -> str:
    """One C++ file for ``progs``: each stage in its own namespace (as each is its own cupy
    module), run as ``exe <program> <stage> <dir> <n_in> <n_out>``."""
    stages = [(f"p{j}s{i}", s) for j, prog in enumerate(progs)
              for i, s in enumerate(prog.stages) if s.kind != "einsum"]
    parts = [SHIM] + [f"namespace {t} {{\n{_stage_code(t, s)}\n}}" for t, s in stages]
    calls = "\n".join(f"  if (st == \"{t}\") {t}::stage{t}(dir, n_in, n_out);"
                      for t, _ in stages)
    parts.append("int main(int argc, char** argv) {\n  string st = string(\"p\") + argv[1] + "
                 "\"s\" + argv[2]; string dir = argv[3];\n  size_t n_in = strtoull(argv[4], 0, "
                 "10), n_out = strtoull(argv[5], 0, 10);\n" + calls + "\n  return 0;\n}")
    return "\n".join(parts)


def _chain(a, chain):
    for op, arg in chain:
        a = a.transpose(arg) if op == "transpose" else \
            np.broadcast_to(a, arg) if op == "broadcast_to" else a.reshape(arg)
    return a


def run_on_host(prog: cg.GroupProgram, args: list, workdir: str) -> np.ndarray:
    """Run ``prog`` the way the cupy backend does, with the C stages compiled by g++."""
    return run_all_on_host([prog], [args], workdir)[0]


def run_all_on_host(progs: list, args_of: list, workdir: str) -> list:
    """``run_on_host`` for many programs, compiled as one g++ run."""
    src = _program_source(progs)
    cpp = os.path.join(workdir, "prog.cpp")
    exe = os.path.join(workdir, "prog")
    with open(cpp, "w") as f:
        f.write(src)
    if any(s.kind != "einsum" for prog in progs for s in prog.stages):
        r = subprocess.run([GXX, "-std=gnu++17", "-O0", "-w", cpp, "-o", exe],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"g++ rejected the generated code:\n{r.stderr[:3000]}\n{src}"
    return [_run_stages(exe, j, prog, args, workdir)
            for j, (prog, args) in enumerate(zip(progs, args_of))]


def _run_stages(exe: str, j: int, prog, args: list, workdir: str) -> np.ndarray:
    consts = [np.asarray(c) for c in prog.constants]
    res = []
    for i, s in enumerate(prog.stages):
        views = []
        for o in s.operands:
            base = {"input": args, "stage": res, "const": consts,
                    "shape": [np.zeros((), bool)]}[o.source][o.index]
            views.append(_chain(np.asarray(base), o.chain))
        if s.kind == "einsum":
            xs = [v.astype(s.dtype) for v in views]
            out = np.empty(s.shape, s.dtype)
            p = gemm_of(s.equation, [v.shape for v in xs]) if len(xs) == 2 else None
            if p is not None:
                run_gemm(np, p, xs[0], xs[1], out)
            else:
                out[...] = einsum_evaluate(s.equation, xs)
            res.append(out * out.dtype.type(s.alpha) if s.alpha != 1 else out)
            continue
        if s.kind == "elementwise":
            views = [np.broadcast_to(v, s.shape) for v in views]
            n_in = n_out = int(np.prod(s.shape, dtype=np.int64))
        else:
            red = [a for a in range(len(s.in_shape)) if a in s.axes]
            keep = [a for a in range(len(s.in_shape)) if a not in s.axes]
            views = [np.broadcast_to(v, s.in_shape).transpose(keep + red) for v in views]
            n_in = int(np.prod(s.in_shape, dtype=np.int64))
            n_out = int(np.prod(s.shape, dtype=np.int64))
        for k, (v, o) in enumerate(zip(views, s.operands)):
            _, hdt = _host(o.dtype)
            name = os.path.join(workdir, f"p{j}s{i}_in{k}.bin")
            np.ascontiguousarray(v).astype(hdt).tofile(name)
        r = subprocess.run([exe, str(j), str(i), workdir, str(n_in), str(n_out)],
                           capture_output=True)
        assert r.returncode == 0, r.stderr
        _, hdt = _host(s.dtype)
        raw = np.fromfile(os.path.join(workdir, f"p{j}s{i}_out.bin"), dtype=hdt)
        res.append(raw.astype(s.dtype).reshape(s.shape))
    return res[-1]
