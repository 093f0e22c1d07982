"""User-facing errors. Every message names the op, what was wrong, and where the user built it."""

from __future__ import annotations


class GraphError(Exception):
    """Base class of every error graphopt raises for bad graphs or bad input.

    Args:
        message: what is wrong, with the offending shapes/dtypes/equation.
        op: the op being built or run, if any.
        src: the user's ``file:line`` where the node was built, if known.
        node: the IR node id, if known.
    """

    def __init__(self, message: str, *, op: str | None = None, src: str | None = None,
                 node: int | None = None):
        self.detail = message
        self.op = op
        self.src = src
        self.node = node
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.op is not None:
            where.append(f"op '{self.op}'")
        if self.node is not None:
            where.append(f"node {self.node}")
        if self.src:
            where.append(f"at {self.src}")
        prefix = " ".join(where)
        return f"{prefix}: {self.detail}" if prefix else self.detail

    def located(self, *, op: str | None = None, src: str | None = None,
                node: int | None = None) -> "GraphError":
        """Return a copy of this error with missing location fields filled in."""
        err = type(self)(self.detail, op=self.op or op, src=self.src or src,
                         node=self.node if self.node is not None else node)
        return err


class ShapeError(GraphError):
    """Shapes that do not fit the op (broadcasting, reshape sizes, axes)."""


class DTypeError(GraphError):
    """A dtype the op does not accept, or an unknown dtype name."""


class EinsumError(GraphError):
    """A malformed einsum equation or operands that do not match it."""


class InputError(GraphError):
    """Wrong, missing or extra inputs to a compiled plan, or malformed serialized graphs."""


class OutOfRange(ShapeError, IndexError):
    """An index past the end of a dim: a ``ShapeError`` that is also the ``IndexError``
    NumPy raises, so code written for arrays (``try: x[i] except IndexError``, and Python's
    old iteration protocol) behaves the same on a Tensor."""


# What NumPy (and the generated kernels, which follow it) raise for a value that has no
# result, e.g. an integer to a negative integer power. The interpreter and plans turn them
# into a GraphError naming the op and the user's source line.
VALUE_ERRORS = (ValueError, ZeroDivisionError, OverflowError, FloatingPointError)


def did_you_mean(name: str, candidates) -> str:
    """``"; did you mean 'x'?"`` for the candidates closest to a mistyped ``name`` (as
    ``difflib`` ranks them), or ``""`` where none is close."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=2, cutoff=0.75)
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
