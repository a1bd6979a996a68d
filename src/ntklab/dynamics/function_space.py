"""Closed-form training dynamics in function space: one linearized network, and an ensemble.

One network (:class:`LinearizedDynamics`). A network linearized around its initialization and
trained on the squared loss (:mod:`.descent` for the loss, the time unit and the schedules) has,
with :math:`\\Theta` its tangent kernel, :math:`\\Theta_r = \\Theta + \\rho I` and
:math:`\\Phi_t = \\Theta_r^{-1}(I - D_t)`,

.. math::

    f_t(X) = Y + D_t\\,(f_0(X) - Y), \\qquad
    f_t(x) = f_0(x) + \\Theta_{x X}\\, \\Phi_t\\, (Y - f_0(X)),

where :math:`D_t = e^{-\\eta t \\Theta_r/N}` (flow) or :math:`(I - \\eta\\Theta_r/N)^t` (descent).
At :math:`t = \\infty`, :math:`\\Phi_\\infty = \\Theta_r^{-1}`: kernel ridge regression, or
minimum-norm interpolation without ridge (Jacot et al. arXiv:1806.07572; Lee et al.
arXiv:1902.06720).

An ensemble (:class:`EnsembleDynamics`). Over random initializations :math:`f_0` is the
NNGP :math:`\\mathcal{GP}(0, K)` and, at infinite width, :math:`\\Theta` is deterministic, so
:math:`f_t` is Gaussian, :math:`\\mathcal{G}_t`, with (:math:`A_t = \\Theta_{xX}\\Phi_t`)

.. math::

    \\mu_t(x) = A_t Y, \\qquad
    \\Sigma_t(x, x') = K_{xx'} - A_t K_{Xx'} - K_{xX} A_t'^T + A_t K_{XX} A_t'^T,

and on the training set :math:`\\mu_t = (I - D_t) Y`, :math:`\\Sigma_t = D_t K_{XX} D_t`.
``get="nngp"`` is the same with the NNGP in place of :math:`\\Theta` (Bayesian inference with
the NNGP prior at :math:`t=\\infty`), where, as in neural-tangents, the regularized NNGP also
stands for :math:`K_{XX}`. These are the conventions of neural-tangents 0.6.5
(arXiv:1912.02803), whose ``predict`` functions ntklab reproduces to rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, NamedTuple, cast

import torch
from torch import Tensor

from .._checks import check_matrix
from .._inputs import check_kernel_inputs
from .._repr import short_repr, summarize
from ..errors import NtklabTypeError, NtklabValueError
from ..kernels.kernel import Kernel
from ..solvers.dense import symmetrize
from .descent import Schedule, loss_normalizer
from .train_kernel import TrainKernel, as_times

__all__ = [
    "EnsembleDynamics",
    "Gaussian",
    "Get",
    "KernelFn",
    "LinearizedDynamics",
    "as_targets",
    "ensemble_dynamics",
    "gaussian_at",
    "linearized_dynamics",
]

Get = Literal["nngp", "ntk"]
KernelFn = Callable[[Tensor, Tensor | None], Kernel]


class Gaussian(NamedTuple):
    """Mean and covariance of a Gaussian over outputs.

    ``mean`` has shape (..., m, k) and ``covariance`` (..., m, m), the same for each of the k
    outputs (the kernels are :math:`K \\otimes I_k`); leading axes follow the times.
    """

    mean: Tensor
    covariance: Tensor

    def __repr__(self) -> str:
        return f"Gaussian(mean={summarize(self.mean)}, covariance={summarize(self.covariance)})"


def as_targets(y: object, n: int, *, like: Tensor, name: str = "y_train") -> tuple[Tensor, bool]:
    """Return targets as an (n, k) tensor of ``like``'s dtype, and whether they were 1-D."""
    if not isinstance(y, Tensor):
        raise NtklabTypeError(f"{name}: expected a torch.Tensor of shape (n, k), got {type(y)}")
    if y.ndim not in (1, 2):
        raise NtklabValueError(
            f"{name}: expected shape (n,) or (n, k), got {y.ndim}-D shape {tuple(y.shape)}"
        )
    if y.shape[0] != n:
        raise NtklabValueError(
            f"{name}: expected {n} rows (one per training input), got shape {tuple(y.shape)}"
        )
    if not bool(torch.isfinite(y).all()):
        raise NtklabValueError(f"{name}: expected finite values, got NaN or inf")
    vector = y.ndim == 1
    y2 = y[:, None] if vector else y
    return y2.to(dtype=like.dtype, device=like.device), vector


def _initial(f0: object, shape: tuple[int, int], like: Tensor, name: str) -> Tensor:
    """An initial output as an (m, k) tensor: a number broadcasts, a tensor must match."""
    if isinstance(f0, int | float) and not isinstance(f0, bool):
        return torch.full(shape, float(f0), dtype=like.dtype, device=like.device)
    if not isinstance(f0, Tensor):
        raise NtklabTypeError(f"{name}: expected a number or a tensor of shape {shape}, got {f0!r}")
    t = f0[:, None] if f0.ndim == 1 and shape[1] == 1 else f0
    if tuple(t.shape) != shape:
        raise NtklabValueError(f"{name}: expected shape {shape}, got {tuple(f0.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise NtklabValueError(f"{name}: expected finite values, got NaN or inf")
    return t.to(dtype=like.dtype, device=like.device)


def _test_train(k: object, m: int | None, n: int, like: Tensor, name: str) -> Tensor:
    if not isinstance(k, Tensor):
        raise NtklabTypeError(f"{name}: expected a torch.Tensor of shape (m, {n}), got {type(k)}")
    if k.ndim != 2 or k.shape[1] != n or (m is not None and k.shape[0] != m):
        want = f"({'m' if m is None else m}, {n})"
        raise NtklabValueError(f"{name}: expected shape {want}, got {tuple(k.shape)}")
    if not bool(torch.isfinite(k).all()):
        raise NtklabValueError(f"{name}: expected finite values, got NaN or inf")
    return k.to(dtype=like.dtype, device=like.device)


def _shape_times(x: Tensor, t_shape: tuple[int, ...] | None, vector: bool) -> Tensor:
    """Reshape a (T, m, k) result to ``t_shape + (m, k)``; drop k when the targets were 1-D."""
    x = x[0] if t_shape is None else x.reshape(*t_shape, *x.shape[1:])
    return x[..., 0] if vector else x


def _make_schedule(
    schedule: str, learning_rate: float, normalization: str, y_numel: int
) -> Schedule:
    if schedule not in ("flow", "gd"):
        raise NtklabValueError(f"schedule: expected 'flow' or 'gd', got {schedule!r}")
    return Schedule(
        kind=cast(Literal["flow", "gd"], schedule),
        learning_rate=learning_rate,
        normalizer=loss_normalizer(normalization, y_numel),
    )


@short_repr
@dataclass(frozen=True, eq=False)
class LinearizedDynamics:
    """Outputs of one linearized network under descent on the squared loss, in closed form.

    Build it with :func:`linearized_dynamics`. The eigendecomposition (finite times) and the
    Cholesky factor (``t=None``) of the train kernel are computed once and reused.
    """

    train_kernel: TrainKernel
    y_train: Tensor  # shape: (n, k)
    vector: bool = False

    def train(self, t: object | None, fx_train_0: object = 0.0) -> Tensor:
        """Training-set outputs :math:`f_t(X)`.

        Parameters
        ----------
        t : float, array of floats, or None
            Time(s) in steps (the flow time is ``learning_rate * t``); None is infinity.
        fx_train_0 : float or Tensor of shape (n, k)

        Returns
        -------
        Tensor of shape ``t.shape + (n, k)`` (``(n, k)`` for a scalar or None)
        """
        y = self.y_train
        f0 = _initial(fx_train_0, tuple(y.shape), y, "fx_train_0")  # type: ignore[arg-type]
        if t is None:
            # As neural-tangents: at infinite time the training outputs equal the targets.
            return _shape_times(y.clone()[None], None, self.vector)
        times, shape = as_times(t, like=y)
        delta = self.train_kernel.residual(times, f0 - y)  # shape: (T, n, k)
        out = y[None] + delta
        return _shape_times(out, shape, self.vector)

    def test(
        self,
        t: object | None,
        k_test_train: Tensor,
        fx_train_0: object = 0.0,
        fx_test_0: object = 0.0,
    ) -> Tensor:
        """Test outputs :math:`f_t(x) = f_0(x) + \\Theta_{xX}\\Phi_t(Y - f_0(X))`.

        Parameters
        ----------
        t : float, array of floats, or None
            Time(s) in steps (the flow time is ``learning_rate * t``); None is infinity.
        k_test_train : Tensor of shape (m, n)
            :math:`\\Theta(x_{test}, X)`.
        fx_train_0 : float or Tensor of shape (n, k)
        fx_test_0 : float or Tensor of shape (m, k)

        Returns
        -------
        Tensor of shape ``t.shape + (m, k)``
        """
        y = self.y_train
        n, k = y.shape
        ktd = _test_train(k_test_train, None, int(n), y, "k_test_train")
        f0 = _initial(fx_train_0, (int(n), int(k)), y, "fx_train_0")
        ft0 = _initial(fx_test_0, (int(ktd.shape[0]), int(k)), y, "fx_test_0")
        if t is None:
            out = ft0 + ktd @ self.train_kernel.integrated(None, y - f0)
            return _shape_times(out[None], None, self.vector)
        times, shape = as_times(t, like=y)
        out = ft0[None] + ktd @ self.train_kernel.integrated(times, y - f0)
        return _shape_times(out, shape, self.vector)


def linearized_dynamics(
    k_train_train: Tensor,
    y_train: Tensor,
    *,
    learning_rate: float = 1.0,
    ridge: float = 0.0,
    ridge_relative: bool = True,
    schedule: str = "flow",
    normalization: str = "mean",
) -> LinearizedDynamics:
    """Closed-form outputs of a network linearized at initialization, at any training time.

    Parameters
    ----------
    k_train_train : Tensor of shape (n, n)
        Its tangent kernel on the training inputs (analytic or empirical), symmetric PSD.
    y_train : Tensor of shape (n, k) or (n,)
    learning_rate : float
        Step :math:`\\eta`; times count steps.
    ridge : float
        :math:`\\rho \\ge 0` added to the diagonal of the train kernel, times its mean
        diagonal when ``ridge_relative`` (neural-tangents' ``diag_reg``).
    ridge_relative : bool
        Whether ``ridge`` is relative to the mean diagonal (default, scale-free, as
        neural-tangents' ``diag_reg_absolute_scale=False``) or absolute.
    schedule : {"flow", "gd"}
        Gradient flow, or discrete gradient descent (integer times; a warning when
        ``learning_rate`` is above the critical :math:`2N/\\lambda_{max}`).
    normalization : {"mean", "sum"}
        The loss :math:`\\frac{1}{2N}\\|f-y\\|^2` with :math:`N` = ``y_train.numel()`` or 1.

    Returns
    -------
    LinearizedDynamics

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))
    >>> x, y = torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 1, dtype=torch.float64)
    >>> dyn = nl.dynamics.linearized_dynamics(arch.kernel(x).ntk, y)
    >>> torch.allclose(dyn.train(1e9), y)
    True
    """
    k = check_matrix("k_train_train", k_train_train)
    y, vector = as_targets(y_train, int(k.shape[0]), like=k)
    sched = _make_schedule(schedule, learning_rate, normalization, y.numel())
    tk = TrainKernel(k, sched, ridge, ridge_relative)
    return LinearizedDynamics(tk, y, vector)


def _kernel_of(kernel_fn: object, x1: Tensor, x2: Tensor | None) -> Kernel:
    fn = getattr(kernel_fn, "kernel", kernel_fn)
    if not callable(fn):
        raise NtklabTypeError(
            "kernel_fn: expected an ntklab architecture or a callable (x1, x2) -> Kernel, got "
            f"{type(kernel_fn).__name__}"
        )
    out = fn(x1, x2)
    if not (hasattr(out, "nngp") and hasattr(out, "ntk")):
        raise NtklabTypeError(
            f"kernel_fn: expected it to return a Kernel with nngp and ntk, got {type(out)}"
        )
    return cast(Kernel, out)


@short_repr
@dataclass(frozen=True, eq=False)
class EnsembleDynamics:
    """The Gaussian process :math:`\\mathcal{G}_t` of an infinite ensemble of wide networks.

    Build it with :func:`ensemble_dynamics`. The train kernels and their factorizations are
    computed once per ``get`` and reused across times and test sets.
    """

    kernel_fn: KernelFn
    x_train: Tensor
    y_train: Tensor  # shape: (n, k)
    schedule: Schedule
    ridge: float = 0.0
    ridge_relative: bool = True
    vector: bool = False
    _factors: dict[str, TrainKernel] = field(default_factory=dict, repr=False)

    @cached_property
    def train_kernels(self) -> Kernel:
        """NNGP and NTK on the training inputs."""
        return _kernel_of(self.kernel_fn, self.x_train, None)

    def factor(self, get: Get) -> TrainKernel:
        """The regularized train kernel of ``get`` with its cached factorizations."""
        if get not in self._factors:
            k = getattr(self.train_kernels, get).to(self.y_train.dtype)
            self._factors[get] = TrainKernel(
                k, self.schedule, self.ridge, self.ridge_relative, name=f"{get} train"
            )
        return self._factors[get]

    def predict(
        self,
        t: object | None = None,
        x_test: Tensor | None = None,
        get: Get = "ntk",
        compute_cov: bool = False,
    ) -> Tensor | Gaussian:
        """Mean (and covariance) of the ensemble's outputs at time(s) ``t``.

        Parameters
        ----------
        t : float, array of floats, or None
            Time(s) in steps at ``learning_rate`` (the flow time is ``learning_rate * t``);
            None is infinity.
        x_test : Tensor of shape (m, d), or (m, C, *S) images like ``x_train``, optional
            None: the training inputs (with the regularized kernel standing for the train
            kernel, as neural-tangents does).
        get : {"ntk", "nngp"}
            Gradient descent on the NTK, or Bayesian inference / descent on the NNGP.
        compute_cov : bool

        Returns
        -------
        Tensor of shape ``t.shape + (m, k)``, or Gaussian with covariance ``t.shape + (m, m)``
        """
        return self.predict_many(t, x_test, (get,), compute_cov)[get]

    def predict_many(
        self,
        t: object | None,
        x_test: Tensor | None,
        gets: tuple[Get, ...],
        compute_cov: bool = False,
    ) -> dict[str, Tensor | Gaussian]:
        """:meth:`predict` for several ``get`` at once; the test kernels are computed once.

        ``t`` as in :meth:`predict`: time in steps at ``learning_rate``, None for infinity.
        """
        for get in gets:
            if get not in ("nngp", "ntk"):
                raise NtklabValueError(f"get: expected 'nngp' or 'ntk', got {get!r}")
        y = self.y_train
        nngp_train = self.train_kernels.nngp.to(y.dtype)
        if x_test is None:
            return {
                get: gaussian_at(
                    self.factor(get),
                    t,
                    y,
                    nngp_train,
                    compute_cov=compute_cov,
                    get=get,
                    vector=self.vector,
                )
                for get in gets
            }
        check_kernel_inputs(self.kernel_fn, self.x_train, x_test, names=("x_train", "x_test"))
        k_td = _kernel_of(self.kernel_fn, x_test, self.x_train)
        k_tt = _kernel_of(self.kernel_fn, x_test, None).nngp if compute_cov else None
        return {
            get: gaussian_at(
                self.factor(get),
                t,
                y,
                nngp_train,
                theta_td=getattr(k_td, get),
                nngp_td=k_td.nngp,
                nngp_tt=k_tt,
                compute_cov=compute_cov,
                get=get,
                vector=self.vector,
            )
            for get in gets
        }


def gaussian_at(
    fac: TrainKernel,
    t: object | None,
    y: Tensor,
    nngp_train: Tensor,
    *,
    theta_td: Tensor | None = None,
    nngp_td: Tensor | None = None,
    nngp_tt: Tensor | None = None,
    compute_cov: bool,
    get: Get,
    vector: bool = False,
) -> Tensor | Gaussian:
    r"""Mean (and covariance) of :math:`\mathcal{G}_t` from factored train kernels.

    ``theta_td`` None means the training inputs. ``get="nngp"`` uses the regularized train
    NNGP as the middle kernel :math:`K_{XX}` (neural-tangents' convention), ``"ntk"`` the
    plain NNGP ``nngp_train``. Shapes as in :meth:`EnsembleDynamics.predict`.
    """
    times, shape = (None, None) if t is None else as_times(t, like=y)
    middle = fac.regularized if get == "nngp" else nngp_train
    if theta_td is None:
        if times is None:
            mean = y.clone()[None]
            cov = torch.zeros(1, fac.n, fac.n, dtype=y.dtype, device=y.device)
        else:
            mean = y[None] - fac.residual(times, y)
            cov = fac.sandwich(times, middle)  # D_t K D_t, shape: (T, n, n)
    else:
        theta_td = _test_train(theta_td, None, fac.n, y, "k_test_train")
        integrated = fac.integrated(times, theta_td.T)  # Phi_t Theta_Xx: (T, n, m) or (n, m)
        a = integrated.transpose(-1, -2) if times is not None else integrated.T[None]
        mean = a @ y  # shape: (T, m, k)
        if compute_cov:
            m = int(theta_td.shape[0])
            if nngp_td is None or nngp_tt is None:
                raise NtklabValueError(
                    "k_test_test: expected the NNGP test-test and test-train kernels for the "
                    "covariance, got None"
                )
            k_td = _test_train(nngp_td, m, fac.n, y, "k_test_train.nngp")
            k_tt = nngp_tt.to(dtype=y.dtype, device=y.device)
            if tuple(k_tt.shape) != (m, m):
                raise NtklabValueError(
                    f"k_test_test: expected shape ({m}, {m}), got {tuple(k_tt.shape)}"
                )
            cross = a @ k_td.T  # A K_Xx, shape: (T, m, m)
            cov = k_tt - cross - cross.transpose(-1, -2) + a @ middle @ a.transpose(-1, -2)
    mean_out = _shape_times(mean, shape, vector)
    if not compute_cov:
        return mean_out
    cov = symmetrize(cov)
    cov = cov.reshape(*shape, *cov.shape[1:]) if shape is not None else cov[0]
    return Gaussian(mean_out, cov)


def ensemble_dynamics(
    kernel_fn: KernelFn | object,
    x_train: Tensor,
    y_train: Tensor,
    *,
    learning_rate: float = 1.0,
    ridge: float = 0.0,
    ridge_relative: bool = True,
    schedule: str = "flow",
    normalization: str = "mean",
) -> EnsembleDynamics:
    """The Gaussian process of an infinite ensemble of infinitely wide networks in training.

    Parameters
    ----------
    kernel_fn : Architecture or callable ``(x1, x2) -> Kernel``
        Gives the NNGP (the law of the initial outputs) and the NTK (the dynamics).
    x_train : Tensor of shape (n, d), or channels-first images (n, C, L) or (n, C, H, W)
        Whatever ``kernel_fn`` takes (:func:`ntklab._inputs.check_kernel_inputs`): images
        for an architecture with Conv or pooling layers.
    y_train : Tensor of shape (n, k) or (n,)
    learning_rate, ridge, ridge_relative, schedule, normalization
        As in :func:`linearized_dynamics`.

    Returns
    -------
    EnsembleDynamics
    """
    fn = kernel_fn if callable(kernel_fn) or hasattr(kernel_fn, "kernel") else None
    if fn is None:
        raise NtklabTypeError(
            "kernel_fn: expected an ntklab architecture or a callable (x1, x2) -> Kernel, got "
            f"{type(kernel_fn).__name__}"
        )
    x, _ = check_kernel_inputs(fn, x_train, names=("x_train", "x_test"))
    y, vector = as_targets(y_train, int(x.shape[0]), like=x)
    sched = _make_schedule(schedule, learning_rate, normalization, y.numel())
    return EnsembleDynamics(cast(KernelFn, fn), x, y, sched, ridge, ridge_relative, vector)
