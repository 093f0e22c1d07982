"""Python -> IR: the ``Graph`` builder and ``Tensor`` handles, the op functions of ``go.``,
NumPy's protocols on Tensors, ``@go.jit`` tracing and eager mode, JSON save/load, and
reverse-mode differentiation (``autodiff/``)."""
