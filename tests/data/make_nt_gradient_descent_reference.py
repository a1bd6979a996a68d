"""Reference values of neural-tangents 0.6.5's ``predict.gradient_descent`` (any loss, ODE).

Writes ``tests/data/nt_reference_gradient_descent.json`` next to this file; ntklab's tests
(tests/dynamics/test_predict_gradient_descent.py) read only that JSON. Run it in the
throw-away neural-tangents virtualenv described in make_nt_reference.py::

    JAX_ENABLE_X64=1 JAX_PLATFORMS=cpu OMP_WAIT_POLICY=PASSIVE \\
        /tmp/nt-venv/bin/python tests/data/make_nt_gradient_descent_reference.py

The problem: 6 training and 4 test points with 3 outputs; the kernels are
``K = A A^T / 10`` for a standard normal ``A`` of shape (10, 10) from
``np.random.default_rng(SEED)`` (first 6 rows: train), one-hot targets, random initial outputs;
all stored in the JSON. Runs: mean squared loss ``0.5 * mean((f - y)^2)`` and cross-entropy
``-mean(y * log_softmax(f))``, each without momentum and with momentum 0.9.

Time: neural-tangents' ``t`` is a number of steps at ``learning_rate``: the ODE is solved to
``learning_rate * t`` (``sqrt(learning_rate) * t`` with momentum). ntklab's
``predict.gradient_descent`` uses the same ``t`` and ``learning_rate``, so the mapping is the
identity: the stored times are passed unchanged.

Tolerances: neural-tangents calls ``jax.experimental.ode.odeint`` with its defaults
(rtol = atol = 1.4e-8); this script rebinds it to rtol = atol = 1e-13 so that the reference is
the exact flow to about 1e-11, not to 1e-7.
"""

import functools
import json
import os

os.environ.setdefault("JAX_ENABLE_X64", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import neural_tangents as nt  # noqa: E402
from jax.experimental import ode  # noqa: E402
from neural_tangents._src import predict as nt_predict  # noqa: E402

OUT_PATH = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "nt_reference_gradient_descent.json"
)
SEED = 20240519
N_TRAIN, N_TEST, N_OUT, WIDTH = 6, 4, 3, 10
TIMES = [0.0, 0.5, 3.0, 20.0]
LEARNING_RATE = 0.7
MOMENTUM = 0.9
RTOL = ATOL = 1e-13


class _TightOde:
    """``jax.experimental.ode`` with tight default tolerances."""

    odeint = staticmethod(functools.partial(ode.odeint, rtol=RTOL, atol=ATOL, mxstep=10**6))


def losses():
    return {
        "mse": lambda fx, y: 0.5 * jnp.mean((fx - y) ** 2),
        "cross_entropy": lambda fx, y: -jnp.mean(jax.nn.log_softmax(fx) * y),
    }


def main():
    rng = np.random.default_rng(SEED)
    a = rng.standard_normal((N_TRAIN + N_TEST, WIDTH))
    k = a @ a.T / WIDTH
    k_train_train, k_test_train = k[:N_TRAIN, :N_TRAIN], k[N_TRAIN:, :N_TRAIN]
    y_train = np.eye(N_OUT)[rng.integers(0, N_OUT, N_TRAIN)]
    fx_train_0 = 0.3 * rng.standard_normal((N_TRAIN, N_OUT))
    fx_test_0 = 0.3 * rng.standard_normal((N_TEST, N_OUT))
    nt_predict.ode = _TightOde  # neural-tangents looks ode.odeint up at call time
    results = []
    for name, loss in losses().items():
        for momentum in (None, MOMENTUM):
            fn = nt.predict.gradient_descent(
                loss, jnp.asarray(k_train_train), jnp.asarray(y_train), LEARNING_RATE, momentum
            )
            train, test = fn(
                jnp.asarray(TIMES),
                jnp.asarray(fx_train_0),
                jnp.asarray(fx_test_0),
                jnp.asarray(k_test_train),
            )
            results.append(
                {
                    "loss": name,
                    "momentum": momentum,
                    "fx_train_t": np.asarray(train).tolist(),
                    "fx_test_t": np.asarray(test).tolist(),
                }
            )
    out = {
        "generator": f"neural-tangents {nt.__version__}, jax {jax.__version__}, float64",
        "seed": SEED,
        "learning_rate": LEARNING_RATE,
        "times": TIMES,
        "ode_tolerances": {"rtol": RTOL, "atol": ATOL},
        "losses": {
            "mse": "0.5 * mean((fx - y)^2)",
            "cross_entropy": "-mean(y * log_softmax(fx, axis=-1))",
        },
        "time_convention": "t in steps at learning_rate: ODE time learning_rate * t "
        "(sqrt(learning_rate) * t with momentum); identical in ntklab",
        "k_train_train": k_train_train.tolist(),
        "k_test_train": k_test_train.tolist(),
        "y_train": y_train.tolist(),
        "fx_train_0": fx_train_0.tolist(),
        "fx_test_0": fx_test_0.tolist(),
        "results": results,
    }
    with open(OUT_PATH, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
