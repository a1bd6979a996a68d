"""C source of the factorization of cotangents and of the input cotangents of a convolution.

Used by :func:`ntklab.empirical.structured_conv.factor_cotangents` and
:func:`ntklab.empirical.structured_conv.input_cotangents` (through
:mod:`ntklab.empirical._compiled_cotangents`) and compiled into the same library as the fused
``[Relu, Dense]`` kernel (:data:`ntklab.kernels._fused.SOURCE`), once per precision (``REAL``
and ``SFX`` defined by the includer). For an example, an input channel ``ci``, an input row
``y`` and a tile of ``VL`` consecutive input columns ``x`` (``VL`` = 32 bytes of ``REAL``, one
AVX register), it forms

.. math::

    \\bar g_{a, ci}(y, x) = \\sum_c \\alpha_{ac}
        \\underbrace{\\sum_{t} F_{c, ci, t}\\, u_c(y + d_h t_y,\\, x + d_w t_x)}_{z_c},

``u_c`` the output cotangent ``h_c`` with zeros inserted for the stride and padded by the
kernel's reach, ``F`` the flipped kernel: the per-channel transposed convolution ``z_c`` and its
combination over channels ``c`` in one loop, with the ``z_c`` (one register) and the ``k``
accumulators in registers. The torch form writes each ``Z_c`` to memory and reads it back for a
product with only ``k`` rows; here each position costs one pass over ``u``. The tile function
is generated for ``1..IC_MAXK`` outputs (accumulators as separate registers); more outputs are
done in blocks of ``IC_MAXK``. OpenMP splits (example, input row) pairs over threads; each
tile is done for every input channel in turn, so that its window of ``u`` stays in L1 (the
whole of ``u`` of an example, ``C`` planes, may exceed L2 in float64).

The factorization :math:`g_{acp} = \\alpha_{ac} h_{cp}` reads each example's and channel's
``k`` rows of ``P`` cotangents once from memory (they then stay in cache for the second and
third pass: the residual), where the torch form stacks the outputs and makes five passes
over the ``n k C P`` numbers. Same skeleton as the torch form: ``h`` the row of largest norm,
``alpha`` the ratios at the position where ``|h|`` is largest, accepted when the residual's
norm is at most ``rtol`` times the cotangents' norm for every example and channel.
"""

from __future__ import annotations

__all__ = ["COTANGENT_GENERIC", "COTANGENT_HEAD", "VECTOR_BYTES"]

#: Bytes of one vector of the input-cotangent loop (``IC_VB``): it reads this many bytes past
#: the last column of a tile, so its padded cotangents carry that many extra zero bytes per row.
VECTOR_BYTES = 32

# Precision-independent part (once): the vector width and the tile generator.
COTANGENT_HEAD = (
    f"\n#define IC_VB {VECTOR_BYTES} /* bytes per vector */"
    + r"""
#define IC_MAXK 12 /* outputs per tile (accumulator registers) */

/* acc[a] = sum_c al[c k + a] sum_t f[c taps + t] u[c plane + off[t] ...+VL] for a < KB */
#define IC_TILE(KB)                                                                          \
static inline void SFX(ic_tile##KB)(const REAL *restrict u, int64_t plane, int channels,     \
    int taps, const int64_t *restrict off, const REAL *restrict f, const REAL *restrict al,  \
    int k, REAL *restrict out, int64_t ostride, int width)                                   \
{                                                                                            \
    SFX(ic_vec) acc[KB];                                                                     \
    _Pragma("GCC unroll 16") for (int a = 0; a < KB; a++) acc[a] = (SFX(ic_vec)){0};         \
    for (int c = 0; c < channels; c++) {                                                     \
        const REAL *fc = f + (int64_t)c * taps;                                              \
        const REAL *uc = u + c * plane;                                                      \
        SFX(ic_vec) z0 = (SFX(ic_vec)){0}, z1 = z0, z2 = z0; /* three chains */              \
        int t = 0;                                                                           \
        for (; t + 3 <= taps; t += 3) {                                                      \
            SFX(ic_vec) v0, v1, v2;                                                          \
            memcpy(&v0, uc + off[t], IC_VB);                                                 \
            memcpy(&v1, uc + off[t + 1], IC_VB);                                             \
            memcpy(&v2, uc + off[t + 2], IC_VB);                                             \
            z0 += fc[t] * v0;                                                                \
            z1 += fc[t + 1] * v1;                                                            \
            z2 += fc[t + 2] * v2;                                                            \
        }                                                                                    \
        for (; t < taps; t++) {                                                              \
            SFX(ic_vec) v;                                                                   \
            memcpy(&v, uc + off[t], IC_VB);                                                  \
            z0 += fc[t] * v;                                                                 \
        }                                                                                    \
        const SFX(ic_vec) z = z0 + z1 + z2;                                                  \
        const REAL *ac = al + (int64_t)c * k;                                                \
        _Pragma("GCC unroll 16") for (int a = 0; a < KB; a++) acc[a] += ac[a] * z;           \
    }                                                                                        \
    if (width * (int)sizeof(REAL) == IC_VB) {                                                \
        _Pragma("GCC unroll 16") for (int a = 0; a < KB; a++)                                \
            memcpy(out + a * ostride, &acc[a], IC_VB);                                       \
    } else {                                                                                 \
        for (int a = 0; a < KB; a++)                                                         \
            memcpy(out + a * ostride, &acc[a], (size_t)width * sizeof(REAL));                \
    }                                                                                        \
}

/* v is neither NaN nor infinite, by its bits (-ffast-math lets the compiler assume both away) */
static inline int ic_finite(double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return (bits & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}
"""
)

# Once per precision (REAL and SFX defined).
COTANGENT_GENERIC = r"""
typedef REAL SFX(ic_vec) __attribute__((vector_size(IC_VB)));
IC_TILE(1) IC_TILE(2) IC_TILE(3) IC_TILE(4) IC_TILE(5) IC_TILE(6)
IC_TILE(7) IC_TILE(8) IC_TILE(9) IC_TILE(10) IC_TILE(11) IC_TILE(12)

/* u: (n, C, hu, wu), the padded, stride-dilated output cotangents, read from row 0 and column
   0 of each plane, with at least IC_VB bytes readable past column wo - 1 + dw (kw - 1);
   ft: (cin, C, kh kw), the flipped kernel, input channel first; at: (n, C, k);
   out: (n, k, cin, H, W), rows [y0, y0 + ho) and columns [x0, x0 + wo) written. */
void SFX(ntklab_input_cotangents)(const REAL *u, int64_t n, int channels, int64_t hu,
    int64_t wu, const REAL *ft, int cin, int kh, int kw, int dh, int dw, const REAL *at, int k,
    REAL *out, int64_t H, int64_t W, int64_t y0, int64_t x0, int64_t ho, int64_t wo,
    int nthreads)
{
    const int vl = IC_VB / (int)sizeof(REAL);
    const int taps = kh * kw;
    int64_t *off = malloc(sizeof(int64_t) * (size_t)taps);
    if (off == NULL) return;
    for (int ty = 0; ty < kh; ty++)
        for (int tx = 0; tx < kw; tx++)
            off[ty * kw + tx] = (int64_t)ty * dh * wu + (int64_t)tx * dw;
    const int64_t plane = hu * wu, ostride = (int64_t)cin * H * W;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) collapse(2)
    for (int64_t i = 0; i < n; i++) {
        for (int64_t y = 0; y < ho; y++) {
            /* every input channel of a tile in turn: the window of u (C x taps rows of a
               vector) stays in L1 while the kernel's rows stream from L2 */
            const REAL *ui = u + i * channels * plane + y * wu;
            for (int64_t x = 0; x < wo; x += vl) {
                const int width = wo - x < vl ? (int)(wo - x) : vl;
                for (int ci = 0; ci < cin; ci++) {
                    const REAL *f = ft + (int64_t)ci * channels * taps;
                    for (int a0 = 0; a0 < k; a0 += IC_MAXK) {
                        const int kb = k - a0 < IC_MAXK ? k - a0 : IC_MAXK;
                        const REAL *al = at + i * (int64_t)channels * k + a0;
                        const REAL *uy = ui + x;
                        REAL *oy = out + ((i * k + a0) * cin + ci) * H * W + (y0 + y) * W + x0 + x;
#define IC_CALL(KB) SFX(ic_tile##KB)(uy, plane, channels, taps, off, f, al, k, oy, ostride, width)
                        switch (kb) {
                        case 1: IC_CALL(1); break;
                        case 2: IC_CALL(2); break;
                        case 3: IC_CALL(3); break;
                        case 4: IC_CALL(4); break;
                        case 5: IC_CALL(5); break;
                        case 6: IC_CALL(6); break;
                        case 7: IC_CALL(7); break;
                        case 8: IC_CALL(8); break;
                        case 9: IC_CALL(9); break;
                        case 10: IC_CALL(10); break;
                        case 11: IC_CALL(11); break;
                        default: IC_CALL(12); break;
                        }
#undef IC_CALL
                    }
                }
            }
        }
    }
    free(off);
}

/* g[a]: (n, C, P) with example stride sn, or NULL (zeros); alpha: (n, k, C); h: (n, C, P).
   Returns 1 if every example and channel factors within rtol, else 0. */
int SFX(ntklab_factor_cotangents)(const REAL *const *g, int k, int64_t n, int64_t channels,
    int64_t p, int64_t sn, REAL rtol, REAL *alpha, REAL *h, int nthreads)
{
    int ok = 1;
#pragma omp parallel for num_threads(nthreads) schedule(static) reduction(& : ok) collapse(2)
    for (int64_t i = 0; i < n; i++) {
        for (int64_t c = 0; c < channels; c++) {
            double total = 0.0, best = -1.0;
            int ref = 0;
            for (int a = 0; a < k; a++) {
                if (g[a] == NULL) continue;
                const REAL *row = g[a] + i * sn + c * p;
                REAL s = 0;
                for (int64_t q = 0; q < p; q++) s += row[q] * row[q];
                total += (double)s;
                if ((double)s > best) { best = (double)s; ref = a; }
            }
            REAL *hr = h + (i * channels + c) * p;
            REAL *al = alpha + i * k * channels + c;
            if (best < 0.0) { /* no output reaches this layer */
                memset(hr, 0, (size_t)p * sizeof(REAL));
                for (int a = 0; a < k; a++) al[(int64_t)a * channels] = 0;
                continue;
            }
            memcpy(hr, g[ref] + i * sn + c * p, (size_t)p * sizeof(REAL));
            int64_t pivot = 0;
            REAL top = 0, big = -1;
            for (int64_t q = 0; q < p; q++) {
                const REAL v = hr[q] < 0 ? -hr[q] : hr[q];
                if (v > big) { big = v; pivot = q; }
            }
            top = hr[pivot];
            const REAL div = top != 0 ? top : (REAL)1;
            double worst = 0.0;
            for (int a = 0; a < k; a++) {
                if (g[a] == NULL) { al[(int64_t)a * channels] = 0; continue; }
                const REAL *row = g[a] + i * sn + c * p;
                const REAL ratio = row[pivot] / div;
                al[(int64_t)a * channels] = ratio;
                REAL s = 0;
                for (int64_t q = 0; q < p; q++) {
                    const REAL r = row[q] - ratio * hr[q];
                    s += r * r;
                }
                worst += (double)s;
            }
            /* non-finite cotangents never factor (as in the torch form, where NaN fails
               the comparison) */
            if (!ic_finite(total) || !ic_finite(worst)
                || !(sqrt(worst) <= (double)rtol * sqrt(total)))
                ok = 0;
        }
    }
    return ok;
}
"""
