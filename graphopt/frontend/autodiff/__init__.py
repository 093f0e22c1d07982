"""Reverse-mode differentiation of graphs: ``rules`` holds every op's VJP as graph ops,
``reverse`` adds them to a graph, ``api`` is ``go.grad``/``go.value_and_grad``/``go.vjp``."""

from .api import grad, value_and_grad, vjp

__all__ = ["grad", "value_and_grad", "vjp"]
