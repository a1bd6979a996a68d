"""
Kernel regression on Fashion-MNIST
==================================

Classify images with the infinite-width kernels of three architectures, as kernel ridge
regression on one-hot targets: the NTK of a fully-connected network (MLP), the convolutional
NTK (CNTK) of a network whose convolutional top is flattened, computed exactly, and the CNTK
with global average pooling (CNTK-GAP, Arora et al. 2019, arXiv:1904.11955) through its random
features (Zandieh et al. 2021, arXiv:2106.07880), since the exact pooled kernel costs
:math:`O(|S|^2)` per pair of images.

The data set is Fashion-MNIST (Xiao, Rasul & Vollgraf 2017, arXiv:1708.07747), read from its
idx files by :func:`ntklab.data.load_fashion_mnist` (nothing is downloaded: ``sudo apt-get
install dataset-fashion-mnist`` puts them in ``/usr/share/datasets/fashion-mnist``). Where it
is missing, the page falls back to scikit-learn's 8x8 digits and says so below. The number of
images follows ``NTKLAB_GALLERY_SCALE``: a few hundred at ``tiny`` (the documentation build),
thousands at ``quick``.
"""

# %%
# The data
# --------
# Class-balanced subsets of the training and test splits, pixels standardized with the
# training set's mean and standard deviation, channels first: ``(n, 1, 28, 28)``.
import math
import time

import matplotlib.pyplot as plt
import torch

import ntklab as nl
from ntklab.errors import NtklabValueError
from ntklab.report.gallery import gallery_scale

scale = gallery_scale()
n_train, n_test, num_features = {
    "tiny": (300, 300, 256),
    "quick": (2000, 1000, 1024),
    "paper": (10000, 2000, 2048),
}[scale]
gen = torch.Generator().manual_seed(0)

try:
    train_set = nl.data.load_fashion_mnist("train", dtype=torch.float64)
    test_set = nl.data.load_fashion_mnist("test", dtype=torch.float64)
    train = train_set.balanced_subsample(n_train, gen)
    test = test_set.balanced_subsample(n_test, gen)
    classes = [
        "T-shirt",
        "trouser",
        "pullover",
        "dress",
        "coat",
        "sandal",
        "shirt",
        "sneaker",
        "bag",
        "boot",
    ]
    source = "Fashion-MNIST"
except NtklabValueError as missing:
    print(f"Fashion-MNIST is not installed here ({missing}).")
    print("Falling back to scikit-learn's 8x8 digits: the numbers below are for digits.")
    digits = nl.data.load_digits(images=True)
    n_train, n_test = min(n_train, 1000), min(n_test, 797)
    train, rest = digits.split(n_train, gen)
    test = rest.subsample(n_test, gen)
    classes = [str(c) for c in range(10)]
    source = "scikit-learn digits"

print(
    f"{source}: {len(train)} training and {len(test)} test images of shape "
    f"{tuple(train.x.shape[1:])}, scale {scale!r}"
)

fig, axes = plt.subplots(2, 8, figsize=(8, 2.8))
for ax, image, label in zip(axes.flat, train.x, train.labels, strict=False):
    ax.imshow(image[0], cmap="gray_r")
    ax.set_title(classes[int(label)], fontsize=8)
    ax.set_axis_off()
fig.suptitle(f"{source}: training images")
fig.tight_layout()

# %%
# Three architectures
# -------------------
# Each is declared once; :class:`~ntklab.dynamics.KernelRegressor` fits kernel ridge
# regression with its NTK (``ridge`` is relative to the mean diagonal of the training kernel),
# with the exact kernel or, with ``num_features=F``, in the space of ``F`` random features.
s2 = math.sqrt(2.0)
architectures = {
    "MLP NTK (exact)": nl.serial(
        nl.Flatten(),
        nl.Dense(w_std=s2, b_std=0.05),
        nl.Relu(),
        nl.Dense(w_std=s2, b_std=0.05),
        nl.Relu(),
        nl.Dense(w_std=1.0),
    ),
    "CNTK, flat top (exact)": nl.serial(
        nl.Conv(1, (3, 3), w_std=s2, b_std=0.05),
        nl.Relu(),
        nl.Flatten(),
        nl.Dense(w_std=1.0),
    ),
    f"CNTK-GAP ({num_features} features)": nl.serial(
        nl.Conv(1, (3, 3), w_std=s2, b_std=0.05),
        nl.Relu(),
        nl.GlobalAvgPool(),
        nl.Dense(w_std=1.0),
    ),
}

y_train = train.targets("centered_onehot")  # (n, 10), rows summing to zero
accuracy, seconds = {}, {}
for name, arch in architectures.items():
    start = time.perf_counter()
    model = nl.dynamics.KernelRegressor(
        arch, ridge=1e-2, num_features=num_features if "features" in name else None
    )
    predicted = model.fit(train.x, y_train).predict(test.x).argmax(dim=1)
    accuracy[name] = float((predicted == test.labels).double().mean())
    seconds[name] = time.perf_counter() - start
    print(f"{name:28s} test accuracy {100 * accuracy[name]:5.1f}%  ({seconds[name]:.1f} s)")

# %%
# Test accuracy
# -------------
# At a few hundred images the MLP NTK and the flat CNTK are close, and the pooled CNTK seen
# through a few hundred random features trails them: the features' error falls only as
# :math:`F^{-1/2}`, and the exact pooled kernel is out of reach at this cost.
# ``benchmarks/bench_fashion_mnist.py`` sweeps ``n`` up to the full 60,000 images.
# The ridge is fixed here, not tuned: with more data, choose it on a held-out split
# (:func:`ntklab.dynamics.select_ridge_validation`), never on the test set.
fig, ax = plt.subplots(figsize=(7, 2.8))
names = list(accuracy)
ax.barh(names, [100 * accuracy[n] for n in names], color=["C0", "C1", "C2"])
for i, n in enumerate(names):
    ax.text(100 * accuracy[n] + 0.5, i, f"{100 * accuracy[n]:.1f}%", va="center", fontsize=9)
ax.set_xlim(0, 100)
ax.set_xlabel("test accuracy (%)")
ax.set_title(f"{source}: kernel regression, {len(train)} training images")
ax.invert_yaxis()
fig.tight_layout()
