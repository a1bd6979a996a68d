"""Generate reference kernels of the further closed-form activations of neural-tangents 0.6.5.

Writes ``tests/data/nt_reference_activations.json`` next to this file. ntklab's tests read that
JSON only; neural-tangents / jax are NOT dependencies of ntklab and this script is never
imported by the test suite.

Run it inside the throw-away virtualenv described in ``make_nt_reference.py`` (outside the
repository)::

    JAX_PLATFORMS=cpu JAX_ENABLE_X64=1 OMP_WAIT_POLICY=PASSIVE \\
        /tmp/ntvenv/bin/python tests/data/make_nt_activation_reference.py

Everything is float64 (``jax_enable_x64``); inputs come from ``np.random.default_rng(seed)``.
The JSON layout is that of ``make_nt_reference.py`` (``cases``: ``{name, description, seed, d,
x1, x2, architecture, nt_code, nngp, ntk}``, ``x2`` null for the kernel of ``x1`` with itself),
with these activation dicts besides ``Dense``: ``{"layer": NAME, **kwargs}`` for NT's
``stax.NAME(**kwargs)``, NAME one of ``ABRelu`` (a, b), ``Sign``, ``Exp`` (a, b),
``ExpNormalized`` (gamma, shift), ``Gaussian`` (a, b), ``Rbf`` (gamma), ``Gabor``,
``Hermite`` (degree), ``Monomial`` (degree), ``RectifiedMonomial`` (degree), ``Polynomial``
(coef), ``Sigmoid_like``, and ``Erf``, ``Sin``, ``Cos`` (a, b, c). Cases whose name starts
with ``unit_`` have inputs scaled to ``|x|^2 = d`` and ``Dense(0.8, 0.6)`` layers, so that every
activation sees unit variances (``stax.Hermite`` assumes them).
"""

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import json
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_nt_reference as base  # sets jax_enable_x64
import neural_tangents as nt
from neural_tangents import stax

OUT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nt_reference_activations.json")
BASE_SEED = 31400


def to_stax(spec):
    layers, code = [], []
    for layer in spec:
        kind = layer["layer"]
        if kind == "Dense":
            (one, text) = base.to_stax([layer])
            layers.append(one)
            code.append(text[len("stax.serial(") : -1])
            continue
        kwargs = {k: v for k, v in layer.items() if k != "layer"}
        layers.append(getattr(stax, kind)(**kwargs))
        code.append(f"stax.{kind}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})")
    return stax.serial(*layers), "stax.serial(" + ", ".join(code) + ")"


def once(act, w=1.2, b=0.2):
    return [base.dense(w, b), act, base.dense(1.0, 0.1, 1)]


def twice(act, w=1.2, b=0.2):
    return [base.dense(w, b), act, base.dense(w, b), dict(act), base.dense(1.0, 0.1, 1)]


def unit(act, times):
    body = []
    for _ in range(times):
        body += [base.dense(0.8, 0.6), dict(act)]
    return [*body, base.dense(0.8, 0.6, 1)]


def a(name, **kw):
    return {"layer": name, **kw}


# name, architecture, self kernel (x2 = None)
CASES = [
    ("abrelu", once(a("ABRelu", a=-0.4, b=1.3)), False),
    ("abrelu_twice", twice(a("ABRelu", a=-0.4, b=1.3)), False),
    ("abrelu_twice_self", twice(a("ABRelu", a=0.5, b=-1.5)), True),
    ("sign", once(a("Sign")), False),
    ("sign_twice", twice(a("Sign")), False),
    ("sign_twice_self", twice(a("Sign")), True),
    ("exp", once(a("Exp", a=0.8, b=0.6), 0.7, 0.1), False),
    ("exp_twice", twice(a("Exp", a=0.8, b=0.6), 0.7, 0.1), False),
    ("exp_normalized", once(a("ExpNormalized", gamma=1.5, shift=-1.0)), False),
    ("exp_normalized_twice", twice(a("ExpNormalized", gamma=0.7, shift=-0.5)), False),
    ("exp_normalized_twice_self", twice(a("ExpNormalized", gamma=0.7, shift=-0.5)), True),
    ("gaussian", once(a("Gaussian", a=1.2, b=-0.8)), False),
    ("gaussian_twice", twice(a("Gaussian", a=1.2, b=-0.8)), False),
    ("gaussian_positive_b", once(a("Gaussian", a=1.0, b=0.1), 0.6, 0.1), False),
    ("rbf", once(a("Rbf", gamma=0.7)), False),
    ("rbf_twice", twice(a("Rbf", gamma=0.7)), False),
    ("rbf_twice_self", twice(a("Rbf", gamma=0.7)), True),
    ("gabor", once(a("Gabor")), False),
    ("gabor_twice", twice(a("Gabor")), False),
    ("unit_hermite_3", unit(a("Hermite", degree=3), 1), False),
    ("unit_hermite_3_twice", unit(a("Hermite", degree=3), 2), False),
    ("unit_hermite_2_twice_self", unit(a("Hermite", degree=2), 2), True),
    ("monomial_2", once(a("Monomial", degree=2)), False),
    ("monomial_2_twice", twice(a("Monomial", degree=2), 0.9, 0.1), False),
    ("monomial_3", once(a("Monomial", degree=3)), False),
    ("monomial_5", once(a("Monomial", degree=5), 0.8, 0.1), False),
    ("monomial_3_self", once(a("Monomial", degree=3)), True),
    ("rectified_monomial_0", once(a("RectifiedMonomial", degree=0)), False),
    ("rectified_monomial_2", once(a("RectifiedMonomial", degree=2)), False),
    ("rectified_monomial_3", once(a("RectifiedMonomial", degree=3)), False),
    ("polynomial", once(a("Polynomial", coef=[0.1, -0.5, 0.3, 0.2])), False),
    ("polynomial_twice", twice(a("Polynomial", coef=[0.1, -0.5, 0.3, 0.2]), 0.9, 0.1), False),
    ("polynomial_twice_self", twice(a("Polynomial", coef=[0.1, -0.5, 0.3, 0.2]), 0.9, 0.1), True),
    ("sigmoid_like", once(a("Sigmoid_like")), False),
    ("sigmoid_like_twice", twice(a("Sigmoid_like"), 1.5, 0.3), False),
    ("erf_abc", once(a("Erf", a=1.3, b=0.7, c=0.2)), False),
    ("erf_abc_twice", twice(a("Erf", a=-0.8, b=1.4, c=-0.3)), False),
    ("erf_abc_twice_self", twice(a("Erf", a=-0.8, b=1.4, c=-0.3)), True),
    ("sin_abc", once(a("Sin", a=1.2, b=0.8, c=0.4)), False),
    ("sin_abc_twice", twice(a("Sin", a=0.9, b=1.3, c=-1.1)), False),
    ("sin_abc_twice_self", twice(a("Sin", a=0.9, b=1.3, c=-1.1)), True),
    ("cos_abc", once(a("Cos", a=1.2, b=0.8, c=0.4)), False),
    ("cos_abc_twice", twice(a("Cos", a=-1.1, b=0.6, c=2.0)), False),
    ("cos_abc_twice_self", twice(a("Cos", a=-1.1, b=0.6, c=2.0)), True),
]


def make_inputs(seed, d, self_kernel, unit_norm):
    x1, x2 = base.make_inputs(seed, d, self_kernel)
    if unit_norm:
        x1 = x1 * np.sqrt(d) / np.linalg.norm(x1, axis=1, keepdims=True)
        x2 = None if x2 is None else x2 * np.sqrt(d) / np.linalg.norm(x2, axis=1, keepdims=True)
    return x1, x2


def build_cases():
    out = []
    for i, (name, spec, self_k) in enumerate(CASES):
        seed, d = BASE_SEED + i, 3
        x1, x2 = make_inputs(seed, d, self_k, name.startswith("unit_"))
        (_, _, kernel_fn), code = to_stax(spec)
        nngp, ntk = base.eval_kernel(kernel_fn, x1, x2)
        out.append(
            {
                "name": name,
                "description": code,
                "seed": seed,
                "d": d,
                "x1": base.tolist(x1),
                "x2": None if x2 is None else base.tolist(x2),
                "architecture": spec,
                "nt_code": code,
                "nngp": base.tolist(nngp),
                "ntk": base.tolist(ntk),
            }
        )
    return out


def main():
    warnings.filterwarnings("ignore")
    cases = build_cases()
    data = {
        "generator": {
            "script": "tests/data/make_nt_activation_reference.py",
            "neural_tangents": nt.__version__,
            "numpy": np.__version__,
            "python": sys.version.split()[0],
            "dtype": "float64 (jax_enable_x64)",
        },
        "conventions": {
            "Sign": "stax.Sign's NTK factor is 0 (the derivative is 0 almost everywhere).",
            "Hermite": "stax.Hermite returns nngp**degree, the kernel for unit-variance inputs "
            "only: the unit_ cases keep every activation's input variance at 1.",
            "Gaussian": "stax.Gaussian(a, b) is a * exp(b x^2); ntklab's GaussianBump.",
            "RectifiedMonomial": "no case applies it twice: NT 0.6.5 returns NaN for "
            "Dense, RectifiedMonomial(2), Dense, RectifiedMonomial(2), Dense (every entry).",
            "Sigmoid_like": "stax.Sigmoid_like() = Erf(a=0.5, b=1/2.4020563531719796, c=0.5); "
            "ntklab's SigmoidLike.",
        },
        "cases": cases,
    }
    with open(OUT_PATH, "w") as f:
        json.dump(data, f, allow_nan=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT_PATH} ({os.path.getsize(OUT_PATH)} bytes, {len(cases)} cases)")


if __name__ == "__main__":
    main()
