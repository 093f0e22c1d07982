"""graphopt: compile einsum computation graphs into fast, memory-planned plans.

The public API (docs/API.md); everything public is exported here."""

import logging as _logging

from .compiler.driver import clear_caches, compile
from .errors import DTypeError, EinsumError, GraphError, InputError, ShapeError
from .frontend.autodiff import grad, value_and_grad, vjp
from .frontend.eager import disable_jit
from .frontend.graph import Graph
from .frontend.jit import contract, contract_expression, jit
from .frontend.numpy_api import clip, std, var
from .frontend.serialize import load, save
from .frontend.tensor import (
    Tensor,
    abs,
    add,
    astype,
    broadcast_to,
    conj,
    cos,
    div,
    einsum,
    equal,
    exp,
    gelu,
    greater,
    greater_equal,
    imag,
    less,
    less_equal,
    log,
    logsumexp,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    mul,
    neg,
    not_equal,
    pow,
    real,
    reciprocal,
    relu,
    reshape,
    sigmoid,
    sin,
    softmax,
    sqrt,
    square,
    sub,
    sum,
    tanh,
    transpose,
    where,
)
from .observe.progress import show_progress
from .observe.report import OptimizationReport
from .runtime.nans import debug_nans
from .runtime.plan import Plan
from .runtime.threads import thread_budget

__version__ = "0.1.0"

# a library logs and leaves the handlers to the application (logging's HOWTO)
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

__all__ = [
    "Graph", "Tensor", "Plan", "OptimizationReport", "compile", "clear_caches", "jit",
    "contract", "contract_expression", "debug_nans", "save",
    "load", "grad", "value_and_grad", "vjp",
    "thread_budget", "disable_jit", "show_progress", "GraphError", "ShapeError",
    "DTypeError", "EinsumError", "InputError",
    "einsum", "matmul", "exp", "log", "sqrt", "abs", "neg", "tanh", "sigmoid", "relu", "gelu",
    "sin", "cos", "square", "reciprocal", "conj", "real", "imag", "add", "sub", "mul", "div",
    "pow", "maximum", "minimum", "where", "equal", "not_equal", "less", "less_equal",
    "greater", "greater_equal", "sum", "max", "min", "mean", "softmax", "logsumexp",
    "reshape", "transpose", "broadcast_to", "astype", "var", "std", "clip",
]
