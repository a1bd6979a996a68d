"""Generate reference kernel values from Google's neural-tangents (NT) 0.6.5.

Writes ``tests/data/nt_reference_kernels.json`` next to this file.  ntklab's
tests read that JSON only; neural-tangents / jax are NOT dependencies of
ntklab and this script is never imported by the test suite.

Run it only inside a separate, throw-away virtualenv OUTSIDE the repo::

    python3 -m venv /tmp/ntvenv            # Python 3.11
    /tmp/ntvenv/bin/pip install neural-tangents==0.6.5 jax==0.4.25 \\
        jaxlib==0.4.25 numpy==1.26.4 scipy==1.11.4 tensorflow==2.15.1 \\
        tf2jax==0.3.5 frozendict==2.4.6
    # (tensorflow-cpu==2.15.1 works as a replacement for tensorflow)
    OMP_WAIT_POLICY=PASSIVE /tmp/ntvenv/bin/python tests/data/make_nt_reference.py

Everything is float64 (``jax_enable_x64``); inputs come from
``np.random.default_rng(seed)`` so regeneration is deterministic.

JSON layout (all arrays are nested lists of floats, written with repr, i.e.
full float64 round-trip precision):

* ``cases``: list of ``{name, description, seed, d, x1, x2, architecture,
  nt_code, nngp, ntk}``.  ``x2`` is ``null`` for the self-kernel case (then
  ``nngp``/``ntk`` are ``k(x1, x1)``).  ``architecture`` is a list of layer
  dicts (see ``spec_format`` in the JSON).
* ``numerical_quadrature``: NT's ``ElementwiseNumerical`` (Gauss-Hermite,
  deg=50) erf vs the closed-form ``Erf`` on the same inputs.
* ``empirical_ntk``: a tiny 2-output MLP with its parameters, its outputs and
  ``nt.empirical_ntk_fn`` with ``trace_axes=(-1,)`` and ``trace_axes=()``.
* ``predict``: ``nt.predict.gradient_descent_mse``,
  ``gradient_descent_mse_ensemble`` and ``gp_inference`` outputs.
* ``conventions``: notes on NT conventions that matter for parity.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import json
import math
import sys
import warnings

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.scipy.special as jss  # noqa: E402
import neural_tangents as nt  # noqa: E402
from neural_tangents import stax  # noqa: E402

OUT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nt_reference_kernels.json")
HIDDEN = 512
SQRT2 = math.sqrt(2.0)

# ---------------------------------------------------------------------------
# Architecture spec -> stax
# ---------------------------------------------------------------------------


def dense(w, b, width=HIDDEN, param="ntk"):
    return {
        "layer": "Dense",
        "w_std": float(w),
        "b_std": None if b is None else float(b),
        "parameterization": param,
        "width": int(width),
    }


def act(name, **kw):
    d = {"layer": name}
    d.update(kw)
    return d


def to_stax(spec, numerical=None):
    """Build an NT stax layer list from an architecture spec.

    ``numerical`` maps an activation name to an ``ElementwiseNumerical``
    replacement (used for Tanh, and for the erf quadrature check).
    """
    layers, code = [], []
    numerical = numerical or {}
    for layer in spec:
        kind = layer["layer"]
        if kind in numerical:
            fn, fn_name, deg = numerical[kind]
            layers.append(stax.ElementwiseNumerical(fn, deg=deg))
            code.append(f"stax.ElementwiseNumerical({fn_name}, deg={deg})")
        elif kind == "Dense":
            layers.append(
                stax.Dense(
                    layer["width"],
                    W_std=layer["w_std"],
                    b_std=layer["b_std"],
                    parameterization=layer["parameterization"],
                )
            )
            code.append(
                f"stax.Dense({layer['width']}, W_std={layer['w_std']!r}, "
                f"b_std={layer['b_std']!r}, "
                f"parameterization={layer['parameterization']!r})"
            )
        elif kind == "Relu":
            layers.append(stax.Relu())
            code.append("stax.Relu()")
        elif kind == "LeakyRelu":
            layers.append(stax.LeakyRelu(layer["alpha"]))
            code.append(f"stax.LeakyRelu({layer['alpha']!r})")
        elif kind == "Abs":
            layers.append(stax.Abs())
            code.append("stax.Abs()")
        elif kind == "Erf":
            layers.append(stax.Erf())
            code.append("stax.Erf()")
        elif kind == "Gelu":
            layers.append(stax.Gelu(approximate=False))
            code.append("stax.Gelu(approximate=False)")
        elif kind == "Sin":
            layers.append(stax.Sin())
            code.append("stax.Sin()")
        elif kind == "Cos":
            layers.append(stax.Cos())
            code.append("stax.Cos()")
        elif kind == "Identity":
            layers.append(stax.Identity())
            code.append("stax.Identity()")
        else:
            raise ValueError(f"no closed-form stax layer for {kind}")
    return stax.serial(*layers), "stax.serial(" + ", ".join(code) + ")"


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------


def repeat(n, *layers):
    out = []
    for _ in range(n):
        out.extend(dict(lay) for lay in layers)
    return out


CASES = [
    # name, description, d, self_kernel, spec, numerical
    (
        "relu_depth1_bias",
        "Dense(1.5,0.1), Relu, Dense(1.5,0.1)",
        3,
        False,
        [dense(1.5, 0.1), act("Relu"), dense(1.5, 0.1, 1)],
        None,
    ),
    (
        "relu_depth1_bias_self",
        "same as relu_depth1_bias, x2=None (kernel of x1 with itself)",
        3,
        True,
        [dense(1.5, 0.1), act("Relu"), dense(1.5, 0.1, 1)],
        None,
    ),
    (
        "relu_depth3",
        "3 x [Dense(sqrt2,0.1), Relu] + Dense(sqrt2,0.1)",
        3,
        False,
        [*repeat(3, dense(SQRT2, 0.1), act("Relu")), dense(SQRT2, 0.1, 1)],
        None,
    ),
    (
        "relu_depth3_d7",
        "relu_depth3 with d=7 input features",
        7,
        False,
        [*repeat(3, dense(SQRT2, 0.1), act("Relu")), dense(SQRT2, 0.1, 1)],
        None,
    ),
    (
        "relu_depth5_nobias",
        "5 x [Dense(1.3,None), Relu] + Dense(1.3,None)",
        3,
        False,
        [*repeat(5, dense(1.3, None), act("Relu")), dense(1.3, None, 1)],
        None,
    ),
    (
        "leaky_relu_0.1",
        "Dense(1.2,0.2), LeakyRelu(0.1), Dense(1.2,0.2)",
        3,
        False,
        [dense(1.2, 0.2), act("LeakyRelu", alpha=0.1), dense(1.2, 0.2, 1)],
        None,
    ),
    (
        "abs",
        "Dense(1.1,0.3), Abs, Dense(1.0,0.0)",
        3,
        False,
        [dense(1.1, 0.3), act("Abs"), dense(1.0, 0.0, 1)],
        None,
    ),
    (
        "erf_depth2",
        "2 x [Dense(1.4,0.2), Erf()] + Dense(1.0,0.1); stax.Erf() default a=1,b=1,c=0, i.e. erf(x)",
        3,
        False,
        [*repeat(2, dense(1.4, 0.2), act("Erf")), dense(1.0, 0.1, 1)],
        None,
    ),
    (
        "gelu_depth2",
        "2 x [Dense(1.2,0.1), Gelu(approximate=False)] + Dense(1.0,0.1); exact Gelu x*Phi(x)",
        3,
        False,
        [*repeat(2, dense(1.2, 0.1), act("Gelu")), dense(1.0, 0.1, 1)],
        None,
    ),
    (
        "sin",
        "Dense(1.0,0.5), Sin(), Dense(1.0,0.0); stax.Sin default a=1,b=1,c=0, i.e. sin(x)",
        3,
        False,
        [dense(1.0, 0.5), act("Sin"), dense(1.0, 0.0, 1)],
        None,
    ),
    (
        "cos",
        "Dense(0.9,0.2), Cos(), Dense(1.0,0.0); stax.Cos() exists and is Sin(c=pi/2), i.e. cos(x)",
        3,
        False,
        [dense(0.9, 0.2), act("Cos"), dense(1.0, 0.0, 1)],
        None,
    ),
    (
        "identity",
        "Dense(1.0,0.5), Identity(), Dense(2.0,0.0)",
        3,
        False,
        [dense(1.0, 0.5), act("Identity"), dense(2.0, 0.0, 1)],
        None,
    ),
    (
        "standard_relu_depth2",
        "standard parameterization everywhere: "
        "2 x [Dense(512,1.5,0.1,standard), Relu] + Dense(1,1.5,0.1,standard)",
        3,
        False,
        [
            *repeat(2, dense(1.5, 0.1, param="standard"), act("Relu")),
            dense(1.5, 0.1, 1, param="standard"),
        ],
        None,
    ),
    (
        "standard_relu_depth2_widths_64_256",
        "as standard_relu_depth2 but hidden "
        "widths 64 then 256 (NTK depends on fan-ins, NNGP does not)",
        3,
        False,
        [
            dense(1.5, 0.1, 64, param="standard"),
            act("Relu"),
            dense(1.5, 0.1, 256, param="standard"),
            act("Relu"),
            dense(1.5, 0.1, 1, param="standard"),
        ],
        None,
    ),
    (
        "standard_relu_depth2_nobias",
        "as standard_relu_depth2 with b_std=None everywhere",
        3,
        False,
        [
            *repeat(2, dense(1.5, None, param="standard"), act("Relu")),
            dense(1.5, None, 1, param="standard"),
        ],
        None,
    ),
    (
        "numerical_tanh",
        "Dense(1.0,0.1), tanh, Dense(1.0,0.1); NT has no "
        "closed-form Tanh: computed with stax.ElementwiseNumerical(jnp.tanh, "
        "deg=50) (Gauss-Hermite quadrature, derivative via jax.grad)",
        3,
        False,
        [dense(1.0, 0.1), act("Tanh"), dense(1.0, 0.1, 1)],
        {"Tanh": (jnp.tanh, "jnp.tanh", 50)},
    ),
    (
        "numerical_tanh_deg400",
        "same network and inputs as numerical_tanh but ElementwiseNumerical(jnp.tanh, "
        "deg=400): converged quadrature (deg 300 vs 400 agree to ~1e-12 relative), use "
        "this as the accurate tanh reference; deg=50 is off by up to ~2.5e-4 relative",
        3,
        False,
        [dense(1.0, 0.1), act("Tanh"), dense(1.0, 0.1, 1)],
        {"Tanh": (jnp.tanh, "jnp.tanh", 400)},
    ),
    (
        "erf_depth1_closed_form",
        "Dense(1,0.1), Erf, Dense(1,0.1) with NT's closed-form stax.Erf()",
        3,
        False,
        [dense(1.0, 0.1), act("Erf"), dense(1.0, 0.1, 1)],
        None,
    ),
    (
        "erf_depth1_numerical",
        "Dense(1,0.1), Erf, Dense(1,0.1) computed with "
        "stax.ElementwiseNumerical(jax.scipy.special.erf, deg=50); same inputs "
        "as erf_depth1_closed_form; differs from it by NT's quadrature error",
        3,
        False,
        [dense(1.0, 0.1), act("Erf"), dense(1.0, 0.1, 1)],
        {"Erf": (jss.erf, "jax.scipy.special.erf", 50)},
    ),
    (
        "deep_relu_float",
        "20 x [Dense(sqrt2,0.0), Relu] + Dense(1,0)",
        3,
        False,
        [*repeat(20, dense(SQRT2, 0.0), act("Relu")), dense(1.0, 0.0, 1)],
        None,
    ),
]

SAME_INPUTS_AS = {
    "erf_depth1_numerical": "erf_depth1_closed_form",
    "numerical_tanh_deg400": "numerical_tanh",
}

N1, N2 = 5, 4
BASE_SEED = 20240


def tolist(a):
    a = np.asarray(a, dtype=np.float64)
    assert np.all(np.isfinite(a)), "non-finite value"
    return a.tolist()


def make_inputs(seed, d, self_kernel):
    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=(N1, d))
    x2 = None if self_kernel else rng.normal(size=(N2, d))
    return x1, x2


def eval_kernel(kernel_fn, x1, x2):
    k = kernel_fn(jnp.asarray(x1), None if x2 is None else jnp.asarray(x2), ("nngp", "ntk"))
    assert k.nngp.dtype == jnp.float64 and k.ntk.dtype == jnp.float64
    return np.asarray(k.nngp), np.asarray(k.ntk)


def build_cases():
    out = []
    results = {}
    for name, desc, d, self_k, spec, numerical in CASES:
        # Pairs that differ only in how NT computes the kernel share inputs.
        seed = BASE_SEED + [c[0] for c in CASES].index(SAME_INPUTS_AS.get(name, name))
        x1, x2 = make_inputs(seed, d, self_k)
        (_, _, kernel_fn), code = to_stax(spec, numerical)
        nngp, ntk = eval_kernel(kernel_fn, x1, x2)
        exp_shape = (N1, N1 if x2 is None else N2)
        assert nngp.shape == exp_shape and ntk.shape == exp_shape, name
        if x2 is None:
            assert np.allclose(nngp, nngp.T, rtol=0, atol=1e-12), name
            assert np.allclose(ntk, ntk.T, rtol=0, atol=1e-12), name
        results[name] = (nngp, ntk)
        out.append(
            {
                "name": name,
                "description": desc,
                "seed": seed,
                "d": d,
                "x1": tolist(x1),
                "x2": None if x2 is None else tolist(x2),
                "architecture": spec,
                "nt_code": code,
                "nngp": tolist(nngp),
                "ntk": tolist(ntk),
            }
        )
    return out, results


# ---------------------------------------------------------------------------
# Empirical NTK of a tiny 2-output MLP
# ---------------------------------------------------------------------------


def build_empirical():
    spec = [dense(1.5, 0.1, 8), act("Relu"), dense(1.5, 0.1, 2)]
    (init_fn, apply_fn, _), code = to_stax(spec)
    rng = np.random.default_rng(BASE_SEED + 1000)
    x1 = rng.normal(size=(N1, 3))
    x2 = rng.normal(size=(N2, 3))
    _, params = init_fn(jax.random.PRNGKey(0), (-1, 3))
    dense_params = [p for p in params if p != ()]
    p_json = [{"W": tolist(W), "b": tolist(b)} for (W, b) in dense_params]

    # Check the documented NTK-parameterisation forward pass reproduces NT.
    def manual_apply(x):
        (W1, b1), (W2, b2) = dense_params
        h = 1.5 / math.sqrt(3) * x @ np.asarray(W1) + 0.1 * np.asarray(b1)
        h = np.maximum(h, 0.0)
        return 1.5 / math.sqrt(8) * h @ np.asarray(W2) + 0.1 * np.asarray(b2)

    f1 = np.asarray(apply_fn(params, jnp.asarray(x1)))
    assert np.allclose(f1, manual_apply(x1), rtol=1e-12, atol=1e-12)

    ntk_tr = np.asarray(
        nt.empirical_ntk_fn(apply_fn, trace_axes=(-1,))(jnp.asarray(x1), jnp.asarray(x2), params)
    )
    ntk_full = np.asarray(
        nt.empirical_ntk_fn(apply_fn, trace_axes=())(jnp.asarray(x1), jnp.asarray(x2), params)
    )
    ntk_self = np.asarray(
        nt.empirical_ntk_fn(apply_fn, trace_axes=(-1,))(jnp.asarray(x1), None, params)
    )
    assert ntk_tr.shape == (N1, N2) and ntk_full.shape == (N1, N2, 2, 2)
    diag_mean = np.einsum("ijkk->ij", ntk_full) / 2
    assert np.allclose(ntk_tr, diag_mean, rtol=1e-10, atol=1e-12), "trace_axes convention changed"
    return {
        "description": "Tiny MLP Dense(8,1.5,0.1), Relu, Dense(2,1.5,0.1), NTK "
        "parameterisation, params from init_fn(PRNGKey(0), (-1,3)).",
        "architecture": spec,
        "nt_code": code,
        "forward": "h = relu((1.5/sqrt(3)) * x @ W0 + 0.1 * b0); "
        "f = (1.5/sqrt(8)) * h @ W1 + 0.1 * b1  (W: (fan_in, fan_out), "
        "b: (1, fan_out), W,b ~ N(0,1) at init); the empirical NTK "
        "differentiates w.r.t. these raw W and b",
        "params": p_json,
        "x1": tolist(x1),
        "x2": tolist(x2),
        "f_x1": tolist(f1),
        "f_x2": tolist(apply_fn(params, jnp.asarray(x2))),
        "ntk_trace_last": tolist(ntk_tr),
        "ntk_trace_last_self": tolist(ntk_self),
        "ntk_full": tolist(ntk_full),
        "notes": "ntk_full has shape (n1, n2, k, k) = [i, j, a, b] = "
        "<df_a(x1_i)/dp, df_b(x2_j)/dp>. trace_axes=(-1,) gives the MEAN "
        "(not the sum) over the output axis: ntk_trace_last = "
        "einsum('ijaa->ij', ntk_full) / k (verified by the generator).",
    }


# ---------------------------------------------------------------------------
# predict
# ---------------------------------------------------------------------------


def build_predict():
    spec = [dense(1.5, 0.1), act("Relu"), dense(1.5, 0.1, 1)]
    (_, _, kernel_fn), code = to_stax(spec)
    rng = np.random.default_rng(BASE_SEED + 2000)
    x_train = rng.normal(size=(6, 3))
    x_test = rng.normal(size=(3, 3))
    y_train = rng.normal(size=(6, 2))
    fx_train_0 = 0.3 * rng.normal(size=(6, 2))
    fx_test_0 = 0.3 * rng.normal(size=(3, 2))

    k_dd = kernel_fn(jnp.asarray(x_train), None, ("nngp", "ntk"))
    k_td = kernel_fn(jnp.asarray(x_test), jnp.asarray(x_train), ("nngp", "ntk"))
    k_tt = kernel_fn(jnp.asarray(x_test), None, ("nngp", "ntk"))
    ktt_ntk = np.asarray(k_dd.ntk)
    assert np.all(np.linalg.eigvalsh(ktt_ntk) > 0)

    lr = 0.5
    times = [0.0, 0.7, 5.0, None]
    regs = [("none", 0.0, False), ("relative_1e-2", 1e-2, False), ("absolute_1e-2", 1e-2, True)]

    gd = []
    for reg_name, reg, absolute in regs:
        pred = nt.predict.gradient_descent_mse(
            jnp.asarray(ktt_ntk),
            jnp.asarray(y_train),
            learning_rate=lr,
            diag_reg=reg,
            diag_reg_absolute_scale=absolute,
        )
        for init_name, f0_tr, f0_te in [
            ("random", jnp.asarray(fx_train_0), jnp.asarray(fx_test_0)),
            ("zero", 0.0, 0.0),
        ]:
            for t in times:
                ftr, fte = pred(t, f0_tr, f0_te, k_td.ntk)
                gd.append(
                    {
                        "diag_reg_name": reg_name,
                        "diag_reg": reg,
                        "diag_reg_absolute_scale": absolute,
                        "init": init_name,
                        "t": t,
                        "fx_train_t": tolist(ftr),
                        "fx_test_t": tolist(fte),
                    }
                )

    ens = []
    pred_e = nt.predict.gradient_descent_mse_ensemble(
        kernel_fn, jnp.asarray(x_train), jnp.asarray(y_train), learning_rate=lr, diag_reg=1e-3
    )
    for get in ("ntk", "nngp"):
        for t in (1.0, None):
            for xt_name, xt in (("x_test", jnp.asarray(x_test)), ("None", None)):
                g = pred_e(t=t, x_test=xt, get=get, compute_cov=True)
                ens.append(
                    {
                        "get": get,
                        "t": t,
                        "x_test": xt_name,
                        "mean": tolist(g.mean),
                        "covariance": tolist(g.covariance),
                    }
                )

    gp = []
    pred_gp = nt.predict.gp_inference(k_dd, jnp.asarray(y_train), diag_reg=1e-3)
    for get in ("nngp", "ntk"):
        g = pred_gp(get=get, k_test_train=k_td, k_test_test=k_tt.nngp)
        gp.append({"get": get, "mean": tolist(g.mean), "covariance": tolist(g.covariance)})

    return {
        "architecture": spec,
        "nt_code": code,
        "x_train": tolist(x_train),
        "x_test": tolist(x_test),
        "y_train": tolist(y_train),
        "fx_train_0": tolist(fx_train_0),
        "fx_test_0": tolist(fx_test_0),
        "k_train_train": {"nngp": tolist(k_dd.nngp), "ntk": tolist(k_dd.ntk)},
        "k_test_train": {"nngp": tolist(k_td.nngp), "ntk": tolist(k_td.ntk)},
        "k_test_test": {"nngp": tolist(k_tt.nngp), "ntk": tolist(k_tt.ntk)},
        "learning_rate": lr,
        "gradient_descent_mse": {
            "description": "nt.predict.gradient_descent_mse(k_train_train.ntk, "
            "y_train, learning_rate, diag_reg, "
            "diag_reg_absolute_scale)(t, fx_train_0, fx_test_0, "
            "k_test_train.ntk); init 'zero' passes the scalar 0.0 "
            "for both fx_train_0 and fx_test_0; t=null is None "
            "(infinite time)",
            "results": gd,
        },
        "gradient_descent_mse_ensemble": {
            "description": "nt.predict.gradient_descent_mse_ensemble(kernel_fn, "
            "x_train, y_train, learning_rate=0.5, diag_reg=1e-3)"
            "(t=t, x_test=x_test, get=get, compute_cov=True); "
            "x_test='None' means predictions on x_train",
            "diag_reg": 1e-3,
            "diag_reg_absolute_scale": False,
            "results": ens,
        },
        "gp_inference": {
            "description": "nt.predict.gp_inference(kernel_fn(x_train, None), "
            "y_train, diag_reg=1e-3)(get=get, k_test_train="
            "kernel_fn(x_test, x_train), k_test_test="
            "kernel_fn(x_test, None).nngp)",
            "diag_reg": 1e-3,
            "diag_reg_absolute_scale": False,
            "results": gp,
        },
    }


CONVENTIONS = {
    "input_kernel": "NT's first layer sees nngp = x1 @ x2.T / d (d = input "
    "features) and ntk = 0; Dense(ntk): nngp' = w^2 nngp + b^2, "
    "ntk' = nngp' + w^2 ntk.",
    "standard_parameterization": "Dense(standard): ntk' = fan_in * nngp_in + "
    "w^2 * ntk_in (+ 1.0 if b_std is not None, "
    "independent of the value of b_std), where "
    "nngp_in is the layer's INPUT nngp and fan_in "
    "its input width (d for the first layer, the "
    "previous Dense's width after). NNGP is the same "
    "as ntk parameterization and width-independent; "
    "the NTK depends on the hidden widths (not on the "
    "last layer's out_dim).",
    "b_std_none_vs_zero": "ntk parameterization: b_std=None and b_std=0.0 give "
    "identical kernels. standard parameterization: "
    "b_std=None removes the +1 bias-gradient term from the "
    "NTK as well as the b^2 term from the NNGP.",
    "Sin_Cos_Erf": "stax.Sin(a,b,c)=a*sin(b*x+c), stax.Cos = Sin(c=c+pi/2), "
    "stax.Erf(a,b,c)=a*erf(b*x)+c; all cases use the defaults "
    "a=1,b=1,c=0.",
    "LeakyRelu_Abs": "LeakyRelu(alpha)=ABRelu(alpha,1), Abs=ABRelu(-1,1) "
    "(ABRelu(a,b) = a*min(x,0) + b*max(x,0)).",
    "Tanh": "NT 0.6.5 has no closed-form stax.Tanh; numerical_tanh uses "
    "ElementwiseNumerical(jnp.tanh, deg=50) (NTK off by up to ~2.5e-4 relative); "
    "numerical_tanh_deg400 is converged.",
    "empirical_ntk_trace": "nt.empirical_ntk_fn(trace_axes=(-1,)) averages "
    "(mean, not sum) over the output axis.",
    "gradient_descent_mse": "f_train(t) = y + expm(-lr * t * K / y_train.size) "
    "(f_train_0 - y), with y_train.size = n_train * "
    "n_outputs (NOT n_train); K includes the diag "
    "regulariser; f_test(t) = f_test_0 + K_td K^-1 "
    "(I - expm(...)) (y - f_train_0). t=None returns "
    "fx_train = y_train exactly (even with diag_reg>0) "
    "and fx_test = f_test_0 + K_td K_reg^-1 (y - "
    "f_train_0).",
    "diag_reg": "relative (diag_reg_absolute_scale=False): K + diag_reg * "
    "trace(K)/n * I; absolute: K + diag_reg * I.",
}


def quadrature_summary(results):
    cf_nngp, cf_ntk = results["erf_depth1_closed_form"]
    nu_nngp, nu_ntk = results["erf_depth1_numerical"]

    def stats(a, b):
        return {
            "max_abs_diff": float(np.max(np.abs(a - b))),
            "max_rel_diff": float(np.max(np.abs(a - b) / np.abs(a))),
        }

    t50_nngp, t50_ntk = results["numerical_tanh"]
    t400_nngp, t400_ntk = results["numerical_tanh_deg400"]
    return {
        "description": "NT ElementwiseNumerical(erf, deg=50) vs closed-form "
        "Erf, case erf_depth1_*, same inputs",
        "nngp": stats(cf_nngp, nu_nngp),
        "ntk": stats(cf_ntk, nu_ntk),
        "tanh_deg50_vs_deg400": {
            "description": "case numerical_tanh (deg=50) vs numerical_tanh_deg400",
            "nngp": stats(t400_nngp, t50_nngp),
            "ntk": stats(t400_ntk, t50_ntk),
        },
    }


SPEC_FORMAT = {
    "architecture": "list of layer dicts applied in order",
    "Dense": {
        "layer": "Dense",
        "w_std": "float",
        "b_std": "float or null (no bias)",
        "parameterization": "'ntk' or 'standard'",
        "width": "out_dim (512 hidden, 1 for the readout unless stated)",
    },
    "activations": [
        "Relu",
        "LeakyRelu (key alpha)",
        "Abs",
        "Erf",
        "Gelu (exact, approximate=False)",
        "Sin",
        "Cos",
        "Identity",
        "Tanh",
    ],
}


def main():
    warnings.filterwarnings("ignore")
    cases, results = build_cases()
    data = {
        "generator": {
            "script": "tests/data/make_nt_reference.py",
            "neural_tangents": nt.__version__,
            "jax": jax.__version__,
            "numpy": np.__version__,
            "python": sys.version.split()[0],
            "dtype": "float64 (jax_enable_x64)",
        },
        "spec_format": SPEC_FORMAT,
        "conventions": CONVENTIONS,
        "cases": cases,
        "numerical_quadrature": quadrature_summary(results),
        "empirical_ntk": build_empirical(),
        "predict": build_predict(),
    }
    with open(OUT_PATH, "w") as f:
        json.dump(data, f, allow_nan=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT_PATH} ({os.path.getsize(OUT_PATH)} bytes, {len(cases)} cases)")
    print("quadrature:", json.dumps(data["numerical_quadrature"]))


if __name__ == "__main__":
    main()
