"""The empirical NTK against its peers, in one run (``bench_empirical.py --peers``).

Tools, each timed in its own process (median of ``repeats`` runs after one warm-up; a call
slower than 60 s is run once, and that run is the figure; a process is stopped after
``--timeout`` s; peak memory = the growth of the process's peak resident set over its size
before the warm-up):

- ``ntklab``: :func:`ntklab.empirical.ntk` with ``method="auto"``;
- ``torch.func JC``: the Jacobian contraction of the PyTorch NTK tutorial (per-example
  Jacobians by ``vmap(jacrev)``, one einsum per parameter tensor; the Jacobian is computed
  once since x1 = x2);
- ``torch.func NTK-VP``: NTK-vector products, :math:`\\Theta e = J (J^T e)` for every unit
  cotangent ``e`` of the batch's outputs (``vjp`` then ``jvp`` over the whole batch,
  ``vmap`` over cotangents in chunks of at most 512 MiB of scratch);
- ``neural-tangents 0.6.5`` (``--nt-python PATH``: the interpreter of a separate virtual
  environment with jax/jaxlib 0.4.25; ntklab never imports it): ``nt.empirical_ntk_fn`` on
  the same network written with ``jax.lax`` ops and the same weights, jitted, with the
  Jacobian-contraction (jc) and structured-derivatives (sd) implementations (best shown);
- ``nngeometry 0.4`` (``GramMatrix``) when importable, else skipped with a note.

Agreement: the relative Frobenius error of each tool's kernel against a float64 reference,
a plain ``torch.func`` Jacobian contraction in float64 (in chunks of examples, so that it
fits where the tutorial recipe does not). A process that exceeds ``--memory-cap-gib``
(resident set, polled every 50 ms) is killed and reported as out of memory.

The models (PyTorch's default initialization, seed 0; BatchNorm in eval mode with running
statistics and affine parameters drawn at random so that it is not the identity):

- ``mlp10``: MLP 784-512-512-10, ReLU;  ``mlp1``: MLP 784-512-512-1;
- ``cnn``: Conv(3 -> 32, 3x3, pad 1), ReLU, Conv(32 -> 64, 3x3, pad 1), ReLU, global average
  pooling, Linear(64 -> 10), on 3 x 32 x 32 inputs;
- ``resblock``: Conv(3 -> 32, 3x3) + BatchNorm + ReLU, then a ResNet basic block (Conv 3x3,
  BatchNorm, ReLU, Conv 3x3, BatchNorm, identity shortcut, ReLU) at 32 channels, global
  average pooling, Linear(32 -> 10), on 3 x 32 x 32 inputs;
- ``resnet18``: ResNet-18 (He et al. 2016; CIFAR stem: Conv 3x3, no max pooling; BasicBlocks
  [2, 2, 2, 2] at 64-128-256-512 channels, 1x1 projection shortcuts; 11.2 M parameters),
  10 outputs, on 3 x 32 x 32 inputs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, jacrev, jvp, vjp, vmap

HERE = Path(__file__).resolve().parent
SHAPES = {
    "mlp10": (784,),
    "mlp1": (784,),
    "cnn": (3, 32, 32),
    "resblock": (3, 32, 32),
    "resnet18": (3, 32, 32),
}
LABELS = {
    "mlp10": "MLP 784-512-512-10",
    "mlp1": "MLP 784-512-512-1",
    "cnn": "CNN 3-32-64, GAP, 32x32x3",
    "resblock": "ResNet block + BatchNorm (eval), 32x32x3",
    "resnet18": "ResNet-18 (11.2 M parameters), 32x32x3",
}
TOOLS = ("ntklab", "torch_jc", "torch_vp", "nt", "nngeometry")
TOOL_LABELS = {
    "ntklab": "ntklab (auto)",
    "torch_jc": "torch.func Jacobian contraction",
    "torch_vp": "torch.func NTK-vector products",
    "nt": "neural-tangents 0.6.5",
    "nngeometry": "nngeometry 0.4",
}


@dataclass(frozen=True)
class Row:
    """One line of the table: a model on ``n`` inputs, ``outputs`` in ``dtype``."""

    model: str
    n: int
    outputs: str  # "trace" or "full"
    dtype: str  # "float32" or "float64"

    @property
    def key(self) -> str:
        return f"{self.model}-n{self.n}-{self.outputs}-{self.dtype}"


ROWS = (
    Row("mlp10", 256, "trace", "float32"),
    Row("mlp10", 256, "full", "float64"),
    Row("cnn", 128, "trace", "float32"),
    Row("cnn", 128, "trace", "float64"),
    Row("cnn", 128, "full", "float64"),
    Row("resblock", 64, "trace", "float32"),
    Row("resblock", 64, "trace", "float64"),
    Row("mlp1", 1024, "trace", "float32"),
    Row("resnet18", 8, "trace", "float32"),
)


# ----------------------------------------------------------------------------- models


class ResBlockNet(nn.Module):
    """Conv stem + BatchNorm + ReLU, one basic block (identity shortcut), GAP, linear."""

    def __init__(self, width: int = 32, k: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.stem_bn = nn.BatchNorm2d(width)
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.fc = nn.Linear(width, k)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.stem_bn(self.stem(x)))
        r = torch.relu(self.bn1(self.conv1(h)))
        h = torch.relu(self.bn2(self.conv2(r)) + h)
        return self.fc(h.mean((2, 3)))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(h)) + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 with the CIFAR stem (He et al. 2016): 11.2 M parameters for k = 10."""

    def __init__(self, k: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers = []
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(512, k)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.layer4(self.layer3(self.layer2(self.layer1(h))))
        return self.fc(h.mean((2, 3)))


def build(model: str) -> nn.Module:
    """The named model, initialized with seed 0, BatchNorm statistics drawn, eval mode."""
    torch.manual_seed(0)
    net: nn.Module
    if model in ("mlp10", "mlp1"):
        k = 10 if model == "mlp10" else 1
        net = nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, k)
        )
    elif model == "cnn":
        net = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(64, 10),
        )
    elif model == "resblock":
        net = ResBlockNet()
    elif model == "resnet18":
        net = ResNet18()
    else:
        raise ValueError(f"model: expected one of {sorted(SHAPES)}, got {model!r}")
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for mod in net.modules():
            if isinstance(mod, nn.BatchNorm2d):
                c = mod.num_features
                assert mod.running_mean is not None and mod.running_var is not None
                mod.running_mean.copy_(0.2 * torch.randn(c, generator=gen))
                mod.running_var.copy_(0.5 + torch.rand(c, generator=gen))
                mod.weight.copy_(0.8 + 0.4 * torch.rand(c, generator=gen))
                mod.bias.copy_(0.1 * torch.randn(c, generator=gen))
    return net.eval()


def inputs(model: str, n: int) -> Tensor:
    gen = torch.Generator().manual_seed(2)
    return torch.randn(n, *SHAPES[model], generator=gen, dtype=torch.float64)


# ----------------------------------------------------------------------------- recipes


def _functional(model: nn.Module) -> tuple[dict[str, Tensor], Callable[..., Tensor]]:
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def single(p: dict[str, Tensor], xi: Tensor) -> Tensor:  # shape: (k,)
        return functional_call(model, (p, buffers), (xi.unsqueeze(0),)).squeeze(0)

    def batch(p: dict[str, Tensor], x: Tensor) -> Tensor:  # shape: (n, k)
        out: Tensor = functional_call(model, (p, buffers), (x,))
        return out.reshape(x.shape[0], -1)

    single.batch = batch  # type: ignore[attr-defined]
    return params, single


def torch_jacobian_contraction(model: nn.Module, x: Tensor, outputs: str) -> Tensor:
    """The PyTorch NTK tutorial's Jacobian contraction (x1 = x2: one Jacobian)."""
    params, single = _functional(model)
    jac = vmap(jacrev(single), (None, 0))(params, x)
    rows = [j.flatten(2) for j in jac.values()]  # shape: (n, k, P_p)
    if outputs == "full":
        return torch.stack([torch.einsum("Naf,Mbf->NMab", j, j) for j in rows]).sum(0)
    k = rows[0].shape[1]
    return torch.stack([torch.einsum("Naf,Maf->NM", j, j) for j in rows]).sum(0) / k


def _activations(model: nn.Module, x: Tensor) -> int:
    """Elements of every leaf module's output for one example."""
    total = 0

    def hook(_m: nn.Module, _i: Any, out: Any) -> None:
        nonlocal total
        if isinstance(out, Tensor):
            total += out.numel()

    handles = [m.register_forward_hook(hook) for m in model.modules() if not list(m.children())]
    with torch.no_grad():
        model(x[:1])
    for h in handles:
        h.remove()
    return total


def torch_ntk_vector_products(model: nn.Module, x: Tensor, outputs: str) -> Tensor:
    """Theta e = J (J^T e) for every unit cotangent e of the (n, k) outputs: a vjp and a jvp
    over the whole batch per cotangent, vmapped over chunks of cotangents."""
    params, single = _functional(model)
    batch = single.batch  # type: ignore[attr-defined]
    n = x.shape[0]
    out, vjp_fn = vjp(lambda p: batch(p, x), params)
    k = out.shape[1]
    s = x.element_size()
    n_params = sum(p.numel() for p in params.values())
    per_column = s * (2 * n_params + 3 * n * _activations(model, x))
    chunk = max(1, min(n * k, 2**29 // per_column))

    def column(v: Tensor) -> Tensor:
        (g,) = vjp_fn(v)
        return jvp(lambda p: batch(p, x), (params,), (g,))[1]

    basis = torch.eye(n * k, dtype=x.dtype).view(n * k, n, k)
    cols = vmap(column, chunk_size=chunk)(basis)  # cols[j b, i, a] = Theta_ij,ab
    full = cols.view(n, k, n, k).permute(2, 0, 3, 1)
    if outputs == "full":
        return full
    return full.diagonal(dim1=2, dim2=3).mean(-1)


def reference_kernel(model: nn.Module, x: Tensor, outputs: str) -> Tensor:
    """Float64 Jacobian contraction in chunks of examples (each chunk's Jacobian at most
    1 GiB), blocks on and above the diagonal, mirrored."""
    params, single = _functional(model)
    jac_fn = vmap(jacrev(single), (None, 0))
    n = x.shape[0]
    with torch.no_grad():
        k = int(single.batch(params, x[:1]).shape[1])  # type: ignore[attr-defined]
    n_params = sum(p.numel() for p in params.values())
    c = max(1, min(n, 2**30 // (8 * k * n_params)))
    spans = [slice(i, min(i + c, n)) for i in range(0, n, c)]

    def jac(span: slice) -> Tensor:  # shape: (c, k, P)
        parts = jac_fn(params, x[span])
        return torch.cat([j.flatten(2) for j in parts.values()], dim=2)

    shape = (n, n, k, k) if outputs == "full" else (n, n)
    result = torch.empty(shape, dtype=torch.float64)
    for a, si in enumerate(spans):
        ji = jac(si)
        for sj in spans[a:]:
            jj = ji if sj == si else jac(sj)
            if outputs == "full":
                block = torch.einsum("iap,jbp->ijab", ji, jj)
                result[si, sj] = block
                result[sj, si] = block.permute(1, 0, 3, 2)
            else:
                block = torch.einsum("iap,jap->ij", ji, jj) / k
                result[si, sj] = block
                result[sj, si] = block.T
            del jj
    return result


# ----------------------------------------------------------------------------- workers


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    """Reset VmHWM to the current resident set (Linux: /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


#: A call slower than this (s) is timed once: its warm-up run is the measurement (a one-time
#: cost such as compiling is then included; the tools compared here run for minutes there).
SLOW_CALL = 20.0


def timed(fn: Callable[[], Any], repeats: int) -> tuple[list[float], Any, int]:
    """Warm-up, then ``repeats`` timed calls: (times, last result, peak bytes grown). When
    the warm-up takes more than :data:`SLOW_CALL` seconds it is the only (timed) run."""
    _reset_peak()
    before = _status("VmRSS")
    start = time.perf_counter()
    result = fn()
    warm = time.perf_counter() - start
    if warm > SLOW_CALL:
        return [warm], result, max(0, _status("VmHWM") - before)
    times = []
    for _ in range(repeats):
        result = None
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result, max(0, _status("VmHWM") - before)


def torch_worker(tool: str, row: Row, folder: Path, repeats: int) -> dict[str, Any]:
    """Run one torch tool on one row in this process; write the kernel, return figures."""
    dtype = getattr(torch, row.dtype)
    model = build(row.model).to(dtype)
    state = np.load(folder / f"{row.model}-weights.npz")
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if name in state.files:
                t.copy_(torch.from_numpy(state[name]))
    x = torch.from_numpy(np.load(folder / f"{row.model}-n{row.n}-x.npy")).to(dtype)
    extra: dict[str, Any] = {}
    if tool == "ntklab":
        import ntklab as nl

        fm = nl.empirical.functional_model(model)
        extra["method"] = nl.empirical.plan(fm, x, None, row.outputs).method  # type: ignore[arg-type]

        def fn() -> Tensor:
            return nl.empirical.ntk(model, x, outputs=row.outputs)  # type: ignore[arg-type]

    elif tool == "torch_jc":

        def fn() -> Tensor:
            return torch_jacobian_contraction(model, x, row.outputs)

    elif tool == "torch_vp":

        def fn() -> Tensor:
            return torch_ntk_vector_products(model, x, row.outputs)

    elif tool == "nngeometry":
        return nngeometry_worker(model, x, row, folder, repeats)
    else:
        raise ValueError(tool)
    times, result, peak = timed(fn, repeats)
    np.save(folder / f"{row.key}-{tool}.npy", result.detach().double().numpy())
    return {"times": times, "peak_bytes": peak, **extra}


def nngeometry_worker(
    model: nn.Module, x: Tensor, row: Row, folder: Path, repeats: int
) -> dict[str, Any]:
    """nngeometry 0.4's Gram matrix (``nngeometry.GramMatrix``: its NTK as ``FMatDense``,
    data of shape (k, n, k, n), from the hooks backend ``TorchHooksJacobianBackend``)."""
    from nngeometry import GramMatrix  # type: ignore[import-not-found]
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(x), batch_size=x.shape[0])

    def fn() -> Tensor:
        gram = GramMatrix(model, loader, function=lambda *d: model(d[0])).to_torch()
        full = gram.permute(1, 3, 0, 2)  # (n, n, k, k)
        return full if row.outputs == "full" else full.diagonal(dim1=2, dim2=3).mean(-1)

    times, result, peak = timed(fn, repeats)
    np.save(folder / f"{row.key}-nngeometry.npy", result.detach().double().numpy())
    return {"times": times, "peak_bytes": peak}


def reference_worker(model_name: str, n: int, outputs: str, folder: Path) -> dict[str, Any]:
    model = build(model_name).double()
    state = np.load(folder / f"{model_name}-weights.npz")
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if name in state.files:
                t.copy_(torch.from_numpy(state[name]))
    x = torch.from_numpy(np.load(folder / f"{model_name}-n{n}-x.npy"))
    start = time.perf_counter()
    ref = reference_kernel(model, x, outputs)
    np.save(folder / f"{model_name}-n{n}-ref-{outputs}.npy", ref.numpy())
    return {"seconds": time.perf_counter() - start}


# ----------------------------------------------------------------------------- driver


def _run_capped(cmd: list[str], cap: int, timeout: float) -> tuple[int, str, str, str | None]:
    """Run ``cmd``; kill it when its resident set exceeds ``cap`` bytes or after
    ``timeout`` s. Returns (returncode, stdout, stderr, reason killed or None)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reason: list[str] = []

    def watch() -> None:
        start = time.monotonic()
        status = Path(f"/proc/{proc.pid}/status")
        while proc.poll() is None:
            try:
                text = status.read_text()
                rss = next(
                    int(ln.split()[1]) * 1024 for ln in text.splitlines() if ln.startswith("VmRSS:")
                )
            except (OSError, StopIteration, ValueError):
                rss = 0
            if rss > cap:
                reason.append(f"out of memory ({cap / 2**30:.0f} GiB cap)")
                proc.kill()
                return
            if time.monotonic() - start > timeout:
                reason.append(f"timed out ({timeout:.0f} s)")
                proc.kill()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    out, err = proc.communicate()
    thread.join()
    return proc.returncode, out, err, (reason[0] if reason else None)


def _last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)  # type: ignore[no-any-return]
    raise ValueError("no JSON line in the worker's output")


def prepare(folder: Path, rows: list[Row]) -> None:
    """Weights (float64, by torch names) and inputs of every model, for every tool."""
    for name in sorted({r.model for r in rows}):
        model = build(name).double()
        tensors = dict(model.named_parameters()) | dict(model.named_buffers())
        np.savez(
            folder / f"{name}-weights.npz",
            **{k: v.detach().numpy() for k, v in tensors.items() if v.is_floating_point()},
        )
    for r in rows:
        path = folder / f"{r.model}-n{r.n}-x.npy"
        if not path.exists():
            np.save(path, inputs(r.model, r.n).numpy())


def run_peers(args: argparse.Namespace) -> None:
    """The whole comparison; writes ``--json`` and ``--markdown`` when given."""
    rows = [r for r in ROWS if not args.rows or r.model in args.rows.split(",")]
    tools = [t for t in args.tools.split(",") if t]
    folder = Path(args.workdir or tempfile.mkdtemp(prefix="ntk-peers-"))
    folder.mkdir(parents=True, exist_ok=True)
    prepare(folder, rows)
    cap = int(args.memory_cap_gib * 2**30)
    me = [sys.executable, str(HERE / "bench_empirical.py")]
    env_note = _nngeometry_note()
    log: Callable[[str], None] = lambda s: print(s, flush=True)  # noqa: E731
    # references: one per (model, n), full if some row asks for full
    refs: dict[tuple[str, int], str] = {}
    for r in rows:
        kind = "full" if r.outputs == "full" else refs.get((r.model, r.n), "trace")
        refs[(r.model, r.n)] = kind if refs.get((r.model, r.n)) != "full" else "full"
    ref_seconds: dict[str, float] = {}
    for (name, n), kind in refs.items():
        path = folder / f"{name}-n{n}-ref-{kind}.npy"
        if path.exists():
            continue
        cmd = [*me, "--peer-reference", f"{name}:{n}:{kind}", "--workdir", str(folder)]
        code, out, err, killed = _run_capped(cmd, 2 * cap, args.timeout * 4)
        if code != 0:
            raise RuntimeError(f"reference {name} n={n} failed ({killed}): {err[-2000:]}")
        ref_seconds[f"{name}-n{n}"] = _last_json(out)["seconds"]
        log(f"reference {name} n={n} ({kind}, float64): {ref_seconds[f'{name}-n{n}']:.1f} s")
    results: list[dict[str, Any]] = []
    for r in rows:
        ref = np.load(folder / f"{r.model}-n{r.n}-ref-{refs[(r.model, r.n)]}.npy")
        if r.outputs == "trace" and ref.ndim == 4:
            ref = np.diagonal(ref, axis1=2, axis2=3).mean(-1)
        for tool in tools:
            variants = [("", None)]
            if tool == "nt":
                if not args.nt_python:
                    results.append({**asdict(r), "tool": tool, "skipped": "no --nt-python given"})
                    continue
                variants = [(impl, impl) for impl in args.nt_implementations.split(",")]
            if tool == "nngeometry" and env_note is not None:
                results.append({**asdict(r), "tool": tool, "skipped": env_note})
                continue
            for suffix, impl in variants:
                name = f"{tool}-{suffix}" if suffix else tool
                if tool == "nt":
                    cmd = [
                        args.nt_python,
                        str(HERE / "peers_nt_worker.py"),
                        "--workdir", str(folder), "--model", r.model, "--n", str(r.n),
                        "--outputs", r.outputs, "--dtype", r.dtype, "--implementation",
                        str(impl), "--repeats", str(args.repeats), "--key", r.key,
                    ]  # fmt: skip
                else:
                    cmd = [*me, "--peer-worker", f"{tool}:{r.key}", "--workdir", str(folder)]
                    cmd += ["--repeats", str(args.repeats)]
                code, out, err, killed = _run_capped(cmd, cap, args.timeout)
                entry: dict[str, Any] = {**asdict(r), "tool": name}
                if killed or code != 0:
                    errors = [ln for ln in err.splitlines() if "Error" in ln] or err.splitlines()
                    reason = f"exit {code}: {errors[-1][:300] if errors else ''}"
                    if "RESOURCE_EXHAUSTED" in err:  # XLA refused an allocation
                        reason = "out of memory (XLA allocation refused)"
                    entry["failed"] = killed or reason
                    log(f"{r.key} {name}: {entry['failed']}")
                    results.append(entry)
                    continue
                figures = _last_json(out)
                got = np.load(folder / f"{r.key}-{name}.npy")
                err_rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
                entry.update(figures)
                entry["median_s"] = statistics.median(figures["times"])
                entry["rel_err"] = err_rel
                results.append(entry)
                log(
                    f"{r.key} {name}: {entry['median_s']:.3f} s (runs "
                    f"{', '.join(f'{t:.3f}' for t in figures['times'])}), peak "
                    f"{figures['peak_bytes'] / 2**20:.0f} MiB, rel. err {err_rel:.1e}"
                    + (f", method {figures['method']}" if "method" in figures else "")
                )
    if args.merge_json:  # earlier results of the tools not run now (e.g. after a code change)
        earlier = json.loads(Path(args.merge_json).read_text())["results"]
        ran = {(e["model"], e["n"], e["outputs"], e["dtype"], e["tool"]) for e in results}
        kept = [
            e
            for e in earlier
            if (e["model"], e["n"], e["outputs"], e["dtype"], e["tool"]) not in ran
        ]
        results = kept + results
    report = {
        **run_facts(),
        "rows": [asdict(r) for r in rows],
        "results": results,
        "references_s": ref_seconds,
        "memory_cap_gib": args.memory_cap_gib,
        "repeats": args.repeats,
        "nngeometry": env_note or "importable",
    }
    table = markdown(report)
    print(table, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    if args.markdown:
        Path(args.markdown).write_text(table)


def run_facts() -> dict[str, Any]:
    """When, where and on what code a run ran: UTC time, machine, ntklab commit, torch and
    its thread count (recorded by every empirical-NTK benchmark beside its figures)."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "ntklab_commit": _commit(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def _commit() -> str:
    """The git commit of this checkout (with ``+changes`` when the tree differs), else ``""``."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=HERE,
        ).stdout.strip()
    except OSError:
        return ""
    return head + ("+changes" if head and dirty else "")


def _nngeometry_note() -> str | None:
    try:
        import nngeometry  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return "not importable here (not installable on this machine): skipped"
    return None


def _cell(entries: list[dict[str, Any]]) -> tuple[str, float]:
    """A table cell for one tool's variants: the fastest (label for nt), or why none ran."""
    ok = [e for e in entries if "median_s" in e]
    if not ok:
        if entries and all("skipped" in e for e in entries):
            return "skipped", math.inf
        reasons = sorted({e.get("failed") or e.get("skipped") or "" for e in entries})
        return "; ".join(r for r in reasons if r) or "-", math.inf
    best = min(ok, key=lambda e: e["median_s"])
    label = best["tool"].split("-", 1)[1] if best["tool"].startswith("nt-") else ""
    text = f"{best['median_s']:.3g} s" + (f" ({label})" if label else "")
    return text, float(best["median_s"])


def markdown(report: dict[str, Any]) -> str:
    """Two tables: median time per tool (fastest in bold), then peak memory and agreement."""
    results = report["results"]
    rows = [Row(**r) for r in report["rows"]]
    tools = [t for t in TOOLS if any(e["tool"].split("-")[0] == t for e in results)]
    head = "| model, n | outputs, dtype | " + " | ".join(TOOL_LABELS[t] for t in tools) + " |"
    lines = [head, "|---|---|" + "---|" * len(tools)]
    detail = [head.replace("| outputs, dtype |", "| outputs, dtype |"), lines[1]]
    for r in rows:
        mine = [
            e
            for e in results
            if (e["model"], e["n"], e["outputs"], e["dtype"]) == (r.model, r.n, r.outputs, r.dtype)
        ]
        cells = []
        for t in tools:
            cells.append(_cell([e for e in mine if e["tool"].split("-")[0] == t]))
        fastest = min((c[1] for c in cells), default=math.inf)
        texts = [f"**{c[0]}**" if c[1] == fastest and math.isfinite(c[1]) else c[0] for c in cells]
        dt = "fp32" if r.dtype == "float32" else "fp64"
        lines.append(
            f"| {LABELS[r.model]}, {r.n} | {r.outputs}, {dt} | " + " | ".join(texts) + " |"
        )
        mem = []
        for t in tools:
            ok = [e for e in mine if e["tool"].split("-")[0] == t and "median_s" in e]
            if not ok:
                mem.append("-")
                continue
            best = min(ok, key=lambda e: e["median_s"])
            mem.append(f"{best['peak_bytes'] / 2**20:.0f} MiB, {best['rel_err']:.0e}")
        detail.append(f"| {LABELS[r.model]}, {r.n} | {r.outputs}, {dt} | " + " | ".join(mem) + " |")
    note = (
        f"Median of {report['repeats']} runs after a warm-up, each tool in its own process, "
        f"{report['threads']} threads, memory cap {report['memory_cap_gib']:g} GiB; nngeometry: "
        f"{report['nngeometry']}."
    )
    return (
        "\n".join(lines)
        + "\n\nPeak memory (growth of the resident set) and relative error against the float64 "
        "reference:\n\n" + "\n".join(detail) + "\n\n" + note + "\n"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the peer comparison (``--peers``) and of its worker processes."""
    group = parser.add_argument_group("peers (--peers)")
    group.add_argument("--peers", action="store_true", help="run the peer comparison")
    group.add_argument("--nt-python", default=None, help="python of a neural-tangents venv")
    group.add_argument("--nt-implementations", default="jc,sd")
    group.add_argument("--tools", default=",".join(TOOLS))
    group.add_argument("--rows", default="", help="models to run (default: all)")
    group.add_argument("--markdown", default=None, help="write the table here")
    group.add_argument("--merge-json", default=None, help="keep other tools' results from here")
    group.add_argument("--workdir", default=None)
    group.add_argument("--memory-cap-gib", type=float, default=10.0)
    group.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    group.add_argument("--peer-worker", default=None, help=argparse.SUPPRESS)
    group.add_argument("--peer-reference", default=None, help=argparse.SUPPRESS)


def dispatch(args: argparse.Namespace) -> bool:
    """Handle ``--peers`` and the worker flags; False when none was given."""
    if args.peer_worker:
        tool, key = args.peer_worker.split(":", 1)
        row = next(r for r in ROWS if r.key == key)
        print(json.dumps(torch_worker(tool, row, Path(args.workdir), args.repeats)), flush=True)
        return True
    if args.peer_reference:
        name, n, kind = args.peer_reference.split(":")
        print(json.dumps(reference_worker(name, int(n), kind, Path(args.workdir))), flush=True)
        return True
    if args.peers:
        run_peers(args)
        return True
    return False


if __name__ == "__main__":  # run through bench_empirical.py --peers
    os.execv(sys.executable, [sys.executable, str(HERE / "bench_empirical.py"), *sys.argv[1:]])
