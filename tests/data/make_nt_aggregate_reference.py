"""Generate reference kernels of neural-tangents' (NT) 0.6.5 ``stax.Aggregate`` (graph neural
networks) and ``stax.DotGeneral`` (multiplication by a constant).

Writes ``tests/data/nt_reference_aggregate.json`` next to this file; ntklab's tests read that
JSON only. Run it with the neural-tangents virtualenv::

    JAX_ENABLE_X64=1 JAX_PLATFORMS=cpu /tmp/nt-venv/bin/python \\
        tests/data/make_nt_aggregate_reference.py

Everything is float64; inputs come from ``np.random.default_rng(seed)``.

JSON layout:

- ``gnn``: ``{name, x1, a1, x2, a2, nngp, ntk}`` of the network ``Dense(64, 1.5, 0.1) ->
  Relu -> Aggregate -> Dense(64, 1.5, 0.1) -> Relu -> Aggregate -> GlobalAvgPool ->
  Dense(1, 1.2, 0.05)`` (NTK parameterization; NT's per-node ``Dense`` is ntklab's
  ``Conv(width, (1,))``). Features ``x`` are stored channels-first ``(n, C, N)`` (NT reads
  ``x.transpose(0, 2, 1)``); adjacencies ``a`` ``(n, N, N)`` are NT's dense ``pattern``.
  ``x2``/``a2`` ``null``: the self-kernel. Graphs of fewer nodes are padded with isolated
  zero nodes.
- ``masked``: ``{name, architecture, mask_constant, x1, a1, x2, a2, nngp, ntk}``: graphs of
  different node counts padded to a common ``N`` with ``mask_constant`` (``"nan"`` stands
  for NaN, written as JSON ``NaN`` in ``x``) and NT's ``kernel_fn(x1, x2, pattern=(a1, a2),
  mask_constant=...)``. The adjacency of a padded node holds random nonzero weights: masked
  nodes must be neither read nor counted whatever it says. ``architecture`` names one of
  :data:`MASKED_ARCHITECTURES`. The cases of :data:`DIFFERENT` (all graphs with the same
  real node count) record where NT's masks look wrong: they also store
  ``nt_unpadded_nngp``/``nt_unpadded_ntk``, NT's kernel of the same graphs without padding,
  and ``nt_apply_gap``, the largest difference between NT's finite ``apply_fn`` on the
  padded+masked and on the unpadded graphs (same parameters). NT does not remask the kernel
  after ``Polynomial`` and ``Monomial`` (``remask_kernel=False``): after ``Polynomial`` its
  masked kernel is NaN (the dual at the zero variance of masked nodes), after
  ``Monomial(0)`` (value 1 at 0) its ``Aggregate`` and ``GlobalAvgPool`` read the masked
  nodes, while its own ``apply_fn`` ignores the padding (gap 0).
- ``dot``: ``{name, x1, x2, lhs, rhs, dimension_numbers, nngp, ntk}`` of ``Conv(64, (2, 2),
  SAME, 1.5, 0.1) -> Relu -> DotGeneral -> GlobalAvgPool -> Dense(1, 1.2, 0.05)`` on
  channels-first images ``(n, C, H, W)`` (NT with ``channel_axis=1``, so the axis numbers
  of ``dimension_numbers`` are ntklab's).
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import json

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from neural_tangents import stax  # noqa: E402

OUT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nt_reference_aggregate.json")


def gnn_kernel_fn():
    agg = stax.Aggregate(aggregate_axis=1, batch_axis=0, channel_axis=-1)
    _, _, kernel_fn = stax.serial(
        stax.Dense(64, 1.5, 0.1),
        stax.Relu(),
        agg,
        stax.Dense(64, 1.5, 0.1),
        stax.Relu(),
        agg,
        stax.GlobalAvgPool(),
        stax.Dense(1, 1.2, 0.05),
    )
    return kernel_fn


def graphs(rng, n, channels, nodes, weighted, counts=None):
    """Features (n, C, N) and adjacency (n, N, N); graph g has counts[g] real nodes."""
    x = rng.standard_normal((n, channels, nodes))
    a = (rng.random((n, nodes, nodes)) < 0.5).astype(np.float64)
    if weighted:
        a = a * rng.uniform(0.2, 1.5, size=a.shape)
    if counts is not None:
        for g, m in enumerate(counts):
            x[g, :, m:] = 0.0
            a[g, m:, :] = 0.0
            a[g, :, m:] = 0.0
    return x, a


def gnn_cases():
    kernel_fn = gnn_kernel_fn()
    rng = np.random.default_rng(0)
    out = []
    specs = [  # name, n1, channels, nodes, weighted, real nodes of x1, n2, real nodes of x2
        ("binary_self", 3, 3, 5, False, None, None, None),
        ("weighted_cross", 3, 2, 4, True, None, 2, None),
        ("padded_cross", 2, 3, 6, False, (4, 6), 3, (5, 3, 6)),
    ]
    for name, n1, c, nodes, weighted, counts1, n2, counts2 in specs:
        x1, a1 = graphs(rng, n1, c, nodes, weighted, counts1)
        x2 = a2 = None
        if n2 is not None:
            x2, a2 = graphs(rng, n2, c, nodes, weighted, counts2)
        t1 = jnp.asarray(x1.transpose(0, 2, 1))
        t2 = None if x2 is None else jnp.asarray(x2.transpose(0, 2, 1))
        pattern = (jnp.asarray(a1), jnp.asarray(a1 if a2 is None else a2))
        k = kernel_fn(t1, t2, ("nngp", "ntk"), pattern=pattern)
        out.append(
            {
                "name": name,
                "x1": x1.tolist(),
                "a1": a1.tolist(),
                "x2": None if x2 is None else x2.tolist(),
                "a2": None if a2 is None else a2.tolist(),
                "nngp": np.asarray(k.nngp).tolist(),
                "ntk": np.asarray(k.ntk).tolist(),
            }
        )
    return out


def _gnn1():
    return stax.serial(
        stax.Dense(64, 1.5, 0.1),
        stax.Relu(),
        stax.Aggregate(aggregate_axis=1, batch_axis=0, channel_axis=-1),
        stax.GlobalAvgPool(),
        stax.Dense(1, 1.2, 0.05),
    )


def _gnn2():
    agg = stax.Aggregate(aggregate_axis=1, batch_axis=0, channel_axis=-1)
    return stax.serial(
        stax.Dense(64, 1.5, 0.1),
        stax.Relu(),
        agg,
        stax.Dense(64, 1.5, 0.1),
        stax.Relu(),
        agg,
        stax.GlobalAvgPool(),
        stax.Dense(1, 1.2, 0.05),
    )


def _activation_gnn(activation):
    return lambda: stax.serial(
        stax.Dense(64, 1.5, 0.1),
        activation,
        stax.Aggregate(aggregate_axis=1, batch_axis=0, channel_axis=-1),
        stax.GlobalAvgPool(),
        stax.Dense(1, 1.2, 0.05),
    )


MASKED_ARCHITECTURES = {
    "gnn1": _gnn1,
    "gnn2": _gnn2,
    # NT's differences (see the module docstring): activations that NT does not remask
    "polynomial": _activation_gnn(stax.Polynomial([0.7, 1.0, 0.3])),
    "monomial0": _activation_gnn(stax.Monomial(0)),
}
DIFFERENT = ("polynomial", "monomial0")


def padded_graphs(rng, counts, channels, nodes, weighted, constant):
    """Graphs of ``counts[g]`` real nodes padded to ``nodes``: features ``(n, C, N)`` with
    ``constant`` at the padding, adjacency ``(n, N, N)`` with random weights everywhere
    (padded rows and columns included)."""
    x = rng.standard_normal((len(counts), channels, nodes))
    a = (rng.random((len(counts), nodes, nodes)) < 0.5).astype(np.float64)
    if weighted:
        a = a * rng.uniform(0.2, 1.5, size=a.shape)
    for g, m in enumerate(counts):
        x[g, :, m:] = constant
        a[g, m:, :] = np.maximum(a[g, m:, :], 0.5)  # padded nodes send ...
        a[g, :, m:] = np.maximum(a[g, :, m:], 0.5)  # ... and receive
    return x, a


def masked_cases():
    rng = np.random.default_rng(2)
    specs = [  # name, architecture, constant, counts1, counts2, channels, nodes, weighted
        ("gnn1_self_nan", "gnn1", "nan", (5, 3, 6), None, 3, 6, False),
        ("gnn1_cross_const", "gnn1", -7.0, (4, 6, 2), (3, 5), 2, 6, True),
        ("gnn2_cross_nan", "gnn2", "nan", (3, 5, 4), (5, 2), 3, 5, True),
        ("gnn2_self_const", "gnn2", -7.0, (2, 5, 4, 3), None, 2, 5, False),
        ("polynomial_cross_const", "polynomial", -7.0, (3, 3), (3, 3, 3), 2, 5, True),
        ("monomial0_cross_nan", "monomial0", "nan", (4, 4, 4), (4, 4), 3, 6, True),
    ]
    out = []
    for name, arch, constant, counts1, counts2, c, nodes, weighted in specs:
        value = float("nan") if constant == "nan" else constant
        x1, a1 = padded_graphs(rng, counts1, c, nodes, weighted, value)
        x2 = a2 = None
        if counts2 is not None:
            x2, a2 = padded_graphs(rng, counts2, c, nodes, weighted, value)
        init_fn, apply_fn, kernel_fn = MASKED_ARCHITECTURES[arch]()
        t1 = jnp.asarray(x1.transpose(0, 2, 1))
        t2 = None if x2 is None else jnp.asarray(x2.transpose(0, 2, 1))
        pattern = (jnp.asarray(a1), jnp.asarray(a1 if a2 is None else a2))
        k = kernel_fn(t1, t2, ("nngp", "ntk"), pattern=pattern, mask_constant=value)
        case = {
            "name": name,
            "architecture": arch,
            "mask_constant": constant,
            "x1": x1.tolist(),
            "a1": a1.tolist(),
            "x2": None if x2 is None else x2.tolist(),
            "a2": None if a2 is None else a2.tolist(),
            "nngp": np.asarray(k.nngp).tolist(),
            "ntk": np.asarray(k.ntk).tolist(),
        }
        if arch not in DIFFERENT:
            assert np.all(np.isfinite(case["nngp"])) and np.all(np.isfinite(case["ntk"])), name
        else:
            m = counts1[0]
            assert set(counts1) | set(counts2) == {m}
            s1, s2 = t1[:, :m], t2[:, :m]
            q = (pattern[0][:, :m, :m], pattern[1][:, :m, :m])
            short = kernel_fn(s1, s2, ("nngp", "ntk"), pattern=q)
            case["nt_unpadded_nngp"] = np.asarray(short.nngp).tolist()
            case["nt_unpadded_ntk"] = np.asarray(short.ntk).tolist()
            _, params = init_fn(jax.random.PRNGKey(0), t1.shape)
            f_pad = apply_fn(params, t1, pattern=pattern[0], mask_constant=value).masked_value
            f_short = apply_fn(params, s1, pattern=q[0])
            case["nt_apply_gap"] = float(np.max(np.abs(np.asarray(f_pad) - np.asarray(f_short))))
        out.append(case)
    return out


def dot_cases():
    rng = np.random.default_rng(1)
    h, w = 3, 4
    specs = [
        ("scalar", None, 2.0, (((), ()), ((), ())), 0),
        ("contract_rows", None, rng.standard_normal(h), (((2,), (0,)), ((), ())), 0),
        ("mix_columns", None, rng.standard_normal((w, 5)), (((3,), (0,)), ((), ())), 0),
        ("batch_columns", None, rng.standard_normal(w), (((), ()), ((3,), (0,))), 1),
        ("lhs_mix_rows", rng.standard_normal((2, h)), None, (((1,), (2,)), ((), ())), 1),
        ("outer", None, rng.standard_normal(2), (((), ()), ((), ())), 0),
    ]
    out = []
    # ``pool_batch``: the batch axis of lax.dot_general's output (1 when the constant's
    # axes come first); NT's GlobalAvgPool is told where the batch and channels went.
    for name, lhs, rhs, dims, pool_batch in specs:
        kw = {"lhs": lhs} if lhs is not None else {"rhs": rhs}
        _, _, kernel_fn = stax.serial(
            stax.Conv(
                64,
                (2, 2),
                padding="SAME",
                W_std=1.5,
                b_std=0.1,
                dimension_numbers=("NCHW", "OIHW", "NCHW"),
            ),
            stax.Relu(),
            stax.DotGeneral(dimension_numbers=dims, batch_axis=0, channel_axis=1, **kw),
            stax.GlobalAvgPool(batch_axis=pool_batch, channel_axis=pool_batch + 1),
            stax.Dense(1, 1.2, 0.05),
        )
        x1 = rng.standard_normal((3, 2, h, w))
        x2 = rng.standard_normal((2, 2, h, w))
        k = kernel_fn(jnp.asarray(x1), jnp.asarray(x2), ("nngp", "ntk"))
        out.append(
            {
                "name": name,
                "x1": x1.tolist(),
                "x2": x2.tolist(),
                "lhs": None if lhs is None else np.asarray(lhs).tolist(),
                "rhs": None if rhs is None else np.asarray(rhs).tolist(),
                "dimension_numbers": [[list(p) for p in part] for part in dims],
                "nngp": np.asarray(k.nngp).tolist(),
                "ntk": np.asarray(k.ntk).tolist(),
            }
        )
    return out


def main():
    data = {"gnn": gnn_cases(), "masked": masked_cases(), "dot": dot_cases()}
    with open(OUT_PATH, "w") as f:
        json.dump(data, f)
    print(
        f"wrote {OUT_PATH}: {len(data['gnn'])} gnn cases, {len(data['masked'])} masked gnn "
        f"cases, {len(data['dot'])} dot cases"
    )
    for case in data["masked"]:
        if "nt_apply_gap" in case:
            gap = np.abs(np.subtract(case["ntk"], case["nt_unpadded_ntk"])).max()
            print(
                f"{case['name']}: NT kernel padded+masked vs unpadded: max |ntk diff| "
                f"{gap:.3g}; NT apply_fn padded+masked vs unpadded: {case['nt_apply_gap']:.3g}"
            )


if __name__ == "__main__":
    main()
