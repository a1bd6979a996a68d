"""Finite-width networks and their training.

- :class:`DenseLayer`, :class:`ElementwiseActivation`: the modules that
  ``Architecture.to_torch`` builds (NTK, standard and muP parameterizations);
- :class:`ScaledOutput` (lazy-training scale), :class:`AntisymmetricPair` (zero initial
  output): wrappers that ``to_torch(alpha=..., zero_output=True)`` applies;
- :func:`train`: full-batch GD and minibatch SGD for ``t`` steps at ``learning_rate``, with its
  options in a :class:`TrainOptions`, logging losses, kernel drift and weight movement;
- :func:`ensemble`, :func:`train_ensemble`: many independent networks with batched weights,
  trained together (:func:`stack_modules` for any module, through ``torch.func``).
"""

from .conv_modules import (
    AvgPoolLayer,
    ConvLayer,
    GlobalAvgPoolLayer,
    LayerNormLayer,
    ResidualBlock,
)
from .ensemble import (
    EnsembleDense,
    EnsembleTraining,
    MLPEnsemble,
    ModuleEnsemble,
    ensemble,
    stack_modules,
    train_ensemble,
)
from .modules import DenseLayer, ElementwiseActivation
from .relu_networks import AffineMap, parameter_count, path_norm, relu_layers, tent_network
from .training import (
    LossName,
    Normalization,
    OptimizerFactory,
    TrainingHistory,
    TrainingRecord,
    TrainingRun,
    TrainOptions,
    data_loss,
    train,
)
from .wrappers import AntisymmetricPair, ScaledOutput, output_scale

__all__ = [
    "AffineMap",
    "AntisymmetricPair",
    "AvgPoolLayer",
    "ConvLayer",
    "DenseLayer",
    "ElementwiseActivation",
    "EnsembleDense",
    "EnsembleTraining",
    "GlobalAvgPoolLayer",
    "LayerNormLayer",
    "LossName",
    "MLPEnsemble",
    "ModuleEnsemble",
    "Normalization",
    "OptimizerFactory",
    "ResidualBlock",
    "ScaledOutput",
    "TrainOptions",
    "TrainingHistory",
    "TrainingRecord",
    "TrainingRun",
    "data_loss",
    "ensemble",
    "output_scale",
    "parameter_count",
    "path_norm",
    "relu_layers",
    "stack_modules",
    "tent_network",
    "train",
    "train_ensemble",
]
