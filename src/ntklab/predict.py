"""neural-tangents' ``predict`` API, in torch.

The functions below have the names, arguments and semantics of ``neural_tangents.predict``
(version 0.6.5, arXiv:1912.02803) and agree with it to rounding in float64 given the same
kernels (tests/data/nt_reference_kernels.json). Their conventions:

- time ``t`` counts steps: the flow time is ``learning_rate * t``, and the flow is on the loss
  :math:`\\frac{1}{2N}\\|f - y\\|^2` with :math:`N` = ``y_train.numel()`` (outputs included);
- ``t=None`` is infinity, computed by a linear solve (at which the training outputs equal
  ``y_train``);
- ``diag_reg`` is relative to the mean diagonal of the train kernel unless
  ``diag_reg_absolute_scale=True``;
- kernels are ``(n1, n2)`` matrices shared by every output (neural-tangents' ``trace_axes=(-1,)``).

:func:`gradient_descent` takes any differentiable loss in place of the squared one and solves
its flow as an ODE (adaptive RK45): the same ``t`` and ``learning_rate``, but finite times only.

ntklab's own front door, with discrete gradient descent and the "sum" normalization as well,
is :mod:`ntklab.dynamics`; these functions are thin wrappers over it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, cast

import torch
from torch import Tensor

from ._checks import check_matrix
from ._repr import summarize
from .dynamics.descent import Schedule, critical_learning_rate, loss_normalizer
from .dynamics.function_space import (
    Gaussian,
    KernelFn,
    _initial,
    _test_train,
    as_targets,
    ensemble_dynamics,
    gaussian_at,
    linearized_dynamics,
)
from .dynamics.loss_flow import Loss, loss_flow
from .dynamics.train_kernel import TrainKernel, as_times, ridge_value
from .errors import NtklabTypeError, NtklabValueError
from .solvers.dense import check_symmetric

__all__ = [
    "Gaussian",
    "Gaussians",
    "gp_inference",
    "gradient_descent",
    "gradient_descent_mse",
    "gradient_descent_mse_ensemble",
    "max_learning_rate",
]


class Gaussians(NamedTuple):
    """Predictions for several ``get`` values; the ones not requested are None."""

    nngp: Any = None
    ntk: Any = None

    def __repr__(self) -> str:
        return f"Gaussians(nngp={summarize(self.nngp)}, ntk={summarize(self.ntk)})"


def _canonical_get(get: object) -> tuple[tuple[str, ...], bool]:
    """``(gets, single)``: the requested kernels and whether a single name was given."""
    if get is None:
        return ("nngp", "ntk"), False
    if isinstance(get, str):
        names: tuple[str, ...] = (get,)
        single = True
    elif isinstance(get, tuple | list) and all(isinstance(g, str) for g in get):
        names = tuple(get)
        single = False
    else:
        raise NtklabTypeError(f"get: expected 'nngp', 'ntk', a tuple of them or None, got {get!r}")
    for g in names:
        if g not in ("nngp", "ntk"):
            raise NtklabValueError(f"get: expected 'nngp' or 'ntk', got {g!r}")
    return names, single


def _check_diag_reg(diag_reg: object) -> None:
    """Refuse a bad ``diag_reg`` under its neural-tangents name."""
    ridge_value(torch.ones(1), diag_reg, False, "diag_reg")  # type: ignore[arg-type]


def _pack(out: dict[str, Any], single: bool) -> Any:
    if single:
        return next(iter(out.values()))
    return Gaussians(**out)


def gradient_descent_mse(
    k_train_train: Tensor,
    y_train: Tensor,
    learning_rate: float = 1.0,
    diag_reg: float = 0.0,
    diag_reg_absolute_scale: bool = False,
) -> Callable[..., Any]:
    """Outputs of gradient flow on the squared loss in function space, at any time.

    Parameters
    ----------
    k_train_train : Tensor of shape (n, n)
        NTK (or NNGP) on the training inputs.
    y_train : Tensor of shape (n, k)
    learning_rate : float
    diag_reg : float
    diag_reg_absolute_scale : bool

    Returns
    -------
    predict_fn(t=None, fx_train_0=0.0, fx_test_0=None, k_test_train=None)
        Returns ``fx_train_t``, or ``(fx_train_t, fx_test_t)`` when ``fx_test_0`` is given, or
        ``fx_test_t`` alone when ``fx_train_0`` is None; with leading axes ``t.shape``.
        ``t`` is a time in steps at ``learning_rate`` (neural-tangents' units: the flow
        time is ``learning_rate * t``); None is infinity.

    Examples
    --------
    >>> import torch
    >>> from ntklab import predict
    >>> k = torch.eye(3, dtype=torch.float64)
    >>> y = torch.ones(3, 1, dtype=torch.float64)
    >>> fn = predict.gradient_descent_mse(k, y)
    >>> fn(t=3.0)[0, 0].item()  # 1 - exp(-3 / 3)
    0.6321205588285577
    """
    _check_diag_reg(diag_reg)
    dyn = linearized_dynamics(
        k_train_train,
        y_train,
        learning_rate=learning_rate,
        ridge=diag_reg,
        ridge_relative=not diag_reg_absolute_scale,
    )

    def predict_fn(
        t: Any = None,
        fx_train_0: Any = 0.0,
        fx_test_0: Any = None,
        k_test_train: Tensor | None = None,
    ) -> Any:
        if fx_test_0 is not None and k_test_train is None:
            raise NtklabValueError(
                "k_test_train: expected the test-train kernel (m, n) since fx_test_0 is given, "
                "got None"
            )
        train = None if fx_train_0 is None else dyn.train(t, fx_train_0)
        if fx_test_0 is None:
            return train
        f0 = 0.0 if fx_train_0 is None else fx_train_0
        test = dyn.test(t, cast(Tensor, k_test_train), f0, fx_test_0)
        return test if train is None else (train, test)

    return predict_fn


def gradient_descent(
    loss: Loss,
    k_train_train: Tensor,
    y_train: Tensor,
    learning_rate: float = 1.0,
    momentum: float | None = None,
    *,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    max_steps: int = 100_000,
) -> Callable[..., Any]:
    """Outputs of a linearized network trained by gradient descent on any loss, at any time.

    Solves :math:`\\dot f_t(X) = -\\eta\\, \\Theta_{XX} \\nabla_f L(f_t(X), Y)` and
    :math:`\\dot f_t(x) = -\\eta\\, \\Theta_{xX} \\nabla_f L(f_t(X), Y)` (Lee et al.
    arXiv:1902.06720) with an adaptive RK45 (Dormand-Prince) solver in float64, as
    neural-tangents' ``predict.gradient_descent``; with ``loss = lambda f, y: 0.5 *
    ((f - y) ** 2).mean()`` it is :func:`gradient_descent_mse` (which is in closed form).
    See :mod:`ntklab.dynamics.loss_flow` for momentum.

    Parameters
    ----------
    loss : callable ``loss(fx, y) -> scalar Tensor``
        Differentiable in ``fx`` (torch.autograd); ``fx`` and ``y`` have the shape of
        ``y_train`` (float64). It should treat examples and outputs symmetrically, e.g. the
        cross-entropy ``-(y * fx.log_softmax(-1)).mean()``.
    k_train_train : Tensor of shape (n, n)
        NTK on the training inputs, shared by every output.
    y_train : Tensor of shape (n, k) or (n,)
    learning_rate : float
        :math:`\\eta`. Without momentum the flow time is ``learning_rate * t``; with momentum it
        is ``sqrt(learning_rate) * t`` (neural-tangents' units).
    momentum : float in [0, 1], optional
        Heavy-ball momentum; None is plain gradient descent.
    rtol, atol : float
        The solver's relative and absolute tolerances on the outputs (keyword only; the
        defaults match the closed form of the squared loss to about 1e-9).
    max_steps : int
        The solver's step budget; more raises (the ODE is stiff at that horizon).

    Returns
    -------
    predict_fn(t, fx_train_0=0.0, fx_test_0=None, k_test_train=None)
        As :func:`gradient_descent_mse`'s: ``fx_train_t``, ``(fx_train_t, fx_test_t)`` when
        ``fx_test_0`` is given, or ``fx_test_t`` alone when ``fx_train_0`` is None, with
        leading axes ``t.shape``, in ``k_train_train``'s dtype. ``t`` (steps, any order, >= 0)
        must be finite: a general loss need not converge (cross-entropy never does).

    Examples
    --------
    >>> import torch
    >>> from ntklab import predict
    >>> k = torch.eye(3, dtype=torch.float64)
    >>> y = torch.ones(3, 1, dtype=torch.float64)
    >>> mse = lambda f, y: 0.5 * ((f - y) ** 2).mean()
    >>> fn = predict.gradient_descent(mse, k, y)
    >>> round(fn(t=3.0)[0, 0].item(), 9)  # 1 - exp(-3 / 3), as gradient_descent_mse
    0.632120559
    """
    flow = loss_flow(
        loss,
        k_train_train,
        y_train,
        learning_rate=learning_rate,
        momentum=momentum,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
    )
    out_dtype = k_train_train.dtype
    n, k = flow.y_train.shape

    def predict_fn(
        t: Any = None,
        fx_train_0: Any = 0.0,
        fx_test_0: Any = None,
        k_test_train: Tensor | None = None,
    ) -> Any:
        if fx_train_0 is None and fx_test_0 is None:
            raise NtklabValueError(
                "fx_train_0, fx_test_0: expected at least one initial output, got None for both"
            )
        if fx_test_0 is not None and k_test_train is None:
            raise NtklabValueError(
                "k_test_train: expected the test-train kernel (m, n) since fx_test_0 is given, "
                "got None"
            )
        if t is None:
            raise NtklabValueError(
                "t: expected finite times >= 0, got None (infinity): the flow of a general "
                "loss need not converge; use gradient_descent_mse for the squared loss"
            )
        like = flow.kernel
        times, t_shape = as_times(t, like=like)
        if not bool(torch.isfinite(times).all()) or bool((times < 0).any()):
            bad = times[~(torch.isfinite(times) & (times >= 0))][:3].tolist()
            raise NtklabValueError(f"t: expected finite times >= 0, got {bad}")
        f0 = _initial(0.0 if fx_train_0 is None else fx_train_0, (n, k), like, "fx_train_0")
        ktd = like.new_zeros((0, n))
        ft0 = None
        if fx_test_0 is not None:
            ktd = _test_train(k_test_train, None, n, like, "k_test_train")
            ft0 = _initial(fx_test_0, (int(ktd.shape[0]), k), like, "fx_test_0")
        # Solve at the distinct times in increasing order, then restore the caller's order.
        uniq, inverse = torch.unique(times, sorted=True, return_inverse=True)
        train, test = flow.solve(uniq, f0, ft0, ktd)

        def shaped(x: Tensor) -> Tensor:
            x = x[inverse].reshape(*t_shape, *x.shape[1:]).to(out_dtype)
            return x[..., 0] if flow.vector else x

        if fx_test_0 is None:
            return shaped(train)
        return shaped(test) if fx_train_0 is None else (shaped(train), shaped(test))

    return predict_fn


def gradient_descent_mse_ensemble(
    kernel_fn: KernelFn | object,
    x_train: Tensor,
    y_train: Tensor,
    learning_rate: float = 1.0,
    diag_reg: float = 0.0,
    diag_reg_absolute_scale: bool = False,
) -> Callable[..., Any]:
    """Mean and covariance of an infinite ensemble of infinitely wide networks in training.

    Parameters
    ----------
    kernel_fn : Architecture or callable ``(x1, x2) -> Kernel``
    x_train : Tensor of shape (n, d), or channels-first images (n, C, *S)
        Whatever ``kernel_fn`` takes, as in :func:`ntklab.dynamics.ensemble_dynamics`.
    y_train : Tensor of shape (n, k)
    learning_rate, diag_reg, diag_reg_absolute_scale
        As in :func:`gradient_descent_mse`.

    Returns
    -------
    predict_fn(t=None, x_test=None, get=None, compute_cov=False)
        For ``get`` a string, the mean (``compute_cov=False``) or a :class:`Gaussian`; for a
        tuple or None (both), a :class:`Gaussians` of them. ``x_test=None`` predicts on the
        training inputs. ``t`` is a time in steps at ``learning_rate`` (the flow time is
        ``learning_rate * t``); None is infinity.
    """
    _check_diag_reg(diag_reg)
    dyn = ensemble_dynamics(
        kernel_fn,
        x_train,
        y_train,
        learning_rate=learning_rate,
        ridge=diag_reg,
        ridge_relative=not diag_reg_absolute_scale,
    )

    def predict_fn(
        t: Any = None, x_test: Tensor | None = None, get: Any = None, compute_cov: bool = False
    ) -> Any:
        names, single = _canonical_get(get)
        out = dyn.predict_many(t, x_test, names, compute_cov)  # type: ignore[arg-type]
        return _pack(out, single)

    return predict_fn


def _kernel_part(k: Any, get: str, name: str) -> Tensor:
    part = getattr(k, get, k)
    if not isinstance(part, Tensor):
        raise NtklabTypeError(
            f"{name}: expected a Kernel with nngp/ntk or a tensor, got {type(k).__name__}"
        )
    return part


def gp_inference(
    k_train_train: Any,
    y_train: Tensor,
    diag_reg: float = 0.0,
    diag_reg_absolute_scale: bool = False,
) -> Callable[..., Any]:
    """Exact Bayesian inference with the NNGP, or the ensemble of NTK-trained networks, at
    :math:`t=\\infty`.

    Parameters
    ----------
    k_train_train : Kernel or Tensor of shape (n, n)
        A :class:`~ntklab.Kernel` (both kernels) or one matrix (then ``get`` selects nothing).
    y_train : Tensor of shape (n, k)
    diag_reg, diag_reg_absolute_scale
        As in :func:`gradient_descent_mse`.

    Returns
    -------
    predict_fn(get=None, k_test_train=None, k_test_test=None)
        Means, or :class:`Gaussian` when ``k_test_test`` (the NNGP on the test inputs) is
        given. The NTK covariance needs the NNGP parts of ``k_train_train`` and
        ``k_test_train`` too.
    """
    factors: dict[str, TrainKernel] = {}

    def factor(g: str) -> TrainKernel:
        if g not in factors:
            k = check_symmetric(
                f"k_train_train.{g}", _kernel_part(k_train_train, g, "k_train_train")
            )
            # The schedule is irrelevant at t = infinity; N only scales time.
            factors[g] = TrainKernel(
                k,
                Schedule("flow", 1.0, 1.0),
                diag_reg,
                not diag_reg_absolute_scale,
                f"{g} train",
                reg_name="diag_reg",
            )
        return factors[g]

    def predict_fn(get: Any = None, k_test_train: Any = None, k_test_test: Any = None) -> Any:
        names, single = _canonical_get(get)
        out: dict[str, Any] = {}
        for g in names:
            fac = factor(g)
            y, vector = as_targets(y_train, fac.n, like=fac.kernel)
            if k_test_train is None:
                mean = y[:, 0] if vector else y.clone()
                out[g] = (
                    mean if k_test_test is None else Gaussian(mean, torch.zeros_like(fac.kernel))
                )
                continue
            nngp_train = _kernel_part(k_train_train, "nngp", "k_train_train")
            out[g] = gaussian_at(
                fac,
                None,
                y,
                nngp_train.to(y.dtype),
                theta_td=_kernel_part(k_test_train, g, "k_test_train"),
                nngp_td=_kernel_part(k_test_train, "nngp", "k_test_train"),
                nngp_tt=None
                if k_test_test is None
                else _kernel_part(k_test_test, "nngp", "k_test_test"),
                compute_cov=k_test_test is not None,
                get=g,  # type: ignore[arg-type]
                vector=vector,
            )
        return _pack(out, single)

    return predict_fn


def max_learning_rate(
    ntk_train_train: Tensor,
    y_train_size: int | None = None,
    momentum: float = 0.0,
    eps: float = 1e-12,
) -> float:
    """The largest learning rate for which gradient descent on the squared loss converges.

    .. math:: \\eta_{max} = 2 (1 + \\mu)\\, N / (\\lambda_{max}(\\Theta) + \\epsilon)

    with :math:`N` = ``y_train_size`` (default: the number of rows of the kernel), for the loss
    :math:`\\frac{1}{2N}\\|f - y\\|^2` (neural-tangents' ``max_learning_rate``).
    """
    k = check_symmetric("ntk_train_train", check_matrix("ntk_train_train", ntk_train_train))
    size = int(k.shape[0]) if y_train_size is None else int(y_train_size)
    if size < 1:
        raise NtklabValueError(f"y_train_size: expected an int >= 1, got {y_train_size}")
    normalizer = loss_normalizer("mean", size)
    lam = float(torch.linalg.eigvalsh(k.to(torch.float64))[-1])
    return critical_learning_rate(lam + eps, normalizer, momentum)
