"""A fused CPU kernel for chains of ``[Relu, Dense]`` layers.

The eager recursion of :meth:`Architecture.kernel` makes about ten passes over the
``(n1, n2)`` matrices per layer. For runs of pairs ``[Relu(), Dense]`` (NTK
parameterization, plain-number scales; optionally after one such ``Dense``), this module runs
the whole chain per matrix entry in registers instead: one read and one write of the NNGP and
NTK matrices in total. For entry :math:`(i, j)` and each pair of the run, with the variances
:math:`v_1, v_2` entering its ReLU,

.. math::

    s = \\sqrt{v_1 v_2}, \\quad c = \\mathrm{clamp}(K / s, -1, 1), \\quad
    J_0 = \\pi - \\arccos c, \\quad J_1 = \\sqrt{1 - c^2} + J_0 c,

    K \\leftarrow \\sigma_w^2 \\frac{s J_1}{2\\pi} + \\sigma_b^2, \\qquad
    \\Theta \\leftarrow K + \\sigma_w^2 \\Theta \\frac{J_0}{2\\pi}

(arc-cosine kernels, Cho & Saul 2009; NTK recursion of arXiv:1806.07572). The diagonal
recursion (the variances) stays in torch and runs first.

One deliberate difference from the eager path: a correlation within 8 ulp of :math:`\\pm 1`
is taken as :math:`\\pm 1`. Rounding cannot tell such values apart, and near
:math:`c = 1` it moves the angle by :math:`\\sqrt{2 (1 - c)}` (about 2e-8 in float64 and
5e-4 in float32), so that ``K(x)`` and ``K(x, x)`` would otherwise differ there.

The kernel is C, compiled at first use with the system compiler (``$CC``, default ``cc``)
into ``$NTKLAB_CACHE`` (default ``~/.cache/ntklab``) and loaded with :mod:`ctypes`: no torch
headers and no build step at install. ``arccos`` and :math:`\\sqrt{1 - c^2}` come from one
branch-free polynomial routine (a few ulp in both precisions) so that gcc vectorizes the inner
loop; OpenMP splits the rows over ``torch.get_num_threads()`` threads. When ``x2`` is
``None`` only the upper triangle is computed and mirrored. Set ``NTKLAB_DISABLE_FUSED=1`` to
use the eager path; without a working compiler the eager path is used silently (the reason
is logged at DEBUG level on the ``"ntklab"`` logger).

The same library carries the fused ``[Conv, Relu]`` chain (:mod:`._conv_source`, used by
:mod:`._fused_conv`) and the cotangent loops of the structured empirical NTK
(:mod:`._cotangent_source`, used by :mod:`ntklab.empirical._compiled_cotangents`).

The cache is keyed by the C source, the compiler (command, the file it runs, its first
``--version`` line), the flags and the CPU's features, so a change of any of them compiles
anew. A library is code that runs in this process, so the cache is treated as ssh treats
``~/.ssh``: the folder is created with mode 0700 and used only when it is owned by the current
user and not writable by group or others, and every folder above it (as given and with links
resolved) is owned by the user or root and not writable by others unless sticky (as
``/tmp``). Otherwise a WARNING names the folder, its owner or mode, and the fix (``chmod 700``
or another ``$NTKLAB_CACHE``), and the eager path is used (same results), also for an explicit
``$NTKLAB_CACHE``: the cache never breaks a kernel call. A library is loaded only if it is a
regular file (not a link) owned by the user and not writable by others, and its SHA-256, with
the source hash, compiler identity and flags, equals its entry in ``manifest.json``, written
atomically (a temporary file, fsync, ``os.replace``) by the build in the same private folder;
the checked file descriptor itself is loaded (``/proc/self/fd``), so the file cannot be
swapped between check and load. A refused or failed load is logged at WARNING and the
library is compiled again. Compiling is announced once (a WARNING on the ``"ntklab"`` logger,
with the cache folder), bounded in time by ``$NTKLAB_COMPILE_TIMEOUT`` seconds per compiler
command (default 120), and done under a lock (``fcntl.flock`` on ``.lock`` in the folder): one
process builds, the others wait (at most two compiler timeouts plus a second, then the eager
path) and load its library. A compiler that fails or times out leaves a ``.failed`` marker
with its reason and compiler identity, so later processes use the eager path at once; the
marker expires after ``$NTKLAB_COMPILE_RETRY_AFTER`` seconds (default a day), or with another
compiler, and the retry is logged at INFO.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import hashlib
import json
import logging
import math
import os
import platform
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..errors import NtklabValueError, NumericalWarning
from ._conv_source import CONV_GENERIC, CONV_HEAD
from ._cotangent_source import COTANGENT_GENERIC, COTANGENT_HEAD
from .covariance import next_diagonal

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .engine import Layer
    from .kernel import KernelState

__all__ = [
    "available",
    "fused_relu_dense_chain",
    "propagate_run",
    "run_length",
    "split_runs",
    "supports",
]

logger = logging.getLogger("ntklab")

fcntl: ModuleType | None
if sys.platform != "win32":
    import fcntl
    import pwd
else:  # pragma: no cover - no flock on Windows: builds are not serialized there
    fcntl = None

_DISABLE_ENV = "NTKLAB_DISABLE_FUSED"
_CACHE_ENV = "NTKLAB_CACHE"
_SUFFIX = {torch.float32: "f", torch.float64: "d"}

# --------------------------------------------------------------------------------------------
# C source

_HEAD = r"""
#define _DEFAULT_SOURCE /* madvise */
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define TILE 128 /* square tiles: a tile row (TILE entries) stays in L1 through all layers */
#define SNAP_ULPS 8 /* correlations within SNAP_ULPS ulp of +-1 are taken as +-1 */

/* acos(x) and sqrt(1 - x^2), branch-free (both halves are computed and selected, so that the
   loops vectorize), with a single square root:
     |x| <= 1/2:  z = x^2,          acos x = pi/2 - sgn(x) asin|x|,   sqrt(1 - x^2) = Q(z)
     |x| >  1/2:  z = (1 - |x|)/2,  acos|x| = 2 asin(sqrt z),         sqrt(1 - x^2) = 2 sqrt(z) Q(z)
   with asin(s) = s + s z G(z) for s = sqrt(z) in [0, 1/2], and Q(z) = sqrt(1 - z) on [0, 1/4].
   G and Q are Chebyshev interpolants; relative error 4e-7 and 2e-8 (float), 1e-15 and 4e-17
   (double); the results are within 3 ulp of the correctly rounded values. */
static inline void acos_sin_f(float x, float *acos_x, float *sin_x)
{
    const float ax = x < 0 ? -x : x;
    const int big = ax > 0.5f;
    const float z = big ? 0.5f * (1.0f - ax) : x * x;
    const float s = big ? sqrtf(z) : ax;
    const float g = 0.16666673123836517f + z * (0.07498855143785477f + z * (0.045001380145549774f
                    + z * (0.026554541662335396f + z * 0.03808502480387688f)));
    const float q = 1.0f + z * (-0.5000013709068298f + z * (-0.12493826448917389f
                    + z * (-0.06352239847183228f + z * (-0.03161308914422989f
                    + z * -0.05078177526593208f))));
    const float a = s + s * (z * g); /* asin(s) */
    const float small_r = x < 0 ? 1.57079632679489661923f + a : 1.57079632679489661923f - a;
    const float big_r = x < 0 ? 3.14159265358979323846f - 2.0f * a : 2.0f * a;
    *acos_x = big ? big_r : small_r;
    *sin_x = big ? 2.0f * s * q : q;
}

static inline void acos_sin_d(double x, double *acos_x, double *sin_x)
{
    const double ax = x < 0 ? -x : x;
    const int big = ax > 0.5;
    const double z = big ? 0.5 * (1.0 - ax) : x * x;
    const double s = big ? sqrt(z) : ax;
    const double g = 0.1666666666666665 + z * (0.07500000000020764 + z * (0.044642857103423646
                     + z * (0.03038194736709848 + z * (0.02237204763174451
                     + z * (0.017355259955786323 + z * (0.013929652902326633
                     + z * (0.011875494382636922 + z * (0.0078029494773533175
                     + z * (0.01603551434914882 + z * (-0.010749050339697808
                     + z * 0.028169218060881414))))))))));
    const double q = 1.0 + z * (-0.4999999999999815 + z * (-0.1250000000041244
                     + z * (-0.06249999963931342 + z * (-0.0390625163329017
                     + z * (-0.02734331164089207 + z * (-0.020515325325567758
                     + z * (-0.016027596302914372 + z * (-0.01375441009387522
                     + z * (-0.007446828865423663 + z * (-0.021194963521473254
                     + z * (0.017190548009281534 + z * -0.034308838583332474)))))))))));
    const double a = s + s * (z * g); /* asin(s) */
    const double small_r = x < 0 ? 1.57079632679489661923 + a : 1.57079632679489661923 - a;
    const double big_r = x < 0 ? 3.14159265358979323846 - 2.0 * a : 2.0 * a;
    *acos_x = big ? big_r : small_r;
    *sin_x = big ? 2.0 * s * q : q;
}

/* Ask for transparent huge pages on a fresh, untouched output buffer: its first touch then
   costs 2 MB page faults instead of 4 kB ones (about 10 ms less per 64 MB). Advisory. */
void ntklab_advise_hugepages(void *p, int64_t nbytes)
{
#if defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)1 << 21;
    const uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    const uintptr_t e = ((uintptr_t)p + (uintptr_t)nbytes) & ~(huge - 1);
    if (e > a)
        (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
    (void)p;
    (void)nbytes;
#endif
}
"""

# Compiled once per precision, after #defines of REAL, UINT, EXP_MASK and SFX(name).
_GENERIC = r"""
/* for the tests: y = acos(x), sn = sqrt(1 - x^2) */
void SFX(ntklab_acos_sin)(const REAL *x, REAL *y, REAL *sn, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        SFX(acos_sin)(x[i], &y[i], &sn[i]);
}

/* One row segment k[0..m), t[0..m) of row i through [Dense] + L pairs [Relu, Dense].
   has_t = 0: t is not read (the NTK is zero so far). lead = 1: a leading Dense, whose scales
   are w2[0], b2[0], precedes the pairs. sa, ra (L x n1) and sb, rb (L x n2, offset to the
   segment's first column) hold sqrt(v) and 1/sqrt(v) of the variances entering each Relu.
   Returns the largest |k / s| seen; sets *bad when an incoming entry is NaN or inf (tested on
   the bits: -ffast-math assumes finite values). */
static REAL SFX(segment)(REAL *restrict k, REAL *restrict t, int has_t, int64_t m, int lead,
                         int L, const REAL *restrict sa, const REAL *restrict ra, int64_t n1,
                         int64_t i, const REAL *restrict sb, const REAL *restrict rb, int64_t n2,
                         const REAL *restrict w2, const REAL *restrict b2, int *bad)
{
    int nonfinite = 0;
#pragma omp simd reduction(| : nonfinite)
    for (int64_t j = 0; j < m; j++) {
        UINT bits;
        memcpy(&bits, &k[j], sizeof bits);
        nonfinite |= (bits & EXP_MASK) == EXP_MASK;
    }
    if (has_t) {
#pragma omp simd reduction(| : nonfinite)
        for (int64_t j = 0; j < m; j++) {
            UINT bits;
            memcpy(&bits, &t[j], sizeof bits);
            nonfinite |= (bits & EXP_MASK) == EXP_MASK;
        }
    } else {
        memset(t, 0, (size_t)m * sizeof(REAL));
    }
    if (nonfinite) {
        *bad = 1;
        return 0;
    }
    if (lead) {
        const REAL w = w2[0], b = b2[0];
#pragma omp simd
        for (int64_t j = 0; j < m; j++) {
            const REAL kn = w * k[j] + b;
            k[j] = kn;
            t[j] = kn + w * t[j];
        }
    }
    REAL cmax = 0;
    for (int l = 0; l < L; l++) {
        const REAL si = sa[l * n1 + i] * (REAL)0.15915494309189533577; /* sqrt(v1) / (2 pi) */
        const REAL ri = ra[l * n1 + i], w = w2[lead + l], b = b2[lead + l];
        const REAL *restrict sbl = sb + l * n2;
        const REAL *restrict rbl = rb + l * n2;
#pragma omp simd reduction(max : cmax)
        for (int64_t j = 0; j < m; j++) {
            REAL c = k[j] * (ri * rbl[j]); /* cos(theta) */
            const REAL ac = c < 0 ? -c : c;
            cmax = ac > cmax ? ac : cmax;
            c = c > 1 - SNAP ? 1 : c; /* clamp, and snap what rounding cannot tell from 1 */
            c = c < SNAP - 1 ? -1 : c;
            REAL j0, sn;
            SFX(acos_sin)(-c, &j0, &sn);  /* pi - theta, sin(theta) */
            const REAL j1 = sn + j0 * c;  /* sin(theta) + (pi - theta) cos(theta) */
            const REAL kn = w * ((j1 * si) * sbl[j]) + b;
            k[j] = kn;
            t[j] = kn + w * (t[j] * (j0 * (REAL)0.15915494309189533577));
        }
    }
    return cmax;
}

/* The chain over the whole (n1, n2) matrices k (NNGP) and t (NTK), row-major, in place (t
   is only written when has_t = 0). symmetric: k and t are symmetric and sa == sb; only the
   upper triangle is computed, then mirrored. Returns 1 if an input entry was not finite;
   *cmax_out = max |k / s|. */
int SFX(ntklab_relu_dense_chain)(REAL *k, REAL *t, int has_t, int64_t n1, int64_t n2, int lead,
                                 int L, const REAL *sa, const REAL *ra, const REAL *sb,
                                 const REAL *rb, const REAL *w2, const REAL *b2, int symmetric,
                                 int nthreads, REAL *cmax_out)
{
    const int64_t nb1 = (n1 + TILE - 1) / TILE, nb2 = (n2 + TILE - 1) / TILE;
    REAL cmax = 0;
    int bad = 0;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) \
    reduction(max : cmax) reduction(| : bad)
    for (int64_t p = 0; p < nb1 * nb2; p++) {
        const int64_t bi = p / nb2, bj = p % nb2;
        if (symmetric && bj < bi)
            continue;
        const int64_t i0 = bi * TILE, i1 = i0 + TILE < n1 ? i0 + TILE : n1;
        const int64_t j0 = bj * TILE, j1 = j0 + TILE < n2 ? j0 + TILE : n2;
        for (int64_t i = i0; i < i1; i++) {
            const int64_t js = (symmetric && bi == bj) ? i : j0;
            const REAL c = SFX(segment)(k + i * n2 + js, t + i * n2 + js, has_t, j1 - js, lead,
                                        L, sa, ra, n1, i, sb + js, rb + js, n2, w2, b2, &bad);
            cmax = c > cmax ? c : cmax;
        }
        if (symmetric) { /* mirror the upper tile into the lower one, by 16 x 16 blocks */
            for (int64_t jb = j0; jb < j1; jb += 16) {
                for (int64_t ib = i0; ib < i1 && ib <= jb; ib += 16) {
                    const int64_t je = jb + 16 < j1 ? jb + 16 : j1;
                    for (int64_t j = jb; j < je; j++) {
                        int64_t ie = ib + 16 < i1 ? ib + 16 : i1;
                        ie = bi == bj && j < ie ? j : ie;
                        for (int64_t i = ib; i < ie; i++) {
                            k[j * n2 + i] = k[i * n2 + j];
                            t[j * n2 + i] = t[i * n2 + j];
                        }
                    }
                }
            }
        }
    }
    *cmax_out = cmax;
    return bad;
}
"""

_FLOAT = """
#define REAL float
#define UINT uint32_t
#define EXP_MASK 0x7f800000u
#define SNAP (SNAP_ULPS * 1.1920928955078125e-07f)
#define SFX(name) name##_f
"""
_DOUBLE = """
#undef REAL
#undef UINT
#undef EXP_MASK
#undef SNAP
#undef SFX
#define REAL double
#define UINT uint64_t
#define EXP_MASK 0x7ff0000000000000ull
#define SNAP (SNAP_ULPS * 2.220446049250313e-16)
#define SFX(name) name##_d
"""
SOURCE = (
    _HEAD
    + CONV_HEAD
    + COTANGENT_HEAD
    + _FLOAT
    + _GENERIC
    + CONV_GENERIC
    + COTANGENT_GENERIC
    + _DOUBLE
    + _GENERIC
    + CONV_GENERIC
    + COTANGENT_GENERIC
)

# -ffast-math lets gcc vectorize the loops (reductions, selects); the clamps are explicit and
# the NaN/inf test works on the bits. It is given to the compile step only: linking with it
# pulls in crtfastmath.o, which would set flush-to-zero for the whole process.
_COMPILE_FLAGS = ("-O3", "-ffast-math", "-march=native", "-fPIC", "-std=c99")
_X86_FLAGS = ("-mprefer-vector-width=512",)  # ignored by CPUs without AVX-512
_OPENMP = ("-fopenmp",)


# --------------------------------------------------------------------------------------------
# compilation and loading
#
# The cache folder is treated as ssh treats ``~/.ssh``: a library is code that runs in this
# process, so nothing is loaded from a folder that another user could write to.


def _compiler() -> str:
    return os.environ.get("CC") or "cc"


def _cache_dir() -> Path:
    env = os.environ.get(_CACHE_ENV)
    path = Path(env).expanduser() if env else Path.home() / ".cache" / "ntklab"
    return Path(os.path.abspath(path))


def _cpu_id() -> str:
    """The machine and, where readable, the CPU's feature flags (``-march=native``)."""
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return f"{platform.machine()} {platform.processor()} {flags.strip()}"


def _flag_sets() -> list[tuple[str, ...]]:
    """Compiler flags to try, best first (without OpenMP the kernel runs on one thread)."""
    base: tuple[str, ...] = _COMPILE_FLAGS
    if platform.machine().lower() in ("x86_64", "amd64"):
        base = base + _X86_FLAGS
    return [base + _OPENMP, base, ("-O3", "-fPIC", "-std=c99")]


_TIMEOUT_ENV = "NTKLAB_COMPILE_TIMEOUT"
_DEFAULT_TIMEOUT_S = 120.0
_RETRY_ENV = "NTKLAB_COMPILE_RETRY_AFTER"
_DEFAULT_RETRY_S = 86400.0
_MANIFEST = "manifest.json"
_LOCK = ".lock"
_MAX_MANIFEST_BYTES = 1 << 20


def _compile_timeout() -> float:
    """Seconds one compiler command may take (``$NTKLAB_COMPILE_TIMEOUT``, default 120)."""
    text = os.environ.get(_TIMEOUT_ENV, "")
    try:
        value = float(text) if text else _DEFAULT_TIMEOUT_S
    except ValueError:
        value = _DEFAULT_TIMEOUT_S
    return value if value > 0 else _DEFAULT_TIMEOUT_S


def _retry_after() -> float:
    """Seconds a failure marker holds (``$NTKLAB_COMPILE_RETRY_AFTER``, default a day)."""
    text = os.environ.get(_RETRY_ENV, "")
    try:
        value = float(text) if text else _DEFAULT_RETRY_S
    except ValueError:
        value = _DEFAULT_RETRY_S
    return value if value >= 0 and math.isfinite(value) else _DEFAULT_RETRY_S


def _lock_wait() -> float:
    """Seconds to wait for another process's build: its two compiler commands, plus 1 s."""
    return 2.0 * _compile_timeout() + 1.0


def _compiler_version() -> str:
    """First line of ``$CC --version`` (empty when it cannot be run)."""
    cc = shlex.split(_compiler())
    if not cc or shutil.which(cc[0]) is None:
        return ""
    try:
        proc = subprocess.run(
            [*cc, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = proc.stdout.strip().splitlines()
    return lines[0] if lines else ""


@dataclasses.dataclass(frozen=True)
class _Compiler:
    """The compiler's identity: the command (``$CC``), the file it runs, its version."""

    command: str
    path: str
    version: str


def _compiler_identity() -> _Compiler | None:
    """The identity of ``$CC`` (``None`` when it is not on ``PATH``)."""
    cc = shlex.split(_compiler())
    found = shutil.which(cc[0]) if cc else None
    if found is None:
        return None
    return _Compiler(_compiler(), os.path.realpath(found), _compiler_version())


def _library_path(flags: tuple[str, ...], compiler: _Compiler | None = None) -> Path:
    """The cached library for ``flags``: keyed by source, compiler (command, file, version),
    flags and CPU."""
    cc = compiler if compiler is not None else _compiler_identity()
    ident = [cc.command, cc.path, cc.version] if cc is not None else [_compiler(), "", ""]
    key = "\n".join([SOURCE, *ident, " ".join(flags), _cpu_id()])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return _cache_dir() / f"fused_relu_{digest}.so"


def _failure_path(library: Path) -> Path:
    return library.with_name(library.name + ".failed")


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, NameError):  # an unnamed uid; no pwd module
        return f"uid {uid}"


def _folder_problem(folder: Path) -> str | None:
    """Why ``folder`` is not private (``None``: it is), creating it with mode 0700 if missing.

    Checked, as ssh checks its folder (a missing folder, and any missing above it, is
    created with mode 0700): the folder (symbolic links resolved) is a directory
    owned by the current user and not writable by group or others; every folder above it, on
    the path as given and on the resolved one, is owned by the current user or root and is
    not writable by group or others unless it has the sticky bit (as ``/tmp``), so nobody
    else can rename the folder away and put another in its place.
    """
    uid = os.geteuid()
    missing = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]
    for path in reversed(missing):  # the folder, and any missing above it, made private
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)  # whatever the umask
    real = Path(os.path.realpath(folder))
    st = os.stat(real)
    if not stat.S_ISDIR(st.st_mode):
        return f"{real} is not a folder"
    if st.st_uid != uid:
        return f"{real} is owned by {_owner(st.st_uid)}, not by you ({_owner(uid)})"
    if st.st_mode & 0o022:
        return f"{real} is writable by group or others (mode {_mode(st)})"
    above = {Path(os.path.realpath(p)) for p in folder.parents} | set(real.parents)
    for parent in sorted(above):
        pst = os.stat(parent)
        if pst.st_uid not in (0, uid):
            return f"the folder above it, {parent}, is owned by {_owner(pst.st_uid)}"
        if pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX:
            return (
                f"the folder above it, {parent}, is writable by group or others "
                f"(mode {_mode(pst)}, no sticky bit)"
            )
    return None


def _open_private(path: Path) -> int:
    """A read-only descriptor of ``path`` if it is a regular file (not a symbolic link)
    owned by the current user and not writable by group or others; else ``PermissionError``
    (``FileNotFoundError`` when it does not exist)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise PermissionError(f"{path} is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError(f"{path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise PermissionError(f"{path} is owned by {_owner(st.st_uid)}, not by you")
        if st.st_mode & 0o022:
            raise PermissionError(f"{path} is writable by group or others (mode {_mode(st)})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _fd_digest(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    with os.fdopen(os.dup(fd), "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _source_digest() -> str:
    return hashlib.sha256(SOURCE.encode()).hexdigest()


def _entry(digest: str, flags: tuple[str, ...], compiler: _Compiler) -> dict[str, object]:
    """What the manifest records of one library."""
    return {
        "sha256": digest,
        "source_sha256": _source_digest(),
        "compiler": dataclasses.asdict(compiler),
        "flags": list(flags),
    }


def _read_manifest(folder: Path) -> dict[str, object]:
    """The manifest's entries by library file name (empty when it is missing or refused)."""
    try:
        fd = _open_private(folder / _MANIFEST)
    except FileNotFoundError:
        return {}
    except OSError as err:
        logger.warning("ignoring the manifest of ntklab's C kernels: %s", err)
        return {}
    with os.fdopen(fd, "rb") as f:
        data = f.read(_MAX_MANIFEST_BYTES + 1)
    try:
        manifest = json.loads(data) if len(data) <= _MAX_MANIFEST_BYTES else None
    except ValueError:
        manifest = None
    entries = manifest.get("libraries") if isinstance(manifest, dict) else None
    return entries if isinstance(entries, dict) else {}


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file, fsync, ``os.replace``)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _record(library: Path, entry: dict[str, object]) -> None:
    """Add ``library``'s entry to the manifest (under the build lock)."""
    entries = _read_manifest(library.parent)
    entries[library.name] = entry
    text = json.dumps({"version": 1, "libraries": entries}, indent=1, sort_keys=True)
    _write_private(library.parent / _MANIFEST, text + "\n")


def _open_library(library: Path, flags: tuple[str, ...], compiler: _Compiler) -> int:
    """A descriptor of ``library`` once it passed every check; else ``PermissionError``
    (``FileNotFoundError`` when it does not exist). The checks: :func:`_open_private`, and
    its SHA-256, source hash, compiler and flags equal to those in the manifest."""
    fd = _open_private(library)
    try:
        entry = _read_manifest(library.parent).get(library.name)
        if entry is None:
            raise PermissionError(f"{library} has no entry in {library.parent / _MANIFEST}")
        if entry != _entry(_fd_digest(fd), flags, compiler):
            raise PermissionError(
                f"{library} does not match its entry in {library.parent / _MANIFEST}"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _verified(library: Path, flags: tuple[str, ...] | None = None) -> bool:
    """Whether ``library`` (built with ``flags``: by default the set whose path it is)
    would be loaded."""
    compiler = _compiler_identity()
    if compiler is None:
        return False
    if flags is None:
        flags = next((f for f in _flag_sets() if _library_path(f, compiler) == library), None)
        if flags is None:
            return False
    try:
        os.close(_open_library(library, flags, compiler))
    except OSError:
        return False
    return True


def _load_fd(fd: int, library: Path) -> ctypes.CDLL:
    """Load the checked file behind ``fd`` itself (not whatever ``library`` names by now)."""
    proc = f"/proc/self/fd/{fd}"
    return _declare(ctypes.CDLL(proc if os.path.exists(proc) else str(library)))


@contextlib.contextmanager
def _build_lock(folder: Path, wait: float) -> Iterator[None]:
    """Hold ``folder/.lock`` (``fcntl.flock``), waiting at most ``wait`` seconds for it
    (``TimeoutError`` after that); no lock where ``fcntl`` does not exist."""
    if fcntl is None:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(folder / _LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + wait
        waiting = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waiting:
                    logger.info("waiting for another process compiling into %s", folder)
                    waiting = True
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"another process held {folder / _LOCK} for more than {wait:g} s"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def _failed_recently(library: Path, compiler: _Compiler, *, announce: bool = True) -> bool:
    """Whether compiling ``library`` failed less than :func:`_retry_after` seconds ago with
    this compiler (a marker that is older, unreadable or from another compiler expires, and
    the retry is announced)."""
    marker = _failure_path(library)
    try:
        age = time.time() - os.lstat(marker).st_mtime
    except FileNotFoundError:
        return False
    ttl = _retry_after()
    try:
        fd = _open_private(marker)
        with os.fdopen(fd, "rb") as f:
            record = json.loads(f.read(_MAX_MANIFEST_BYTES))
        same = isinstance(record, dict) and record.get("compiler") == dataclasses.asdict(compiler)
        reason = str(record.get("reason", "")) if isinstance(record, dict) else ""
    except (OSError, ValueError):
        same, reason = False, "unreadable marker"
    if same and 0 <= age < ttl:
        logger.debug("compiling %s failed %.0f s ago (%s); not retried yet", library, age, reason)
        return True
    if not announce:
        return False
    logger.info(
        "retrying to compile %s: it failed %.0f s ago (%s); failure markers expire after %g s "
        "(%s) or with another compiler",
        library.name,
        age,
        reason.splitlines()[0] if reason else "no reason recorded",
        ttl,
        _RETRY_ENV,
    )
    return False


def _record_failure(library: Path, compiler: _Compiler, err: BaseException) -> None:
    record = {"reason": str(err), "compiler": dataclasses.asdict(compiler), "time": time.time()}
    with contextlib.suppress(OSError):
        _write_private(_failure_path(library), json.dumps(record) + "\n")


def _compile(target: Path, flags: tuple[str, ...]) -> None:
    """Compile ``SOURCE`` to ``target``, atomically (a temporary file, then ``os.replace``),
    and record it in the manifest. Each compiler command is bounded by
    :func:`_compile_timeout`. The caller holds the build lock."""
    compiler = _compiler_identity()
    if compiler is None:
        raise FileNotFoundError(f"no C compiler {_compiler()!r} on PATH")
    cc = shlex.split(compiler.command)
    timeout = _compile_timeout()
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        src, obj, lib = Path(tmp, "fused_relu.c"), Path(tmp, "fused_relu.o"), Path(tmp, "lib.so")
        src.write_text(SOURCE)
        link_flags = [f for f in flags if f in _OPENMP]
        for cmd in (
            [*cc, *flags, "-c", str(src), "-o", str(obj)],
            [*cc, "-shared", *link_flags, str(obj), "-o", str(lib), "-lm"],
        ):
            try:
                proc = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=timeout, check=False
                )
            except subprocess.TimeoutExpired:
                raise TimeoutError(
                    f"{' '.join(cmd)} took more than {timeout:g} s ({_TIMEOUT_ENV})"
                ) from None
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()}")
        os.chmod(lib, 0o700)  # whatever the umask
        with open(lib, "rb") as f:
            os.fsync(f.fileno())
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        os.replace(lib, target)
    _record(target, _entry(digest, flags, compiler))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_failure_path(target))


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    ptr, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    for sfx in _SUFFIX.values():
        chain = getattr(lib, f"ntklab_relu_dense_chain_{sfx}")
        chain.argtypes = [ptr, ptr, i32, i64, i64, i32, i32, *[ptr] * 6, i32, i32, ptr]
        chain.restype = i32
        conv = getattr(lib, f"ntklab_conv_chain_{sfx}")
        conv.argtypes = [ptr, ptr, i32, ptr, ptr, i64, ptr, ptr, ptr, i64, ptr, i32, i32, i32, i32]
        conv.argtypes += [*[ptr] * 7, i64, i64, i32, ptr]
        conv.restype = i32
        acos = getattr(lib, f"ntklab_acos_sin_{sfx}")
        acos.argtypes = [ptr, ptr, ptr, i64]
        acos.restype = None
        cot = getattr(lib, f"ntklab_input_cotangents_{sfx}")
        cot.argtypes = [ptr, i64, i32, i64, i64, ptr, i32, i32, i32, i32, i32, ptr, i32, ptr]
        cot.argtypes += [i64] * 6 + [i32]
        cot.restype = None
        fac = getattr(lib, f"ntklab_factor_cotangents_{sfx}")
        real = ctypes.c_float if sfx == "f" else ctypes.c_double
        fac.argtypes = [ptr, i32, i64, i64, i64, i64, real, ptr, ptr, i32]
        fac.restype = i32
    lib.ntklab_advise_hugepages.argtypes = [ptr, i64]
    lib.ntklab_advise_hugepages.restype = None
    return lib


class _Loader:
    """Compiles and loads the library once per process (``None`` when it cannot)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._lib: ctypes.CDLL | None = None

    def get(self) -> ctypes.CDLL | None:
        with self._lock:
            if not self._done:
                try:
                    self._lib = self._load()
                except Exception as err:  # the cache must never break a kernel call
                    logger.warning("ntklab's C kernels unavailable (eager path used): %s", err)
                    self._lib = None
                self._done = True
            return self._lib

    @staticmethod
    def _load() -> ctypes.CDLL | None:
        compiler = _compiler_identity()
        if compiler is None:
            logger.debug("fused ReLU kernel unavailable: no C compiler %r on PATH", _compiler())
            return None
        folder = _cache_dir()
        try:
            problem = _folder_problem(folder)
        except OSError as err:
            problem = f"{folder} cannot be used ({err})"
        if problem is not None:
            logger.warning(
                "not using the cache of ntklab's C kernels: %s. Nothing is loaded from a "
                "folder that others could write to; the eager torch path is used (same "
                "results, slower). Fix: `chmod 700 %s` (owned by you), or point %s at a "
                "private folder",
                problem,
                folder,
                _CACHE_ENV,
            )
            return None
        announced = False
        for flags in _flag_sets():
            path = _library_path(flags, compiler)
            try:  # the common case: built and checked
                fd = _open_library(path, flags, compiler)
            except OSError:
                pass  # missing or refused: looked at again (and reported) under the lock
            else:
                lib = _Loader._load_checked(fd, path)
                if lib is not None:
                    return lib
                continue
            if _failed_recently(path, compiler):
                continue
            try:
                with _build_lock(folder, _lock_wait()):
                    try:  # another process may have built it meanwhile
                        fd = _open_library(path, flags, compiler)
                    except FileNotFoundError:
                        pass
                    except OSError as err:
                        logger.warning("not loading %s: %s; compiling it again", path, err)
                    else:
                        lib = _Loader._load_checked(fd, path)
                        if lib is not None:
                            return lib
                        continue
                    if _failed_recently(path, compiler, announce=False):
                        continue  # another process failed meanwhile
                    if not announced:
                        logger.warning(
                            "compiling ntklab's C kernels once into %s (at most %g s "
                            "per step; the eager path is used if it fails)",
                            folder,
                            _compile_timeout(),
                        )
                        announced = True
                    try:
                        _compile(path, flags)
                    except (RuntimeError, TimeoutError) as err:
                        logger.debug("fused ReLU kernel with flags %s failed: %s", flags, err)
                        _record_failure(path, compiler, err)
                        continue
                    fd = _open_library(path, flags, compiler)
            except TimeoutError as err:
                logger.warning("not waiting longer (eager path used): %s", err)
                return None
            except OSError as err:
                logger.warning("fused ReLU kernel with flags %s unavailable: %s", flags, err)
                continue
            lib = _Loader._load_checked(fd, path)
            if lib is not None:
                return lib
        return None

    @staticmethod
    def _load_checked(fd: int, path: Path) -> ctypes.CDLL | None:
        try:
            return _load_fd(fd, path)
        except (OSError, AttributeError) as err:
            logger.warning("loading %s failed (eager path used): %s", path, err)
            return None
        finally:
            os.close(fd)


_loader = _Loader()


def available() -> bool:
    """Whether the fused kernel can be used (compiling it on first call); never raises."""
    if os.environ.get(_DISABLE_ENV) == "1":
        logger.debug("fused ReLU kernel disabled by %s=1", _DISABLE_ENV)
        return False
    try:
        return _loader.get() is not None
    except Exception as err:  # pragma: no cover - defensive: available() must not raise
        logger.debug("fused ReLU kernel unavailable: %s", err)
        return False


def _library() -> ctypes.CDLL:
    lib = _loader.get()
    if lib is None:
        raise RuntimeError("the fused ReLU kernel is unavailable (see available())")
    return lib


def _ptr(x: Tensor) -> int:
    return int(x.data_ptr())


# --------------------------------------------------------------------------------------------
# the kernel

_ADVISE_HUGEPAGES = True  # madvise(MADV_HUGEPAGE) on the NTK buffer that the kernel allocates

_NOT_FINITE = (
    "kernel: expected finite correlations, got NaN or inf (the incoming kernel is not finite; "
    "check the inputs and the layer scales)"
)


def fused_relu_dense_chain(
    cov: Tensor,
    ntk: Tensor | None,
    var1s: Tensor,
    var2s: Tensor,
    w2s: Tensor,
    b2s: Tensor,
    *,
    leading_dense: bool = False,
    symmetric: bool = False,
) -> tuple[Tensor, Tensor, float]:
    """Propagate NNGP and NTK through ``L`` pairs ``[Relu(), Dense(w, b)]``, in place.

    Parameters
    ----------
    cov : Tensor of shape (n1, n2)
        NNGP entering the chain; CPU, contiguous, float32 or float64. Overwritten.
    ntk : Tensor of shape (n1, n2) or None
        NTK entering the chain (same layout as ``cov``), overwritten; ``None`` for a zero NTK
        (then a new tensor is returned).
    var1s : Tensor of shape (L, n1)
        ``var1s[l]``: the NNGP variances of the ``x1`` inputs entering ReLU ``l``.
    var2s : Tensor of shape (L, n2)
        The same for ``x2``.
    w2s, b2s : Tensor of shape (L,), or (L + 1,) with ``leading_dense``
        :math:`\\sigma_w^2` and :math:`\\sigma_b^2` of each Dense layer.
    leading_dense : bool
        The chain starts with a Dense layer (``w2s[0]``, ``b2s[0]``) before the first ReLU.
    symmetric : bool
        ``cov`` and ``ntk`` are symmetric and ``var1s`` equals ``var2s`` (``x2 = x1``):
        only the upper triangle is computed, then mirrored.

    Returns
    -------
    cov, ntk : Tensor of shape (n1, n2)
        The outputs, in the input tensors' memory.
    max_excess : float
        :math:`\\max(|K / s| - 1, 0)` over entries and layers: how far the correlations
        were clamped into [-1, 1]; ``inf`` when they overflowed. (Correlations within 8 ulp
        of +-1 are also taken as +-1; see the module docstring.)

    Raises
    ------
    NtklabValueError
        On bad shapes or layouts, or when ``cov`` or ``ntk`` holds NaN or inf.
    """
    for name, x in (("cov", cov), ("ntk", cov if ntk is None else ntk)):
        if (
            x.ndim != 2
            or x.device.type != "cpu"
            or x.dtype not in _SUFFIX
            or not x.is_contiguous()
            or x.shape != cov.shape
            or x.dtype != cov.dtype
        ):
            raise NtklabValueError(
                f"{name}: expected a contiguous CPU float32/float64 matrix of shape "
                f"{tuple(cov.shape)}, got shape {tuple(x.shape)}, {x.dtype} on {x.device}, "
                f"contiguous={x.is_contiguous()}"
            )
    if ntk is not None and ntk.data_ptr() == cov.data_ptr() and cov.numel():
        raise NtklabValueError("ntk: expected a tensor separate from cov, got the same memory")
    dtype = cov.dtype
    n1, n2 = cov.shape
    n_pairs = int(var1s.shape[0])
    lead = int(leading_dense)
    for name, x, shape in (
        ("var1s", var1s, (n_pairs, n1)),
        ("var2s", var2s, (n_pairs, n2)),
        ("w2s", w2s, (n_pairs + lead,)),
        ("b2s", b2s, (n_pairs + lead,)),
    ):
        if tuple(x.shape) != shape:
            raise NtklabValueError(f"{name}: expected shape {shape}, got {tuple(x.shape)}")
    if symmetric and (n1 != n2 or not torch.equal(var1s, var2s)):
        raise NtklabValueError(
            f"symmetric: expected a square cov and var1s equal to var2s, got shape {(n1, n2)}"
        )
    tiny = torch.finfo(dtype).tiny

    def as_cpu(x: Tensor) -> Tensor:
        return x.detach().to(dtype=dtype, device="cpu").contiguous()

    def scales(var: Tensor) -> tuple[Tensor, Tensor]:
        s = as_cpu(var).clamp_min(tiny).sqrt_()
        return s, s.reciprocal()

    sa, ra = scales(var1s)
    sb, rb = (sa, ra) if symmetric else scales(var2s)
    w2, b2 = as_cpu(w2s), as_cpu(b2s)
    lib = _library()
    if ntk is None:  # a fresh buffer, first touched by the kernel
        out_ntk = torch.empty_like(cov)
        if _ADVISE_HUGEPAGES:
            lib.ntklab_advise_hugepages(_ptr(out_ntk), out_ntk.numel() * out_ntk.element_size())
    else:
        out_ntk = ntk
    cmax = torch.zeros((), dtype=dtype)
    chain = getattr(lib, f"ntklab_relu_dense_chain_{_SUFFIX[dtype]}")
    bad = chain(
        *(_ptr(cov), _ptr(out_ntk), int(ntk is not None), n1, n2, lead, n_pairs),
        *(_ptr(sa), _ptr(ra), _ptr(sb), _ptr(rb), _ptr(w2), _ptr(b2)),
        *(int(symmetric), torch.get_num_threads(), _ptr(cmax)),
    )
    if bad:
        raise NtklabValueError(_NOT_FINITE)
    return cov, out_ntk, max(float(cmax) - 1.0, 0.0)


def _acos_sin(x: Tensor) -> tuple[Tensor, Tensor]:
    """``(arccos x, sqrt(1 - x^2))`` by the kernel's vectorized routine (for the tests)."""
    x = x.contiguous()
    acos, sin = torch.empty_like(x), torch.empty_like(x)
    fn = getattr(_library(), f"ntklab_acos_sin_{_SUFFIX[x.dtype]}")
    fn(_ptr(x), _ptr(acos), _ptr(sin), x.numel())
    return acos, sin


# --------------------------------------------------------------------------------------------
# dispatch from Architecture.kernel


def empty_matrix(n1: int, n2: int, like: Tensor) -> Tensor:
    """An uninitialized (n1, n2) CPU tensor of ``like``'s dtype, backed by transparent huge
    pages where the fused library is loaded (its first touch then faults 512x fewer pages)."""
    out = torch.empty(n1, n2, dtype=like.dtype, device=like.device)
    if _ADVISE_HUGEPAGES and available():
        _library().ntklab_advise_hugepages(_ptr(out), out.numel() * out.element_size())
    return out


def supports(x: Tensor) -> bool:
    """Whether kernels on inputs like ``x`` can take the fused path (device and dtype)."""
    return x.device.type == "cpu" and x.dtype in _SUFFIX


def run_length(layers: Sequence[Layer], start: int) -> int:
    """Length of the fusable run at ``start``: an optional plain Dense, then pairs
    ``[Relu(), plain Dense]`` (:attr:`~ntklab.kernels.engine.Layer.fused_kind`); 0 when there
    is no pair."""
    i = start + 1 if layers[start].fused_kind == "dense" else start
    stop = i
    while (
        stop + 1 < len(layers)
        and layers[stop].fused_kind == "relu"
        and layers[stop + 1].fused_kind == "dense"
    ):
        stop += 2
    return stop - start if stop > i else 0


def split_runs(layers: Sequence[Layer]) -> list[tuple[tuple[Layer, ...], bool]]:
    """Split ``layers`` into consecutive segments, flagged True for the fusable runs."""
    layers = tuple(layers)
    segments: list[tuple[tuple[Layer, ...], bool]] = []
    start = i = 0
    while i < len(layers):
        length = run_length(layers, i)
        if length == 0:
            i += 1
            continue
        if start < i:
            segments.append((layers[start:i], False))
        segments.append((layers[i : i + length], True))
        start = i = i + length
    if start < len(layers):
        segments.append((layers[start:], False))
    return segments


def propagate_run(
    layers: Sequence[Layer],
    state: KernelState,
    diag1: KernelState,
    diag2: KernelState | None,
) -> tuple[KernelState, KernelState, KernelState] | None:
    """Propagate ``state`` (in place) and the diagonals through a run from :func:`split_runs`.

    ``diag2=None`` means ``x2 = x1`` (symmetric matrices). Returns ``None``, with nothing
    modified, when the fused kernel is unavailable or the variances are not finite (the eager
    path then reproduces its own errors and warnings).
    """
    if not available():
        return None
    var1s, var2s, w2s, b2s = [], [], [], []
    d1, d2 = diag1, diag1 if diag2 is None else diag2
    for layer in layers:
        if layer.fused_kind == "dense":
            b_std = layer.b_std  # type: ignore[attr-defined]
            w2s.append(float(layer.w_std) ** 2)  # type: ignore[attr-defined]
            b2s.append(0.0 if b_std is None else float(b_std) ** 2)
        else:  # a Relu: record the variances entering it
            var1s.append(d1.cov)
            var2s.append(d2.cov)
        d1 = next_diagonal(layer, d1)
        d2 = d1 if diag2 is None else next_diagonal(layer, d2)
    v1, v2 = torch.stack(var1s), torch.stack(var2s)
    if not (bool(torch.isfinite(v1).all()) and bool(torch.isfinite(v2).all())):
        return None
    dtype = state.cov.dtype
    cov, ntk, excess = fused_relu_dense_chain(
        state.cov.contiguous(),
        None if state.ntk is None else state.ntk.contiguous(),
        v1,
        v2,
        torch.tensor(w2s, dtype=dtype),
        torch.tensor(b2s, dtype=dtype),
        leading_dense=layers[0].fused_kind == "dense",
        symmetric=diag2 is None,
    )
    _check_excess(excess, dtype)
    last = layers[-1]  # a Dense, by run_length
    state = dataclasses.replace(
        state,
        cov=cov,
        ntk=ntk,
        var1=d1.cov[:, None],
        var2=d2.cov[None, :],
        fan_in=last.width,  # type: ignore[attr-defined]
        gaussian=True,
        product=False,
    )
    return state, d1, d2


def _check_excess(excess: float, dtype: torch.dtype) -> None:
    """The checks of ``activations._clamp_correlation`` on the fused kernel's max excess."""
    if not math.isfinite(excess):
        raise NtklabValueError(_NOT_FINITE)
    if excess > math.sqrt(torch.finfo(dtype).eps):
        warnings.warn(
            f"correlation outside [-1, 1] by {excess:.3g} (beyond rounding for {dtype}); "
            "clamped. The incoming kernel violates Cauchy-Schwarz.",
            NumericalWarning,
            stacklevel=3,  # attributed to Architecture.kernel (in ntklab, as the eager path)
        )
