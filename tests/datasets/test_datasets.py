"""Datasets: the container (subsets, class-balanced subsets, indices, repr), scikit-learn's
digits, the MNIST / Fashion-MNIST / CIFAR-10 readers on small synthetic files written in the
real formats, and Fashion-MNIST's real files where Debian's package installed them."""

from __future__ import annotations

import doctest
import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from ntklab.data import (
    FASHION_MNIST_ROOT,
    Dataset,
    datasets,
    load_cifar10,
    load_digits,
    load_fashion_mnist,
    load_mnist,
)
from ntklab.errors import NtklabTypeError, NtklabValueError

F64 = torch.float64


def test_docstring_examples() -> None:
    result = doctest.testmod(datasets)
    assert result.attempted >= 2
    assert result.failed == 0


# ---------------------------------------------------------------------------------------------
# the container


def toy(n: int = 10, classes: int = 3) -> Dataset:
    # x encodes the example's index so that rows can be matched to labels after shuffling
    x = torch.arange(n, dtype=F64)[:, None].expand(n, 2).clone()
    labels = torch.arange(n) % classes
    return Dataset(x, labels, classes, "toy")


def test_targets_kinds() -> None:
    ds = toy()
    onehot = ds.one_hot()
    assert onehot.shape == (10, 3) and onehot.dtype == F64
    torch.testing.assert_close(onehot.argmax(1), ds.labels)
    torch.testing.assert_close(onehot.sum(1), torch.ones(10, dtype=F64))
    centered = ds.targets("centered_onehot")
    torch.testing.assert_close(centered.sum(1), torch.zeros(10, dtype=F64))
    torch.testing.assert_close(centered, onehot - 1 / 3)
    binary = toy(classes=2).targets("binary")
    torch.testing.assert_close(binary, torch.tensor([-1.0, 1.0] * 5, dtype=F64))
    with pytest.raises(NtklabValueError, match="kind: 'binary' targets need num_classes == 2"):
        ds.targets("binary")
    with pytest.raises(NtklabValueError, match="kind: expected"):
        ds.targets("ordinal")  # type: ignore[arg-type]


def test_subsample_and_split_keep_pairs_and_partition() -> None:
    ds = toy(50)
    sub = ds.subsample(20, torch.Generator().manual_seed(0))
    assert len(sub) == 20 and len(set(sub.x[:, 0].tolist())) == 20
    torch.testing.assert_close(sub.labels, sub.x[:, 0].long() % 3)
    again = ds.subsample(20, torch.Generator().manual_seed(0))
    torch.testing.assert_close(again.x, sub.x)
    train, test = ds.split(30, torch.Generator().manual_seed(1))
    assert (len(train), len(test)) == (30, 20)
    ids = train.x[:, 0].tolist() + test.x[:, 0].tolist()
    assert sorted(ids) == list(range(50))
    torch.testing.assert_close(test.labels, test.x[:, 0].long() % 3)
    assert train.name == "toy/train" and test.name == "toy/test"
    with pytest.raises(NtklabValueError, match="n: expected an int <= 50"):
        ds.subsample(51, torch.Generator())
    with pytest.raises(NtklabValueError, match="n_train: expected an int < 50"):
        ds.split(50, torch.Generator())
    with pytest.raises(NtklabTypeError, match="generator"):
        ds.subsample(3, 0)  # type: ignore[arg-type]


def test_subsets_carry_their_positions_in_the_full_split() -> None:
    ds = toy(50)
    torch.testing.assert_close(ds.indices, torch.arange(50))
    sub = ds.subsample(30, torch.Generator().manual_seed(3))
    torch.testing.assert_close(sub.indices, sub.x[:, 0].long())  # x encodes the position
    subsub = sub.subsample(12, torch.Generator().manual_seed(4))
    torch.testing.assert_close(subsub.indices, subsub.x[:, 0].long())
    train, test = sub.split(20, torch.Generator().manual_seed(5))
    torch.testing.assert_close(train.indices, train.x[:, 0].long())
    torch.testing.assert_close(test.indices, test.x[:, 0].long())
    assert train.flatten().indices is train.indices
    assert train.to(dtype=torch.float32).indices.tolist() == train.indices.tolist()


def _balanced_reference(labels: torch.Tensor, classes: int, n: int, seed: int) -> list[int]:
    """The first examples of each class, in a permutation from the same seed, by a loop."""
    perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed)).tolist()
    quota = [n // classes + (c < n % classes) for c in range(classes)]
    taken = [0] * classes
    kept = []
    for i in perm:
        c = int(labels[i])
        if taken[c] < quota[c]:
            taken[c] += 1
            kept.append(i)
    return kept


@pytest.mark.parametrize("n", [9, 10, 11, 30])
def test_balanced_subsample_equal_counts_and_reproducible_indices(n: int) -> None:
    # unbalanced classes: 20, 15 and 12 examples
    labels = torch.tensor([0] * 20 + [1] * 15 + [2] * 12)[torch.randperm(47)]
    x = torch.arange(47, dtype=F64)[:, None]
    ds = Dataset(x, labels, 3, "toy")
    sub = ds.balanced_subsample(n, torch.Generator().manual_seed(7))
    counts = torch.bincount(sub.labels, minlength=3).tolist()
    # the remainder goes one each to the first classes
    assert counts == [n // 3 + (c < n % 3) for c in range(3)]
    assert len(sub) == n and len(set(sub.indices.tolist())) == n
    torch.testing.assert_close(sub.indices, sub.x[:, 0].long())
    torch.testing.assert_close(sub.labels, labels[sub.indices])
    assert sub.indices.tolist() == _balanced_reference(labels, 3, n, 7)
    again = ds.balanced_subsample(n, torch.Generator().manual_seed(7))
    assert again.indices.tolist() == sub.indices.tolist()
    other = ds.balanced_subsample(n, torch.Generator().manual_seed(8))
    assert other.indices.tolist() != sub.indices.tolist()
    assert sub.name == "toy"


def test_balanced_subsample_errors() -> None:
    ds = Dataset(torch.zeros(30, 1), torch.tensor([0] * 20 + [1] * 5 + [2] * 5), 3)
    ds.balanced_subsample(16, torch.Generator())  # 6, 5, 5: just enough
    with pytest.raises(NtklabValueError, match=r"n: expected at most 16 .*class 1 has 5"):
        ds.balanced_subsample(17, torch.Generator())  # 6, 6, 5
    late = Dataset(torch.zeros(30, 1), torch.tensor([0] * 5 + [1] * 5 + [2] * 20), 3)
    late.balanced_subsample(15, torch.Generator())
    with pytest.raises(NtklabValueError, match=r"n: expected at most 15 .*class 0 has 5"):
        late.balanced_subsample(16, torch.Generator())  # 6, 5, 5
    with pytest.raises(NtklabValueError, match="n: expected an int <= 30"):
        ds.balanced_subsample(31, torch.Generator())
    with pytest.raises(NtklabValueError, match="n: expected an int >= 1"):
        ds.balanced_subsample(0, torch.Generator())
    with pytest.raises(NtklabTypeError, match="generator"):
        ds.balanced_subsample(3, 0)  # type: ignore[arg-type]


def test_repr_is_one_short_line() -> None:
    ds = Dataset(torch.zeros(300, 1, 28, 28), torch.zeros(300, dtype=torch.int64), 10, "big")
    text = repr(ds)
    assert text == "Dataset('big', x (300, 1, 28, 28) torch.float32, 10 classes)"
    assert str(ds) == text


def test_dataset_validation() -> None:
    with pytest.raises(NtklabTypeError, match="labels: expected an int64 tensor"):
        Dataset(torch.zeros(3, 2), torch.zeros(3, dtype=torch.int32), 2)
    with pytest.raises(NtklabValueError, match=r"labels: expected shape \(3,\)"):
        Dataset(torch.zeros(3, 2), torch.zeros(4, dtype=torch.int64), 2)
    with pytest.raises(NtklabValueError, match=r"labels: expected class indices in \[0, 2\)"):
        Dataset(torch.zeros(3, 2), torch.tensor([0, 1, 2]), 2)
    with pytest.raises(NtklabTypeError, match="x: expected a real floating tensor"):
        Dataset(torch.zeros(3, 2, dtype=torch.int64), torch.tensor([0, 1, 1]), 2)
    labels = torch.tensor([0, 1, 1])
    with pytest.raises(NtklabTypeError, match="indices: expected an int64 tensor"):
        Dataset(torch.zeros(3, 2), labels, 2, indices=torch.arange(3, dtype=torch.int32))
    with pytest.raises(NtklabValueError, match=r"indices: expected shape \(3,\)"):
        Dataset(torch.zeros(3, 2), labels, 2, indices=torch.arange(4))
    given = Dataset(torch.zeros(3, 2), labels, 2, indices=torch.tensor([7, 2, 9]))
    assert given.indices.tolist() == [7, 2, 9]


# ---------------------------------------------------------------------------------------------
# digits


def test_load_digits_against_scikit_learn() -> None:
    from sklearn.datasets import load_digits as sk

    bunch = sk()
    raw = load_digits(standardize=False)
    torch.testing.assert_close(raw.x, torch.from_numpy(bunch.data).double())
    torch.testing.assert_close(raw.labels, torch.from_numpy(bunch.target).long())
    ds = load_digits()
    varying = bunch.data.std(0) > 0
    torch.testing.assert_close(ds.x.mean(0), torch.zeros(64, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(
        ds.x.std(0, unbiased=False)[torch.from_numpy(varying)],
        torch.ones(int(varying.sum()), dtype=F64),
    )
    assert bool((ds.x[:, torch.from_numpy(~varying)] == 0).all())
    binary = load_digits(binary=True, images=True, dtype=torch.float32)
    assert binary.x.shape == (1797, 1, 8, 8) and binary.x.dtype == torch.float32
    torch.testing.assert_close(binary.labels, torch.from_numpy(bunch.target % 2).long())
    y = binary.targets("binary")
    assert set(y.tolist()) == {-1.0, 1.0}
    torch.testing.assert_close(binary.x.reshape(1797, 64), ds.x.float())


# ---------------------------------------------------------------------------------------------
# MNIST on synthetic idx files


def write_idx(path: Path, array: np.ndarray, *, compress: bool = False) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    raw = header + array.astype(np.uint8).tobytes()
    if compress:
        path = path.with_name(path.name + ".gz")
        raw = gzip.compress(raw)
    path.write_bytes(raw)


def make_mnist(folder: Path, rng: np.random.Generator, *, compress: bool = False) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train": (rng.integers(0, 256, (7, 5, 4)), rng.integers(0, 10, 7)),
        "test": (rng.integers(0, 256, (3, 5, 4)), rng.integers(0, 10, 3)),
    }
    names = {"train": ("train", "train"), "test": ("t10k", "t10k")}
    for split, (images, labels) in arrays.items():
        prefix = names[split][0]
        write_idx(folder / f"{prefix}-images-idx3-ubyte", images, compress=compress)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte", labels, compress=compress)
    return arrays


@pytest.mark.parametrize("compress", [False, True])
def test_load_mnist_reads_idx_files(tmp_path: Path, compress: bool) -> None:
    arrays = make_mnist(tmp_path, np.random.default_rng(0), compress=compress)
    raw = load_mnist(tmp_path, "test", standardize=False, dtype=F64)
    images, labels = arrays["test"]
    assert raw.x.shape == (3, 1, 5, 4) and raw.name == "mnist-test"  # NCHW
    torch.testing.assert_close(raw.x[:, 0], torch.from_numpy(images / 255.0))
    torch.testing.assert_close(raw.labels, torch.from_numpy(labels).long())
    train = load_mnist(tmp_path, dtype=F64)
    assert float(train.x.mean()) == pytest.approx(0.0, abs=1e-12)
    assert float(train.x.std(unbiased=False)) == pytest.approx(1.0)
    # the test split is standardized with the train statistics
    scaled = arrays["train"][0] / 255.0
    expected = (images / 255.0 - scaled.mean()) / scaled.std()
    test = load_mnist(tmp_path, "test", dtype=F64)
    torch.testing.assert_close(test.x[:, 0], torch.from_numpy(expected))
    assert load_mnist(tmp_path).x.dtype == torch.float32


def test_load_mnist_torchvision_layout(tmp_path: Path) -> None:
    make_mnist(tmp_path / "MNIST" / "raw", np.random.default_rng(1))
    assert len(load_mnist(tmp_path)) == 7


def test_load_mnist_errors(tmp_path: Path) -> None:
    with pytest.raises(
        NtklabValueError, match=r"root: expected an existing local folder, got .*nope"
    ):
        load_mnist(tmp_path / "nope")
    with pytest.raises(NtklabValueError, match="train-images-idx3-ubyte, train-labels-idx1-ubyte"):
        load_mnist(tmp_path)
    make_mnist(tmp_path, np.random.default_rng(2))
    with pytest.raises(NtklabValueError, match="split: expected 'train' or 'test'"):
        load_mnist(tmp_path, "valid")  # type: ignore[arg-type]
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(NtklabValueError, match="t10k-labels-idx1-ubyte is missing"):
        load_mnist(tmp_path, "test")
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(b"\x08\x00\x00\x01")
    with pytest.raises(NtklabValueError, match="magic bytes"):
        load_mnist(tmp_path, "test")
    good = (tmp_path / "train-images-idx3-ubyte").read_bytes()
    (tmp_path / "train-images-idx3-ubyte").write_bytes(good[:-5])
    with pytest.raises(NtklabValueError, match=r"declares shape \(7, 5, 4\)"):
        load_mnist(tmp_path)
    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((6, 5, 4)))
    with pytest.raises(NtklabValueError, match="to hold 6 labels"):
        load_mnist(tmp_path)


# ---------------------------------------------------------------------------------------------
# Fashion-MNIST: the same idx reader, its own name and default folder


@pytest.mark.parametrize("compress", [False, True])
def test_load_fashion_mnist_reads_idx_files(tmp_path: Path, compress: bool) -> None:
    arrays = make_mnist(tmp_path, np.random.default_rng(5), compress=compress)
    for split in ("train", "test"):
        raw = load_fashion_mnist(split, root=tmp_path, standardize=False, dtype=F64)
        images, labels = arrays[split]
        assert raw.name == f"fashion-mnist-{split}" and raw.num_classes == 10
        assert raw.x.shape == (len(labels), 1, 5, 4)  # NCHW
        torch.testing.assert_close(raw.x[:, 0] * 255, torch.from_numpy(images).double())
        torch.testing.assert_close(raw.labels, torch.from_numpy(labels).long())
        torch.testing.assert_close(
            raw.one_hot(), torch.from_numpy(np.eye(10)[labels]), rtol=0, atol=0
        )
    scaled = arrays["train"][0] / 255.0
    train = load_fashion_mnist(root=str(tmp_path), dtype=F64)
    expected = (scaled - scaled.mean()) / scaled.std()
    torch.testing.assert_close(train.x[:, 0], torch.from_numpy(expected))
    test = load_fashion_mnist("test", tmp_path, dtype=F64)
    expected = (arrays["test"][0] / 255.0 - scaled.mean()) / scaled.std()
    torch.testing.assert_close(test.x[:, 0], torch.from_numpy(expected))
    assert load_fashion_mnist(root=tmp_path).x.dtype == torch.float32


def test_load_fashion_mnist_torchvision_layout(tmp_path: Path) -> None:
    make_mnist(tmp_path / "FashionMNIST" / "raw", np.random.default_rng(6))
    assert len(load_fashion_mnist(root=tmp_path)) == 7


def test_load_fashion_mnist_missing_files_name_the_package_and_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    absent = tmp_path / "absent"
    monkeypatch.setattr(datasets, "FASHION_MNIST_ROOT", absent)
    for root in (None, absent):
        with pytest.raises(NtklabValueError) as info:
            load_fashion_mnist(root=root)
        message = str(info.value)
        assert "apt-get install dataset-fashion-mnist" in message
        assert f"{absent} (does not exist)" in message
    with pytest.raises(NtklabValueError) as info:
        load_fashion_mnist("test", root=tmp_path)  # exists, but empty
    message = str(info.value)
    assert "t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte" in message
    assert str(tmp_path) in message and "apt-get install dataset-fashion-mnist" in message
    with pytest.raises(NtklabValueError, match="split: expected 'train' or 'test'"):
        load_fashion_mnist("valid")  # type: ignore[arg-type]
    with pytest.raises(NtklabTypeError, match=r"root: expected a str or pathlib\.Path"):
        load_fashion_mnist(root=3)  # type: ignore[arg-type]


def test_load_mnist_refuses_fashion_mnist_folders(tmp_path: Path) -> None:
    """Fashion-MNIST's files have MNIST's names: read through load_mnist they would be
    called MNIST."""
    for name in ("fashion-mnist", "FashionMNIST"):
        make_mnist(tmp_path / name, np.random.default_rng(7))
        with pytest.raises(NtklabValueError, match=r"holds Fashion-MNIST.*load_fashion_mnist"):
            load_mnist(tmp_path / name)
        assert load_fashion_mnist(root=tmp_path / name).name == "fashion-mnist-train"


@pytest.mark.skipif(
    not FASHION_MNIST_ROOT.is_dir(),
    reason=f"Fashion-MNIST not installed in {FASHION_MNIST_ROOT} (apt-get install "
    "dataset-fashion-mnist)",
)
def test_real_fashion_mnist_files() -> None:
    """Xiao, Rasul & Vollgraf (2017): 60000 training and 10000 test images, 28 x 28, ten
    classes of 6000 and 1000 images; standardized with the training pixels' mean and std
    (the usual constants 0.2860 and 0.3530)."""
    raw = load_fashion_mnist(standardize=False)
    assert float(raw.x.double().mean()) == pytest.approx(0.2860, abs=1e-4)
    assert float(raw.x.double().std(unbiased=False)) == pytest.approx(0.3530, abs=1e-4)
    train = load_fashion_mnist()
    assert train.name == "fashion-mnist-train" and train.x.shape == (60000, 1, 28, 28)
    assert train.x.dtype == torch.float32 and train.num_classes == 10
    assert torch.bincount(train.labels).tolist() == [6000] * 10
    torch.testing.assert_close(train.labels, raw.labels, rtol=0, atol=0)
    assert float(train.x.double().mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(train.x.double().std(unbiased=False)) == pytest.approx(1.0, abs=1e-6)
    mean, std = raw.x.double().mean(), raw.x.double().std(unbiased=False)
    torch.testing.assert_close(train.x[:500], ((raw.x[:500] - mean) / std).float())
    del raw
    test = load_fashion_mnist("test")
    assert test.name == "fashion-mnist-test" and test.x.shape == (10000, 1, 28, 28)
    assert torch.bincount(test.labels).tolist() == [1000] * 10
    # the test split on the training scale: close to, not exactly, zero mean and unit std
    assert abs(float(test.x.mean())) < 0.05 and abs(float(test.x.std()) - 1.0) < 0.05
    sub = train.balanced_subsample(2005, torch.Generator().manual_seed(0))
    assert torch.bincount(sub.labels).tolist() == [201] * 5 + [200] * 5
    torch.testing.assert_close(sub.x, train.x[sub.indices], rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# CIFAR-10 on synthetic pickle batches


def make_cifar(folder: Path, rng: np.random.Generator) -> dict[str, tuple[np.ndarray, list]]:
    folder.mkdir(parents=True, exist_ok=True)
    batches = {}
    for name, n in [*((f"data_batch_{i}", 3) for i in range(1, 6)), ("test_batch", 2)]:
        data = rng.integers(0, 256, (n, 3072)).astype(np.uint8)
        labels = rng.integers(0, 10, n).tolist()
        with (folder / name).open("wb") as handle:
            pickle.dump({b"batch_label": b"x", b"data": data, b"labels": labels}, handle, 2)
        batches[name] = (data, labels)
    return batches


def test_load_cifar10_reads_batches(tmp_path: Path) -> None:
    batches = make_cifar(tmp_path / "cifar-10-batches-py", np.random.default_rng(0))
    raw = load_cifar10(tmp_path, "test", standardize=False, dtype=F64)
    data, labels = batches["test_batch"]
    assert raw.x.shape == (2, 3, 32, 32) and raw.name == "cifar10-test"  # NCHW
    # Row layout: 1024 red, then green, then blue values, each plane row-major.
    for i, c, h, w in [(0, 0, 0, 0), (1, 2, 31, 5), (0, 1, 7, 30)]:
        assert float(raw.x[i, c, h, w]) * 255 == pytest.approx(data[i, c * 1024 + h * 32 + w])
    torch.testing.assert_close(raw.labels, torch.tensor(labels))
    train = load_cifar10(tmp_path, dtype=F64)
    assert len(train) == 15
    per_channel = train.x.transpose(0, 1).reshape(3, -1)
    torch.testing.assert_close(per_channel.mean(1), torch.zeros(3, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(per_channel.std(1, unbiased=False), torch.ones(3, dtype=F64))
    train_pixels = np.concatenate([batches[f"data_batch_{i}"][0] for i in range(1, 6)])
    planes = train_pixels.reshape(-1, 3, 1024).transpose(1, 0, 2).reshape(3, -1) / 255.0
    mean, std = planes.mean(1), planes.std(1)
    test = load_cifar10(tmp_path / "cifar-10-batches-py", "test", dtype=F64)
    expected = (raw.x.numpy() - mean[:, None, None]) / std[:, None, None]
    torch.testing.assert_close(test.x, torch.from_numpy(expected))
    assert train.flatten().x.shape == (15, 3072)


def test_load_cifar10_errors(tmp_path: Path) -> None:
    with pytest.raises(NtklabValueError, match="root: expected the CIFAR-10 python batches"):
        load_cifar10(tmp_path)
    make_cifar(tmp_path, np.random.default_rng(1))
    (tmp_path / "data_batch_3").unlink()
    with pytest.raises(NtklabValueError, match="data_batch_3, but it is missing"):
        load_cifar10(tmp_path)
    with pytest.raises(NtklabValueError, match="data_batch_3, but it is missing"):
        load_cifar10(tmp_path, "test")  # the train statistics need every batch
    load_cifar10(tmp_path, "test", standardize=False)

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (print, ("pwned",))

    (tmp_path / "data_batch_3").write_bytes(pickle.dumps({b"data": Evil()}))
    with pytest.raises(NtklabValueError, match=r"could not read .*not allowed"):
        load_cifar10(tmp_path)
    (tmp_path / "data_batch_3").write_bytes(
        pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]})
    )
    with pytest.raises(NtklabValueError, match=r"uint8 of shape \(n, 3072\)"):
        load_cifar10(tmp_path)
    (tmp_path / "data_batch_3").write_bytes(pickle.dumps({b"labels": [0, 1]}))
    with pytest.raises(NtklabValueError, match="the keys 'data' and 'labels'"):
        load_cifar10(tmp_path)


def test_image_loaders_are_channels_first_for_conv_kernels(tmp_path: Path) -> None:
    """The loaders' images go into a convolutional architecture as they are (NCHW); before
    they were NHWC, which the conv kernels now refuse (and used to run as 28 channels)."""
    import ntklab as nl

    make_mnist(tmp_path / "mnist", np.random.default_rng(3))
    make_cifar(tmp_path / "cifar", np.random.default_rng(4))
    batches = {
        "digits": load_digits(images=True).x[:3],
        "mnist": load_mnist(tmp_path / "mnist", dtype=F64).x[:3],
        "cifar10": load_cifar10(tmp_path / "cifar", dtype=F64).x[:3],
    }
    channels = {"digits": 1, "mnist": 1, "cifar10": 3}
    cnn = nl.serial(
        nl.kernels.Conv(filter_shape=(3, 3), w_std=1.4), nl.Relu(), nl.kernels.GlobalAvgPool()
    )
    for name, x in batches.items():
        assert x.shape[1] == channels[name], name
        k = nl.serial(cnn, nl.Dense(w_std=1.0)).kernel(x)
        assert bool(torch.isfinite(k.ntk).all())
