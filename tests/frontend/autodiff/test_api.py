"""go.grad / go.value_and_grad / go.vjp: the graph form, the function form (JAX's), their
composition with @go.jit and disable_jit, errors, and the graphs they build."""

import numpy as np
import pytest

import graphopt as go
from graphopt import ir
from graphopt.testing import assert_grad_correct


def mlp():
    g = go.Graph("mlp")
    x = g.input("x", (8, 5))
    w = g.input("w", (5, 3))
    b = g.input("b", (3,))
    labels = g.input("labels", (8,), "int64")
    h = go.tanh(go.einsum("bi,ij->bj", x, w) + b)
    g.output({"loss": go.logsumexp(h, axis=1).mean(), "h": h, "n": labels.sum()})
    return g


def test_graph_grad_returns_value_and_a_gradient_dict(rng):
    g = mlp()
    h = go.grad(g, of="loss", wrt=["w", "b"])
    assert [h._G.nodes[i]["name"] for i in h._G.graph["inputs"]] == ["x", "w", "b", "labels"]
    args = dict(x=rng.normal(size=(8, 5)), w=rng.normal(size=(5, 3)), b=rng.normal(size=3),
                labels=np.arange(8))
    value, grads = go.compile(h)(**args)
    assert set(grads) == {"w", "b"} and grads["w"].shape == (5, 3)
    want = go.compile(g)(**args)["loss"]
    np.testing.assert_allclose(value, want, rtol=1e-12)
    assert_grad_correct(g, of="loss", wrt=["w", "b"], inputs=args,
                        backends=("numpy", "numba"), opt_levels=(0, 1, 2))


def test_default_wrt_is_every_float_input_and_the_source_graph_is_unchanged():
    g = mlp()
    before = ir.structural_hash(g.to_ir())
    h = go.grad(g, of="loss")
    assert ir.structural_hash(g.to_ir()) == before
    out_struct = h._G.graph["output_structure"]
    assert out_struct["kind"] == "tuple" and out_struct["items"][1]["keys"] == ["x", "w", "b"]


def test_gradient_graphs_are_deterministic_and_verify():
    a, b = go.grad(mlp(), of="loss"), go.grad(mlp(), of="loss")
    assert ir.structural_hash(a.to_ir()) == ir.structural_hash(b.to_ir())


def test_an_input_the_loss_does_not_use_gets_zeros(rng):
    g = go.Graph("unused")
    x = g.input("x", (3,))
    g.input("y", (2, 2), "float32")
    g.output((x * x).sum())
    _, d = go.compile(go.grad(g))(x=np.ones(3), y=np.ones((2, 2), np.float32))
    assert np.array_equal(d["y"], np.zeros((2, 2), np.float32)) and d["y"].dtype == np.float32


def test_vjp_of_several_outputs_takes_one_cotangent_each(rng):
    g = go.Graph("two")
    x = g.input("x", (3, 4))
    g.output({"s": go.sin(x), "t": (x * x).sum(axis=0), "k": (x > 0)})
    h = go.vjp(g)
    names = [h._G.nodes[i]["name"] for i in h._G.graph["inputs"]]
    assert names == ["x", "ct_s", "ct_t"]          # a bool output takes no cotangent
    xa, cs, ct = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), rng.normal(size=4)
    outs, d = go.compile(h)(x=xa, ct_s=cs, ct_t=ct)
    assert set(outs) == {"s", "t", "k"}
    np.testing.assert_allclose(d["x"], cs * np.cos(xa) + 2 * xa * ct, rtol=1e-12)
    assert_grad_correct(g)


def test_nested_outputs_survive_save_and_load(tmp_path, rng):
    h = go.grad(mlp(), of="loss", wrt="w")
    go.save(h, tmp_path / "g.json")
    loaded = go.load(tmp_path / "g.json")
    args = dict(x=rng.normal(size=(8, 5)), w=rng.normal(size=(5, 3)), b=rng.normal(size=3),
                labels=np.arange(8))
    v1, d1 = go.compile(h, backend="numpy")(**args)
    v2, d2 = go.compile(loaded, backend="numpy")(**args)
    assert v1 == v2 and np.array_equal(d1["w"], d2["w"])


@pytest.mark.parametrize("call,match", [
    (lambda g: go.grad(g), "one scalar output"),
    (lambda g: go.grad(g, of="h"), "real float scalar"),
    (lambda g: go.grad(g, of="nope"), "is not an output"),
    (lambda g: go.grad(g, of="loss", wrt=["labels"]), "int64"),
    (lambda g: go.grad(g, of="loss", wrt=["q"]), "is not an input"),
    (lambda g: go.grad(g, of="n"), "real float scalar"),
    (lambda g: go.grad(g, of="loss", argnums=1), "argnums"),
])
def test_bad_requests_are_graph_errors_at_the_callers_line(call, match):
    with pytest.raises(go.GraphError, match=match) as e:
        call(mlp())
    assert "test_api.py" in str(e.value)


def test_a_complex_loss_is_refused_with_a_pointer_to_vjp():
    g = go.Graph("c")
    z = g.input("z", (3,), "complex128")
    g.output((z * z).sum())
    with pytest.raises(go.DTypeError, match="go.vjp"):
        go.grad(g)


def test_backward_nodes_name_the_forward_line_they_differentiate():
    g = go.Graph("src")
    x = g.input("x", (3,))
    y = go.sin(x)  # the forward line
    g.output(y.sum())
    h = go.grad(g)
    srcs = [d["src"] for _, d in h._G.nodes(data=True) if "gradient of sin" in (d["src"] or "")]
    assert srcs and all("test_api.py" in s for s in srcs)


def test_compiled_graph_with_fused_nodes_is_refused():
    g = go.Graph("f")
    x = g.input("x", (4,))
    g.output(go.exp(go.sin(x) + 1.0).sum())
    plan = go.compile(g, backend="numba")
    fused = go.Graph("fused")
    fused._G = ir.copy_graph(plan.graph)
    if not any(d["op"] == "fused" for _, d in fused._G.nodes(data=True)):
        pytest.skip("nothing was fused")
    with pytest.raises(go.GraphError, match="no VJP rule for op 'fused'"):
        go.grad(fused)


# ---------------------------------------------------------------------------- function form

def loss_fn(w, x, scale=1.0):
    return (go.tanh(x @ w) ** 2).sum() * scale


def _numpy_grad(w, x, scale=1.0):
    t = np.tanh(x @ w)
    return x.T @ (2 * t * (1 - t * t)) * scale


def test_function_grad_argnums_and_static_arguments(rng):
    w, x = rng.normal(size=(5, 3)), rng.normal(size=(4, 5))
    np.testing.assert_allclose(go.grad(loss_fn)(w, x), _numpy_grad(w, x), rtol=1e-12)
    np.testing.assert_allclose(go.grad(loss_fn)(w, x, 3.0), _numpy_grad(w, x, 3.0),
                               rtol=1e-12)
    v, (dw, dx) = go.value_and_grad(loss_fn, argnums=(0, 1))(w, x)
    assert np.isclose(v, (np.tanh(x @ w) ** 2).sum()) and dx.shape == x.shape


def test_function_grad_inside_jit_and_under_disable_jit(rng):
    w, x = rng.normal(size=(5, 3)), rng.normal(size=(4, 5))

    @go.jit
    def sgd_step(w, x):
        loss, dw = go.value_and_grad(loss_fn)(w, x)
        return loss, w - 0.1 * dw

    loss, w2 = sgd_step(w, x)
    np.testing.assert_allclose(w2, w - 0.1 * _numpy_grad(w, x), rtol=1e-12)
    with go.disable_jit():
        np.testing.assert_allclose(go.grad(loss_fn)(w, x), _numpy_grad(w, x), rtol=1e-12)


def test_python_scalars_are_differentiated_and_grad_nests():
    f = go.grad(lambda a: go.sin(a) * a * a)
    a = 1.3
    assert np.isclose(f(a), np.cos(a) * a * a + 2 * a * np.sin(a))
    second = go.grad(lambda a: go.grad(lambda b: go.sin(b) * b)(a))
    assert np.isclose(second(a), 2 * np.cos(a) - a * np.sin(a))


def test_function_form_errors():
    with pytest.raises(go.GraphError, match="one Tensor"):
        go.grad(lambda a: (a, a))(np.ones(3))
    with pytest.raises(go.DTypeError, match="int64"):
        go.grad(lambda a: a.sum())(np.arange(3))
    with pytest.raises(go.GraphError, match="argnums"):
        go.grad(lambda a: a.sum(), argnums=2)(np.ones(3))


def test_report_shows_forward_and_backward_flops_and_what_is_saved():
    g = mlp()
    plan = go.compile(go.grad(g, of="loss", wrt=["w"]), backend="numpy")
    facts = plan.report.gradient
    assert facts["wrt"] == ["w"] and facts["backward_flops"] > 0 and facts["forward_flops"] > 0
    assert facts["saved_values"] >= 1 and facts["saved_bytes"] >= 8 * 3 * 8
    assert all(v["src"] and "test_api.py" in v["src"] for v in facts["largest_saved"])
    text = str(plan.report)
    assert "gradient of w: forward" in text and "saved for the backward pass" in text
    assert plan.report.to_dict()["gradient"] == facts
    assert go.compile(g, backend="numpy").report.gradient is None


def test_second_derivatives_through_vjp_of_a_gradient_graph():
    """A gradient graph has nested outputs ``(loss, {name: grad})``; its VJP takes one
    cotangent per leaf (named by its path) and gives Hessian-vector products, which match
    finite differences of the gradient."""
    g = go.Graph("smooth")
    x, w = g.input("x", (3, 4)), g.input("w", (4,))
    g.output(go.logsumexp(go.tanh(x * w) + go.sin(x), axis=1).sum())
    h = go.grad(g)
    names = [n for _, d in go.vjp(h)._G.nodes(data=True)
             if d["op"] == "input" for n in [d["name"]]]
    assert names == ["x", "w", "ct_0", "ct_1_x", "ct_1_w"]
    assert_grad_correct(h, opt_levels=(0, 2))


def test_nested_output_structures_are_checked_when_loaded(tmp_path):
    import json

    go.save(go.grad(mlp(), of="loss", wrt="w"), tmp_path / "g.json")
    doc = json.loads((tmp_path / "g.json").read_text())
    doc["output_structure"]["items"][1]["keys"] = ["w", "b"]
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(go.GraphError, match="output_structure arranges 3"):
        go.load(tmp_path / "bad.json")
    deep = {"kind": "tensor"}
    for _ in range(100):
        deep = {"kind": "list", "length": 1, "items": [deep]}
    doc["output_structure"] = deep
    (tmp_path / "deep.json").write_text(json.dumps(doc))
    with pytest.raises(go.GraphError, match="nested deeper"):
        go.load(tmp_path / "deep.json")
