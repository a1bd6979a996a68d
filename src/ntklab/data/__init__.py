"""Targets and datasets: sphere, circle and hypercube sampling, tent maps, trigonometric and
spherical polynomials, sparse parities, source-condition targets, and small real datasets."""

from .datasets import (
    FASHION_MNIST_ROOT,
    Dataset,
    load_cifar10,
    load_digits,
    load_fashion_mnist,
    load_mnist,
)
from .sampling import circle_grid, hypercube, uniform_circle, uniform_sphere
from .targets import (
    CapacityFit,
    SourceConditionTarget,
    SparseParity,
    SpherePolynomial,
    TentMap,
    TentMapS1,
    TrigPolynomial,
    estimate_capacity,
    excess_risk_s1,
    kernel_excess_risk_sphere,
    kernel_predictor_coefficients_s1,
    random_sparse_parity,
    random_sphere_polynomial,
    random_trig_polynomial,
    source_condition_target,
)

__all__ = [
    "FASHION_MNIST_ROOT",
    "CapacityFit",
    "Dataset",
    "SourceConditionTarget",
    "SparseParity",
    "SpherePolynomial",
    "TentMap",
    "TentMapS1",
    "TrigPolynomial",
    "circle_grid",
    "estimate_capacity",
    "excess_risk_s1",
    "hypercube",
    "kernel_excess_risk_sphere",
    "kernel_predictor_coefficients_s1",
    "load_cifar10",
    "load_digits",
    "load_fashion_mnist",
    "load_mnist",
    "random_sparse_parity",
    "random_sphere_polynomial",
    "random_trig_polynomial",
    "source_condition_target",
    "uniform_circle",
    "uniform_sphere",
]
