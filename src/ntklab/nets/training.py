r"""Training finite networks: full-batch gradient descent and minibatch SGD for ``t`` steps at
``learning_rate``, with the diagnostics of the NTK literature (kernel drift, weight movement).

Loss convention (shared with :mod:`ntklab.dynamics`). For outputs :math:`f` and targets
:math:`y` of the same shape, with :math:`N` = ``y.numel()`` (examples times outputs):

.. math::

    L_{\text{mse}} = \frac{1}{2N} \sum (f - y)^2 \quad (\text{normalization="mean"}), \qquad
    L_{\text{mse}} = \frac12 \sum (f - y)^2 \quad (\text{normalization="sum"}),

the ``"mean"`` one being the convention of neural-tangents' ``predict``; the hinge loss
(labels :math:`y \in \{-1, +1\}`) is the mean (or the sum) of :math:`\max(0, 1 - y f)`.
Time is counted as in neural-tangents' ``predict`` and in :mod:`ntklab.dynamics`: ``t`` is a
number of steps of size ``learning_rate`` (:math:`\eta`). Gradient descent for :math:`t` steps
is the Euler discretization of the gradient flow :math:`\dot\theta = -\nabla_\theta L` up to
the continuous time :math:`\eta t`, so ``train(..., learning_rate=eta, t=t)`` is compared with
``ensemble_dynamics(..., learning_rate=eta).predict(t)`` (or ``gradient_descent_mse(...,
learning_rate=eta)(t)``) at the same ``t``; runs at different learning rates agree to
:math:`O(\eta)` when their flow times :math:`\eta t` agree.

Minibatch SGD (``batch_size=B``) draws batches without replacement, a fresh permutation per
epoch (the last batch of an epoch may be smaller). A batch of :math:`b` examples has loss
:math:`\frac{1}{b}\sum_{i \in \text{batch}} \ell_i` with ``"mean"`` (:math:`\ell_i` the mean
over the outputs of example :math:`i`) and :math:`\frac{n}{b} \sum_{i \in \text{batch}}
\ell_i` with ``"sum"`` (:math:`\ell_i` the sum over its outputs): for a uniformly random batch
its expectation, and that of its gradient, is the full-batch loss, so one SGD step advances
``t`` by one (the flow time by :math:`\eta`) as well.

Weight decay adds :math:`\frac{\lambda}{2}\lVert\theta\rVert^2` to the objective (its gradient
:math:`\lambda\theta` is added to every trainable parameter's gradient, whatever the
optimizer). A :class:`~ntklab.nets.ScaledOutput` model with scale :math:`\alpha` (lazy
training, arXiv:1812.07956) is trained on :math:`L(\alpha f) / \alpha^2`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Literal, TypedDict, Unpack

import torch
from torch import Tensor, nn
from torch.nn.parameter import UninitializedParameter

from .._checks import check_nonnegative, check_positive_int
from .._repr import short_repr
from ..dynamics.descent import Normalization
from ..errors import NtklabTypeError, NtklabValueError, NumericalWarning
from .wrappers import output_scale

__all__ = [
    "LossName",
    "Normalization",
    "OptimizerFactory",
    "TrainOptions",
    "TrainingHistory",
    "TrainingRecord",
    "TrainingRun",
    "data_loss",
    "train",
]

#: The training loss of :func:`train`: the squared loss or the hinge loss.
LossName = Literal["mse", "hinge"]
OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
"""Builds the optimizer from the trainable parameters, e.g.
``lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)``."""


@short_repr
@dataclass(frozen=True)
class TrainingRecord:
    """The diagnostics at one logged step (Python floats), as passed to ``callback``.

    ``train_loss`` and ``test_loss`` are the full-batch data losses of the model's output
    (without the :math:`1/\\alpha^2` factor and without the weight-decay penalty).
    ``kernel_drift`` is :math:`\\lVert\\Theta_t - \\Theta_0\\rVert_F /
    \\lVert\\Theta_0\\rVert_F`; ``weight_movement`` is
    :math:`\\lVert\\theta_t - \\theta_0\\rVert / \\lVert\\theta_0\\rVert` over all trainable
    parameters and ``parameter_movement`` the same per parameter tensor (by name; a tensor
    that starts at exactly zero reports :math:`\\lVert p_t - p_0\\rVert`, unnormalized).
    """

    step: int
    flow_time: float
    train_loss: float
    test_loss: float | None
    kernel_drift: float | None
    weight_movement: float
    parameter_movement: Mapping[str, float]


@short_repr
@dataclass(frozen=True)
class TrainingHistory:
    """The logged diagnostics of a run: float64 CPU tensors of shape (r,), one entry per
    logged step (step 0, every ``log_every`` steps, and the last step). See
    :class:`TrainingRecord` for the definitions.

    ``step`` is int64, the ``t`` reached at each log; ``flow_time`` is ``learning_rate * step``,
    the continuous time of the gradient flow the run discretizes; ``test_loss`` is None without
    test data and ``kernel_drift`` None without ``kernel_inputs``.
    """

    step: Tensor
    flow_time: Tensor
    train_loss: Tensor
    test_loss: Tensor | None
    kernel_drift: Tensor | None
    weight_movement: Tensor
    parameter_movement: Mapping[str, Tensor]

    def __len__(self) -> int:
        return int(self.step.shape[0])


@short_repr
@dataclass(frozen=True)
class TrainingRun:
    """The result of :func:`train`.

    Attributes
    ----------
    model : nn.Module
        The trained model (the one passed in, trained in place).
    history : TrainingHistory
        The logged diagnostics; all finite (a non-finite loss is never logged).
    learning_rate : float
    steps : int
        Optimizer steps taken: ``t`` (fewer when the run diverged).
    diverged : bool
        Whether a non-finite loss stopped the run (a ``NumericalWarning`` said where); the
        model then holds the parameters at which the loss was non-finite.
    alpha : float
        The output scale read from the model (1.0 unless it is a ``ScaledOutput``).
    """

    model: nn.Module
    history: TrainingHistory
    learning_rate: float
    steps: int
    diverged: bool
    alpha: float

    @property
    def flow_time(self) -> float:
        """Continuous gradient-flow time reached, ``learning_rate * steps``."""
        return self.learning_rate * self.steps


# ---------------------------------------------------------------------------------------------
# losses


def _loss(out: Tensor, y: Tensor, loss: str, normalization: str, n_total: int) -> Tensor:
    """The (minibatch) loss: see the module docstring for the normalization."""
    residual = out - y if loss == "mse" else torch.relu(1.0 - y * out)  # hinge
    terms = residual.square().sum().mul(0.5) if loss == "mse" else residual.sum()
    if normalization == "mean":
        return terms / y.numel()
    rows = y.shape[0]
    return terms if rows == n_total else terms * (n_total / rows)


def data_loss(
    prediction: Tensor,
    target: Tensor,
    *,
    loss: LossName = "mse",
    normalization: Normalization = "mean",
) -> Tensor:
    r"""The training loss of :func:`train` on a full batch.

    .. math:: L_{\text{mse}} = \frac{c}{2} \sum (f - y)^2, \qquad
              L_{\text{hinge}} = c \sum \max(0, 1 - y f),

    with :math:`c = 1/N` (``"mean"``, :math:`N` = ``target.numel()``) or :math:`c = 1`
    (``"sum"``).

    Parameters
    ----------
    prediction : Tensor of any shape
    target : Tensor of the same shape
        For the hinge loss, labels in {-1, +1}.
    loss : {"mse", "hinge"}
    normalization : {"mean", "sum"}

    Returns
    -------
    Tensor
        A scalar, differentiable in ``prediction``.

    Examples
    --------
    >>> import torch
    >>> float(data_loss(torch.tensor([1.0, 3.0]), torch.tensor([0.0, 0.0])))
    2.5
    """
    _check_loss_names(loss, normalization)
    if not isinstance(prediction, Tensor) or not isinstance(target, Tensor):
        bad = "prediction" if not isinstance(prediction, Tensor) else "target"
        raise NtklabTypeError(f"{bad}: expected a torch.Tensor, got a non-tensor")
    if prediction.shape != target.shape:
        raise NtklabValueError(
            f"target: expected the shape of prediction, {tuple(prediction.shape)}, got "
            f"{tuple(target.shape)}"
        )
    if loss == "hinge":
        _check_labels("target", target)
    n_total = target.shape[0] if target.ndim else 1
    return _loss(prediction, target, loss, normalization, n_total)


# ---------------------------------------------------------------------------------------------
# validation


def _check_loss_names(loss: object, normalization: object) -> None:
    if loss not in ("mse", "hinge"):
        raise NtklabValueError(f"loss: expected 'mse' or 'hinge', got {loss!r}")
    if normalization not in ("mean", "sum"):
        raise NtklabValueError(f"normalization: expected 'mean' or 'sum', got {normalization!r}")


def _check_labels(name: str, y: Tensor) -> None:
    if not bool(((y == 1) | (y == -1)).all()):
        bad = int(((y != 1) & (y != -1)).sum())
        raise NtklabValueError(
            f"{name}: expected labels in {{-1, +1}} for the hinge loss, got {bad} other values"
        )


def _check_batch(name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise NtklabTypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if value.ndim == 0 or value.shape[0] == 0:
        raise NtklabValueError(
            f"{name}: expected a batch of shape (n, ...) with n >= 1, got shape "
            f"{tuple(value.shape)}"
        )
    if not value.is_floating_point():
        raise NtklabTypeError(f"{name}: expected a floating dtype, got {value.dtype}")
    if not bool(torch.isfinite(value).all()):
        bad = int((~torch.isfinite(value)).sum())
        raise NtklabValueError(f"{name}: expected finite values, got {bad} NaN or inf entries")
    return value


def _check_positive_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NtklabTypeError(f"{name}: expected a float > 0, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise NtklabValueError(f"{name}: expected a finite float > 0, got {value!r}")
    return float(value)


def _check_output(model: nn.Module, x: Tensor, y: Tensor, x_name: str, y_name: str) -> None:
    with torch.no_grad():
        out = model(x)
    if not isinstance(out, Tensor):
        raise NtklabTypeError(f"model: expected a module returning a tensor, got {type(out)}")
    if out.shape != y.shape:
        raise NtklabValueError(
            f"{y_name}: expected the shape of model({x_name}), {tuple(out.shape)}, got "
            f"{tuple(y.shape)}"
        )


def check_steps(name: str, value: object) -> int:
    """A time ``t`` in steps for the trainers: an int >= 1 (or a float with a whole value)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise NtklabTypeError(
            f"{name}: expected a whole number of steps >= 1 at learning_rate (the flow time is "
            f"learning_rate * {name}), got {value!r}"
        )
    if value < 1:
        raise NtklabValueError(
            f"{name}: expected a whole number of steps >= 1 at learning_rate, got {value}"
        )
    return value


# ---------------------------------------------------------------------------------------------
# the trainer


class _Logger:
    """Computes and accumulates the diagnostics."""

    def __init__(
        self,
        model: nn.Module,
        named: list[tuple[str, nn.Parameter]],
        kernel_inputs: Tensor | None,
    ) -> None:
        self.model = model
        self.named = named
        self.initial = [p.detach().clone() for _, p in named]
        self.norms0 = [float(torch.linalg.vector_norm(p)) for p in self.initial]
        self.total0 = math.sqrt(sum(v * v for v in self.norms0))
        self.kernel_inputs = kernel_inputs
        self.kernel0: Tensor | None = None
        if kernel_inputs is not None:
            self.kernel0 = self._kernel()
            self.kernel0_norm = float(torch.linalg.norm(self.kernel0))
            if not (self.kernel0_norm > 0 and math.isfinite(self.kernel0_norm)):
                raise NtklabValueError(
                    "kernel_inputs: expected inputs with a nonzero, finite empirical NTK at "
                    f"initialization (the drift is relative to it), got norm {self.kernel0_norm}"
                )
        self.records: list[TrainingRecord] = []

    def _kernel(self) -> Tensor:
        from ..empirical import ntk

        assert self.kernel_inputs is not None
        return ntk(self.model, self.kernel_inputs).detach()

    def record(
        self, step: int, flow_time: float, train_loss: float, test_loss: float | None
    ) -> TrainingRecord:
        drift = None
        if self.kernel0 is not None:
            diff = self._kernel() - self.kernel0
            drift = float(torch.linalg.norm(diff)) / self.kernel0_norm
        moves: dict[str, float] = {}
        total = 0.0
        with torch.no_grad():
            for (name, p), p0, norm0 in zip(self.named, self.initial, self.norms0, strict=True):
                move = float(torch.linalg.vector_norm(p - p0))
                total += move * move
                moves[name] = move / norm0 if norm0 > 0 else move
        overall = math.sqrt(total)
        rec = TrainingRecord(
            step=step,
            flow_time=flow_time,
            train_loss=train_loss,
            test_loss=test_loss,
            kernel_drift=drift,
            weight_movement=overall / self.total0 if self.total0 > 0 else overall,
            parameter_movement=moves,
        )
        self.records.append(rec)
        return rec

    def history(self) -> TrainingHistory:
        recs = self.records

        def column(values: list[float]) -> Tensor:
            return torch.tensor(values, dtype=torch.float64)

        return TrainingHistory(
            step=torch.tensor([r.step for r in recs], dtype=torch.int64),
            flow_time=column([r.flow_time for r in recs]),
            train_loss=column([r.train_loss for r in recs]),
            test_loss=None
            if not recs or recs[0].test_loss is None
            else column([float(r.test_loss or 0.0) for r in recs]),
            kernel_drift=None
            if self.kernel0 is None
            else column([float(r.kernel_drift or 0.0) for r in recs]),
            weight_movement=column([r.weight_movement for r in recs]),
            parameter_movement={
                name: column([r.parameter_movement[name] for r in recs]) for name, _ in self.named
            },
        )


class _OptionOverrides(TypedDict, total=False):
    """The fields of :class:`TrainOptions`, as keywords of :func:`train`."""

    loss: LossName
    normalization: Normalization
    batch_size: int | None
    weight_decay: float
    optimizer: OptimizerFactory | None
    generator: torch.Generator | None
    log_every: int | None
    kernel_inputs: Tensor | None
    callback: Callable[[int, TrainingRecord], None] | None


@short_repr
@dataclass(frozen=True)
class TrainOptions:
    r"""How :func:`train` trains and what it logs: everything but the model, the data, the
    learning rate and the time.

    Attributes
    ----------
    loss : {"mse", "hinge"}
    normalization : {"mean", "sum"}
        See the module docstring.
    batch_size : int, optional
        None: full-batch gradient descent. Otherwise minibatch SGD with batches of this size
        (``1 <= batch_size <= n``), drawn without replacement, reshuffled each epoch.
    weight_decay : float
        :math:`\lambda \ge 0`.
    optimizer : callable, optional
        A factory ``optimizer(parameters) -> torch.optim.Optimizer``; default
        ``torch.optim.SGD(parameters, lr=learning_rate)``. ``t`` still counts optimizer
        steps; the weight decay is added to the gradients, so do not also give it to the
        optimizer.
    generator : torch.Generator, optional
        Order of the minibatches.
    log_every : int, optional
        Log every this many steps (always at step 0 and at the last step).
    kernel_inputs : Tensor of shape (m, ...), optional
        Inputs of the empirical NTK (``ntklab.empirical.ntk(model, kernel_inputs)``, the
        trace over outputs) whose relative drift from initialization is logged.
    callback : callable, optional
        Called as ``callback(step, record)`` at each logged step.

    Examples
    --------
    >>> import dataclasses
    >>> sgd = TrainOptions(batch_size=4, generator=torch.Generator().manual_seed(0))
    >>> dataclasses.replace(sgd, weight_decay=1e-3).batch_size
    4
    """

    loss: LossName = "mse"
    normalization: Normalization = "mean"
    batch_size: int | None = None
    weight_decay: float = 0.0
    optimizer: OptimizerFactory | None = None
    generator: torch.Generator | None = None
    log_every: int | None = None
    kernel_inputs: Tensor | None = None
    callback: Callable[[int, TrainingRecord], None] | None = None


def train(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    learning_rate: float,
    t: int,
    x_test: Tensor | None = None,
    y_test: Tensor | None = None,
    options: TrainOptions | None = None,
    **overrides: Unpack[_OptionOverrides],
) -> TrainingRun:
    r"""Train ``model`` in place by gradient descent (or SGD) for ``t`` steps at
    ``learning_rate``.

    Each step is :math:`\theta \leftarrow \theta - \eta\, \nabla_\theta \big(L_B(\theta) /
    \alpha^2 + \tfrac{\lambda}{2} \lVert\theta\rVert^2\big)` with :math:`L_B` the loss of the
    batch (the full batch by default), :math:`\alpha` the model's output scale
    (:func:`~ntklab.nets.output_scale`) and :math:`\lambda` the weight decay; see the module
    docstring for the loss conventions and the time unit (neural-tangents': ``t`` steps at
    :math:`\eta`, flow time :math:`\eta t`).

    Parameters
    ----------
    model : nn.Module
        Maps ``x`` to outputs of the shape of ``y``; its trainable parameters (those with
        ``requires_grad``) are updated in place. Lazy parameters are materialized by a forward
        pass on ``x``.
    x : Tensor of shape (n, ...)
        Training inputs, of the dtype of the model's parameters.
    y : Tensor of the shape of ``model(x)``, e.g. (n, k)
        Targets; labels in {-1, +1} for the hinge loss.
    learning_rate : float
        :math:`\eta > 0`.
    t : int
        Time in steps at ``learning_rate``, as ``t`` in :mod:`ntklab.dynamics` and
        :mod:`ntklab.predict`: the number of optimizer steps (a float with a whole value is
        accepted). The run discretizes the gradient flow up to the continuous time
        ``learning_rate * t``.
    x_test, y_test : Tensor, optional
        Test data (both or neither); ``test_loss`` is logged.
    options : TrainOptions, optional
        The loss, the optimizer, minibatches, weight decay and logging (default
        ``TrainOptions()``: full-batch GD on the mean squared loss).
    **overrides
        Fields of :class:`TrainOptions` given as keywords (``normalization="sum"``,
        ``batch_size=8``, ...), applied over ``options``.

    Returns
    -------
    TrainingRun
        The model, the :class:`TrainingHistory` and whether the run diverged.

    Warns
    -----
    NumericalWarning
        When the loss becomes non-finite (the learning rate is too large for the curvature):
        training stops there, ``diverged`` is True, and the warning names the step.

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Linear(3, 1, dtype=torch.float64)
    >>> x, y = torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 1, dtype=torch.float64)
    >>> run = train(net, x, y, learning_rate=0.1, t=20, log_every=5)
    >>> run.steps, [int(s) for s in run.history.step]
    (20, [0, 5, 10, 15, 20])
    """
    opts = _resolve_options(options, dict(overrides))
    if not isinstance(model, nn.Module):
        raise NtklabTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    x, y, x_test, y_test = _check_data(x, y, x_test, y_test, opts.loss)
    lr = _check_positive_float("learning_rate", learning_rate)
    total_steps = check_steps("t", t)
    opts = _check_options(opts, n=x.shape[0])
    named = _trainable(model, x, y, x_test, y_test)
    params = [p for _, p in named]
    opt = torch.optim.SGD(params, lr=lr) if opts.optimizer is None else opts.optimizer(params)
    if not isinstance(opt, torch.optim.Optimizer):
        raise NtklabTypeError(
            f"optimizer: expected the factory to return a torch.optim.Optimizer, got "
            f"{type(opt).__name__}"
        )
    alpha = output_scale(model)
    logger = _Logger(model, named, opts.kernel_inputs)
    loop = _Loop(model, x, y, x_test, y_test, opts, lr, logger)
    done, diverged_at = loop.run(total_steps, opt, params, 1.0 / (alpha * alpha))
    if diverged_at is not None:
        step, bad = diverged_at
        warnings.warn(
            f"train: the training loss became {bad} at step {step} (learning_rate="
            f"{lr}, flow time {lr * step:g}); stopped there. Lower learning_rate (the flow "
            "time is learning_rate * t)",
            NumericalWarning,
            stacklevel=2,
        )
    return TrainingRun(
        model=model,
        history=logger.history(),
        learning_rate=lr,
        steps=done,
        diverged=diverged_at is not None,
        alpha=alpha,
    )


def _resolve_options(options: object, overrides: dict[str, object]) -> TrainOptions:
    """``options`` (default ``TrainOptions()``) with the keyword ``overrides`` applied."""
    if options is None:
        options = TrainOptions()
    if not isinstance(options, TrainOptions):
        raise NtklabTypeError(f"options: expected a TrainOptions, got {type(options).__name__}")
    known = {f.name for f in fields(TrainOptions)}
    for key in overrides:
        if key not in known:
            hint = " (the time is t, in steps at learning_rate)" if key in ("steps", "time") else ""
            raise NtklabTypeError(
                f"{key}: expected a keyword of train or a field of TrainOptions "
                f"({', '.join(sorted(known))}), got an unknown keyword{hint}"
            )
    return replace(options, **overrides)  # type: ignore[arg-type]


def _check_data(
    x: object, y: object, x_test: object, y_test: object, loss: object
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """Training and test data as checked tensors (shapes, finiteness, hinge labels)."""
    xt = _check_batch("x", x)
    yt = _check_batch("y", y)
    n = xt.shape[0]
    if yt.shape[0] != n:
        raise NtklabValueError(
            f"y: expected {n} rows (the examples of x, shape {tuple(xt.shape)}), got shape "
            f"{tuple(yt.shape)}"
        )
    if (x_test is None) != (y_test is None):
        raise NtklabValueError(
            "x_test, y_test: expected both or neither, got "
            f"{'x_test only' if y_test is None else 'y_test only'}"
        )
    xs = ys = None
    if x_test is not None and y_test is not None:
        xs = _check_batch("x_test", x_test)
        ys = _check_batch("y_test", y_test)
        if xs.shape[1:] != xt.shape[1:]:
            raise NtklabValueError(
                f"x_test: expected inputs of the shape of x's, {tuple(xt.shape[1:])}, got "
                f"{tuple(xs.shape[1:])}"
            )
    if loss == "hinge":
        _check_labels("y", yt)
        if ys is not None:
            _check_labels("y_test", ys)
    return xt, yt, xs, ys


def _check_options(opts: TrainOptions, n: int) -> TrainOptions:
    """Validate every field of ``opts`` for ``n`` training examples."""
    _check_loss_names(opts.loss, opts.normalization)
    if opts.batch_size is not None:
        check_positive_int("batch_size", opts.batch_size)
        if opts.batch_size > n:
            raise NtklabValueError(
                f"batch_size: expected at most the number of examples ({n}), got {opts.batch_size}"
            )
    check_nonnegative("weight_decay", opts.weight_decay)
    if opts.optimizer is not None and not callable(opts.optimizer):
        raise NtklabTypeError(
            f"optimizer: expected a callable building a torch.optim.Optimizer from the "
            f"parameters, got {type(opts.optimizer).__name__}"
        )
    if opts.log_every is not None:
        check_positive_int("log_every", opts.log_every)
    kernel_inputs = opts.kernel_inputs
    if kernel_inputs is not None:
        kernel_inputs = _check_batch("kernel_inputs", kernel_inputs)
    if opts.generator is not None and not isinstance(opts.generator, torch.Generator):
        raise NtklabTypeError(
            f"generator: expected a torch.Generator, got {type(opts.generator).__name__}"
        )
    if opts.callback is not None and not callable(opts.callback):
        raise NtklabTypeError(f"callback: expected a callable, got {type(opts.callback).__name__}")
    return replace(opts, weight_decay=float(opts.weight_decay), kernel_inputs=kernel_inputs)


def _trainable(
    model: nn.Module, x: Tensor, y: Tensor, x_test: Tensor | None, y_test: Tensor | None
) -> list[tuple[str, nn.Parameter]]:
    """The model's trainable parameters, after checking dtypes and output shapes."""
    if any(isinstance(p, UninitializedParameter) for p in model.parameters()):
        with torch.no_grad():
            model(x[:1])  # materialize lazy parameters
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise NtklabValueError("model: expected trainable parameters, got none")
    dtype = named[0][1].dtype
    if x.dtype != dtype:
        raise NtklabTypeError(
            f"x: expected the dtype of the model's parameters ({dtype}), got {x.dtype}"
        )
    _check_output(model, x, y, "x", "y")
    if x_test is not None and y_test is not None:
        if x_test.dtype != dtype:
            raise NtklabTypeError(
                f"x_test: expected the dtype of the model's parameters ({dtype}), got "
                f"{x_test.dtype}"
            )
        _check_output(model, x_test, y_test, "x_test", "y_test")
    return named


class _Loop:
    """The optimizer steps of :func:`train`, with minibatches and logging."""

    def __init__(
        self,
        model: nn.Module,
        x: Tensor,
        y: Tensor,
        x_test: Tensor | None,
        y_test: Tensor | None,
        opts: TrainOptions,
        lr: float,
        logger: _Logger,
    ) -> None:
        self.model, self.x, self.y, self.x_test, self.y_test = model, x, y, x_test, y_test
        self.opts, self.lr, self.logger = opts, lr, logger
        self.n = x.shape[0]
        self.order: Tensor | None = None
        self.cursor = self.n

    def full_loss(self, inputs: Tensor, targets: Tensor) -> float:
        with torch.no_grad():
            out = self.model(inputs)
            return float(_loss(out, targets, self.opts.loss, self.opts.normalization, len(targets)))

    def log(self, step: int, train_loss: float) -> None:
        test_loss = None
        if self.x_test is not None and self.y_test is not None:
            test_loss = self.full_loss(self.x_test, self.y_test)
        rec = self.logger.record(step, self.lr * step, train_loss, test_loss)
        if self.opts.callback is not None:
            self.opts.callback(step, rec)

    def is_logged(self, step: int) -> bool:
        every = self.opts.log_every
        return step == 0 or (every is not None and step % every == 0)

    def batch(self) -> tuple[Tensor, Tensor]:
        """The next minibatch (the full batch for gradient descent)."""
        size = self.opts.batch_size
        if size is None:
            return self.x, self.y
        if self.cursor >= self.n:
            gen = self.opts.generator
            device = gen.device if gen is not None else torch.device("cpu")
            perm = torch.randperm(self.n, generator=gen, device=device)
            self.order, self.cursor = perm.to(self.x.device), 0
        assert self.order is not None
        idx = self.order[self.cursor : self.cursor + size]
        self.cursor += size
        return self.x[idx], self.y[idx]

    def run(
        self,
        total_steps: int,
        opt: torch.optim.Optimizer,
        params: list[nn.Parameter],
        inv_alpha2: float,
    ) -> tuple[int, tuple[int, float] | None]:
        """Take the steps; return the steps done and, if it diverged, (step, loss)."""
        opts, wd = self.opts, self.opts.weight_decay
        done = 0
        for k in range(total_steps):
            xb, yb = self.batch()
            value = _loss(self.model(xb), yb, opts.loss, opts.normalization, self.n)
            if not bool(torch.isfinite(value)):
                return done, (k, float(value.detach()))
            if self.is_logged(k):
                full = opts.batch_size is None
                train_loss = float(value.detach()) if full else self.full_loss(self.x, self.y)
                if not math.isfinite(train_loss):
                    return done, (k, train_loss)
                self.log(k, train_loss)
            opt.zero_grad(set_to_none=True)
            torch.autograd.backward(value * inv_alpha2 if inv_alpha2 != 1.0 else value)
            if wd > 0:
                with torch.no_grad():
                    for p in params:
                        if p.grad is None:
                            p.grad = p.detach() * wd
                        else:
                            p.grad.add_(p.detach(), alpha=wd)
            opt.step()
            done = k + 1
        final = self.full_loss(self.x, self.y)
        if not math.isfinite(final):
            return done, (done, final)
        self.log(done, final)
        return done, None
