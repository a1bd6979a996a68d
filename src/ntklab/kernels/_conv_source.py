"""C source of the fused ``[Conv, Relu]`` chain (:mod:`ntklab.kernels._fused_conv`).

It is compiled into the same library as the fused ``[Relu, Dense]`` kernel
(:data:`ntklab.kernels._fused.SOURCE`), after that kernel's ``acos_sin`` routine, once per
precision (``REAL``, ``UINT``, ``EXP_MASK``, ``SNAP`` and ``SFX`` defined by the includer).

Work is split into items, one image pair and one offset ``dh = h' - h`` of the last
level each: the planes ``K[h, h + dh, :, :]`` (full layout) or the rows ``K[h, :]`` (diagonal
layout, ``dh = 0``) go through every op of the run in per-thread scratch buffers (window sums
as separable passes, the ReLU fused into each output plane), and are then written back (with
their mirror for ``x2 = x1``) or summed for a pooling top. See
:mod:`ntklab.kernels._fused_conv` for the derivation.
"""

from __future__ import annotations

__all__ = ["CONV_GENERIC", "CONV_HEAD"]

# Precision-independent helpers (once, after the acos routines).
CONV_HEAD = r"""
#include <stdlib.h>

#define CONV_OPW 12 /* int64 entries per op of a conv chain */
#define CONV_MAXOPS 256
#define CONV_MAXF 64 /* the longest filter side of the full layout's plane sums */

static inline int64_t conv_fdiv(int64_t a, int64_t b) /* floor(a / b), b > 0 */
{
    const int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

static inline int64_t conv_pmod(int64_t a, int64_t n)
{
    const int64_t r = a % n;
    return r < 0 ? r + n : r;
}

/* first coordinates h of the entries (h, h + d) of a class at a level of size n */
static inline void conv_valid(int64_t n, int64_t d, int wrap, int64_t *lo, int64_t *hi)
{
    if (wrap) {
        *lo = 0;
        *hi = n;
        return;
    }
    *lo = d < 0 ? -d : 0;
    *hi = d > 0 ? n - d : n;
    if (*hi < *lo)
        *hi = *lo;
}

/* The outputs o in [olo, ohi) that read input j = s o + e - pad inside [ilo, ihi) (zero
   padding), or j mod n_in (wrap), as segments (o_a, o_b, j_a) with j = j_a + s (o - o_a).
   Returns the number of segments (at most ohi - olo + 1). */
static int conv_segments(int64_t olo, int64_t ohi, int64_t e, int64_t s, int64_t pad,
                         int64_t n_in, int64_t ilo, int64_t ihi, int wrap, int64_t *seg)
{
    int cnt = 0;
    if (!wrap) {
        int64_t a = -conv_fdiv(-(ilo - e + pad), s); /* ceil */
        int64_t b = conv_fdiv(ihi - 1 - e + pad, s) + 1;
        a = a > olo ? a : olo;
        b = b < ohi ? b : ohi;
        if (a < b && ilo < ihi) {
            seg[0] = a;
            seg[1] = b;
            seg[2] = s * a + e - pad;
            cnt = 1;
        }
        return cnt;
    }
    for (int64_t o = olo; o < ohi;) {
        const int64_t j = conv_pmod(s * o + e - pad, n_in);
        const int64_t len = (n_in - j + s - 1) / s;
        const int64_t b = o + len < ohi ? o + len : ohi;
        seg[3 * cnt] = o;
        seg[3 * cnt + 1] = b;
        seg[3 * cnt + 2] = j;
        cnt++;
        o = b;
    }
    return cnt;
}
"""

# Once per precision.
CONV_GENERIC = r"""
typedef struct {
    const REAL *in_k, *in_t, *xa, *xb;
    REAL *out_k, *out_t;
    double *red;
    const int64_t *pairs, *ops;
    const REAL *opf, *sa, *ra, *sb, *rb;
    int64_t n_pairs, ncls_h, maxhw, maxn, st[4], chans;
    int has_t, full, wrap_h, wrap_w, nops;
} SFX(conv_chain_t);

/* One ReLU on a contiguous segment: c = k ra rb, K = sa sb J1 (sa, sb hold sqrt(v) / (2 pi)
   and sqrt(v)), T = T J0 / (2 pi). Returns max |c|. */
static REAL SFX(conv_relu_seg)(REAL *restrict k, REAL *restrict t, int with_t, int64_t m,
                               const REAL *restrict sa, const REAL *restrict ra,
                               const REAL *restrict sb, const REAL *restrict rb)
{
    REAL cmax = 0;
    if (with_t) {
#pragma omp simd reduction(max : cmax)
        for (int64_t j = 0; j < m; j++) {
            REAL c = k[j] * (ra[j] * rb[j]);
            const REAL ac = c < 0 ? -c : c;
            cmax = ac > cmax ? ac : cmax;
            c = c > 1 - SNAP ? 1 : c;
            c = c < SNAP - 1 ? -1 : c;
            REAL j0, sn;
            SFX(acos_sin)(-c, &j0, &sn);
            k[j] = (sn + j0 * c) * (sa[j] * sb[j]);
            t[j] = t[j] * (j0 * (REAL)0.15915494309189533577);
        }
    } else {
#pragma omp simd reduction(max : cmax)
        for (int64_t j = 0; j < m; j++) {
            REAL c = k[j] * (ra[j] * rb[j]);
            const REAL ac = c < 0 ? -c : c;
            cmax = ac > cmax ? ac : cmax;
            c = c > 1 - SNAP ? 1 : c;
            c = c < SNAP - 1 ? -1 : c;
            REAL j0, sn;
            SFX(acos_sin)(-c, &j0, &sn);
            k[j] = (sn + j0 * c) * (sa[j] * sb[j]);
        }
    }
    return cmax;
}

/* One ReLU on a row: a scalar first side (sa, ra), a contiguous second side. */
static REAL SFX(conv_relu_row)(REAL *restrict k, REAL *restrict t, int with_t, int64_t m,
                               REAL sa, REAL ra, const REAL *restrict sb,
                               const REAL *restrict rb)
{
    REAL cmax = 0;
#pragma omp simd reduction(max : cmax)
    for (int64_t j = 0; j < m; j++) {
        REAL c = k[j] * (ra * rb[j]);
        const REAL ac = c < 0 ? -c : c;
        cmax = ac > cmax ? ac : cmax;
        c = c > 1 - SNAP ? 1 : c;
        c = c < SNAP - 1 ? -1 : c;
        REAL j0, sn;
        SFX(acos_sin)(-c, &j0, &sn);
        k[j] = (sn + j0 * c) * (sa * sb[j]);
        if (with_t)
            t[j] = t[j] * (j0 * (REAL)0.15915494309189533577);
    }
    return cmax;
}

/* y = the sum of the n rows x[0..n) (m entries each; y = 0 when n = 0), in one pass. */
static inline void SFX(conv_add_rows)(REAL *restrict y, const REAL *const *x, int n, int64_t m)
{
    if (n == 0) {
        memset(y, 0, (size_t)m * sizeof(REAL));
        return;
    }
    if (n == 3) { /* the common 3-wide window */
        const REAL *restrict a = x[0], *restrict b = x[1], *restrict c = x[2];
#pragma omp simd
        for (int64_t q = 0; q < m; q++)
            y[q] = a[q] + b[q] + c[q];
        return;
    }
    const REAL *restrict a = x[0];
#pragma omp simd
    for (int64_t q = 0; q < m; q++)
        y[q] = a[q];
    for (int r = 1; r < n; r++) {
        const REAL *restrict b = x[r];
#pragma omp simd
        for (int64_t q = 0; q < m; q++)
            y[q] += b[q];
    }
}

/* Row x (n entries) copied into xr with lo entries before and hi after: zeros, or the
   periodic continuation (wrap). */
static inline void SFX(conv_pad_row)(REAL *restrict xr, const REAL *restrict x, int64_t n,
                                     int64_t lo, int64_t hi, int wrap)
{
    for (int64_t q = 0; q < lo; q++)
        xr[q] = wrap ? x[conv_pmod(q - lo, n)] : 0;
    memcpy(xr + lo, x, (size_t)n * sizeof(REAL));
    for (int64_t q = 0; q < hi; q++)
        xr[lo + n + q] = wrap ? x[conv_pmod(n + q, n)] : 0;
}

/* Full layout: the window sums of one Conv op along the (w, w') diagonals of the planes of
   rows [h0, h1) (in: Wi x Wi planes, out: Wo x Wo planes), one output row at a time (it
   stays in L1 while the filter offsets add into it). seg: fw lists of 3 (maxn + 2). */
static void SFX(conv_plane_sums)(REAL *restrict out, const REAL *restrict in, const int64_t *op,
                                 int wrap_w, int64_t h0, int64_t h1, int64_t *seg,
                                 int64_t seg_stride, REAL *pad)
{
    const int64_t fw = op[6], sw = op[7], pw = op[8], Wi = op[9], Wo = op[10];
    const int64_t pi = Wi * Wi, po = Wo * Wo;
    const int64_t hi = Wo - 1 + fw - pw - Wi > 0 ? Wo - 1 + fw - pw - Wi : 0, ws = pw + Wi + hi;
    if (sw == 1 && pw <= CONV_MAXF && hi <= CONV_MAXF) { /* full-length adds, padded rows */
        for (int64_t h = h0; h < h1; h++) {
            for (int64_t w = 0; w < Wi; w++)
                SFX(conv_pad_row)(pad + w * ws, in + h * pi + w * Wi, Wi, pw, hi, wrap_w);
            for (int64_t w = 0; w < Wo; w++) {
                const REAL *rows[CONV_MAXF];
                int nr = 0;
                for (int64_t e = 0; e < fw; e++) {
                    int64_t jr = w + e - pw;
                    if (wrap_w)
                        jr = conv_pmod(jr, Wi);
                    else if (jr < 0 || jr >= Wi)
                        continue;
                    rows[nr++] = pad + jr * ws + e;
                }
                SFX(conv_add_rows)(out + h * po + w * Wo, rows, nr, Wo);
            }
        }
        return;
    }
    int ns[CONV_MAXF];
    for (int64_t e = 0; e < fw; e++)
        ns[e] = conv_segments(0, Wo, e, sw, pw, Wi, 0, Wi, wrap_w, seg + e * seg_stride);
    for (int64_t h = h0; h < h1; h++) {
        for (int64_t w = 0; w < Wo; w++) {
            REAL *restrict y = out + h * po + w * Wo;
            memset(y, 0, (size_t)Wo * sizeof(REAL));
            for (int64_t e = 0; e < fw; e++) {
                int64_t jr = sw * w + e - pw;
                if (wrap_w)
                    jr = conv_pmod(jr, Wi);
                else if (jr < 0 || jr >= Wi)
                    continue;
                const REAL *restrict x = in + h * pi + jr * Wi;
                const int64_t *sg = seg + e * seg_stride;
                for (int g = 0; g < ns[e]; g++) {
                    const int64_t a = sg[3 * g], b = sg[3 * g + 1], j = sg[3 * g + 2];
                    if (sw == 1) {
#pragma omp simd
                        for (int64_t q = a; q < b; q++)
                            y[q] += x[j - a + q];
                    } else {
                        for (int64_t q = a; q < b; q++)
                            y[q] += x[j + sw * (q - a)];
                    }
                }
            }
        }
    }
}

/* Diagonal layout: the window sums of one Conv op along the rows [h0, h1) (in: Wi, out:
   Wo entries per row). seg as for conv_plane_sums. */
static void SFX(conv_line_sums)(REAL *restrict out, const REAL *restrict in, const int64_t *op,
                                int wrap_w, int64_t h0, int64_t h1, int64_t *seg,
                                int64_t seg_stride, REAL *pad)
{
    const int64_t fw = op[6], sw = op[7], pw = op[8], Wi = op[9], Wo = op[10];
    const int64_t hi = Wo - 1 + fw - pw - Wi > 0 ? Wo - 1 + fw - pw - Wi : 0;
    if (sw == 1 && pw <= CONV_MAXF && hi <= CONV_MAXF) { /* full-length adds from a padded row */
        REAL *restrict xr = pad;
        const REAL *rows[CONV_MAXF];
        for (int64_t e = 0; e < fw; e++)
            rows[e] = xr + e;
        for (int64_t h = h0; h < h1; h++) {
            SFX(conv_pad_row)(xr, in + h * Wi, Wi, pw, hi, wrap_w);
            SFX(conv_add_rows)(out + h * Wo, rows, (int)fw, Wo);
        }
        return;
    }
    int ns[CONV_MAXF];
    for (int64_t e = 0; e < fw; e++)
        ns[e] = conv_segments(0, Wo, e, sw, pw, Wi, 0, Wi, wrap_w, seg + e * seg_stride);
    for (int64_t h = h0; h < h1; h++) {
        REAL *restrict y = out + h * Wo;
        const REAL *restrict x = in + h * Wi;
        memset(y, 0, (size_t)Wo * sizeof(REAL));
        for (int64_t e = 0; e < fw; e++) {
            const int64_t *sg = seg + e * seg_stride;
            for (int g = 0; g < ns[e]; g++) {
                const int64_t a = sg[3 * g], b = sg[3 * g + 1], j = sg[3 * g + 2];
                if (sw == 1) {
#pragma omp simd
                    for (int64_t q = a; q < b; q++)
                        y[q] += x[j - a + q];
                } else {
                    for (int64_t q = a; q < b; q++)
                        y[q] += x[j + sw * (q - a)];
                }
            }
        }
    }
}

/* The ReLU on plane h of a level (H x W positions; full: W x W entries (w, w') of the
   position pair (h, hb); diagonal: W entries (w, w) of (h, h)). */
static REAL SFX(conv_relu_plane)(const SFX(conv_chain_t) *c, REAL *k, REAL *t, int with_t,
                                 const int64_t *op, int64_t H, int64_t W, int64_t ia,
                                 int64_t ib, int64_t h, int64_t hb)
{
    const int64_t hw = H * W;
    const REAL *sa = c->sa + op[1] + ia * hw + h * W, *ra = c->ra + op[1] + ia * hw + h * W;
    const REAL *sb = c->sb + op[2] + ib * hw + hb * W, *rb = c->rb + op[2] + ib * hw + hb * W;
    if (!c->full)
        return SFX(conv_relu_seg)(k, t, with_t, W, sa, ra, sb, rb);
    REAL cmax = 0;
    for (int64_t w = 0; w < W; w++) {
        const REAL m = SFX(conv_relu_row)(k + w * W, t + w * W, with_t, W, sa[w], ra[w], sb, rb);
        cmax = m > cmax ? m : cmax;
    }
    return cmax;
}

/* Level 0 of an item: planes [h0, h1) of the input kernel (K into k, and T into t when
   has_t), from the pair tensors or from the images. Returns 1 if an entry is not finite. */
static int SFX(conv_gather)(const SFX(conv_chain_t) *c, REAL *k, REAL *t, int64_t in_off,
                            int64_t ia, int64_t ib, int64_t H, int64_t W, int64_t h0, int64_t h1,
                            int64_t dh)
{
    const int64_t hw = H * W, wv = c->full ? W : 1, pl = W * wv;
    if (c->xa != NULL) { /* mean over channels of the products */
        const REAL *xa = c->xa + ia * c->chans * hw, *xb = c->xb + ib * c->chans * hw;
        const REAL inv = (REAL)1 / (REAL)c->chans;
        for (int64_t h = h0; h < h1; h++) {
            int64_t hb = h + dh;
            hb -= hb >= H ? H : 0;
            REAL *restrict y = k + h * pl;
            memset(y, 0, (size_t)pl * sizeof(REAL));
            for (int64_t ch = 0; ch < c->chans; ch++) {
                const REAL *restrict u = xa + ch * hw + h * W, *restrict v = xb + ch * hw + hb * W;
                if (!c->full) {
#pragma omp simd
                    for (int64_t q = 0; q < W; q++)
                        y[q] += u[q] * v[q];
                    continue;
                }
                for (int64_t w = 0; w < W; w++) {
#pragma omp simd
                    for (int64_t q = 0; q < W; q++)
                        y[w * W + q] += u[w] * v[q];
                }
            }
#pragma omp simd
            for (int64_t q = 0; q < pl; q++)
                y[q] *= inv;
        }
        return 0;
    }
    UINT bits = 0;
    for (int64_t h = h0; h < h1; h++) {
        int64_t hb = h + dh;
        hb -= hb >= H ? H : 0;
        const int64_t base = in_off + h * c->st[0] + hb * c->st[1];
        for (int pass = 0; pass < (c->has_t ? 2 : 1); pass++) {
            const REAL *x = (pass ? c->in_t : c->in_k) + base;
            REAL *restrict y = (pass ? t : k) + h * pl;
            for (int64_t w = 0; w < W; w++) {
                for (int64_t v = 0; v < wv; v++) {
                    const REAL e = x[w * c->st[2] + v * c->st[3]];
                    UINT b;
                    memcpy(&b, &e, sizeof b);
                    bits |= (b & EXP_MASK) == EXP_MASK;
                    y[w * wv + v] = e;
                }
            }
        }
    }
    return bits != 0;
}

/* Full layout: plane rows (h, h + dh) of pair p, dh at the last level, through the run.
   Level data: rows h in [h0, h1) of W x W planes (w, w'). buf: 6 buffers of maxhw.
   Diagonal layout (c->full = 0, dhl = 0): the planes are the rows (w) of positions (h, w). */
static int SFX(conv_item)(const SFX(conv_chain_t) *c, REAL *buf, int64_t *seg, int64_t p,
                          int64_t dhl, REAL *cmax, double *acc)
{
    const int64_t *pr = c->pairs + 5 * p;
    const int64_t in_off = pr[0], out_off = pr[1], mir_off = pr[2], ia = pr[3], ib = pr[4];
    const int64_t seg_stride = 3 * (c->maxn + 2);
    int64_t dh[CONV_MAXOPS + 1];
    dh[c->nops] = dhl;
    for (int i = c->nops - 1; i >= 0; i--) {
        const int64_t *op = c->ops + (int64_t)i * CONV_OPW;
        dh[i] = op[0] != 0 ? dh[i + 1]
                : c->wrap_h ? conv_pmod(dh[i + 1] * op[2], op[4])
                            : dh[i + 1] * op[2];
    }
    REAL *k = buf, *t = buf + c->maxhw, *k2 = buf + 2 * c->maxhw, *t2 = buf + 3 * c->maxhw;
    REAL *tk = buf + 4 * c->maxhw, *tt = buf + 5 * c->maxhw, *pad = buf + 6 * c->maxhw;
    int64_t H = c->ops[4], W = c->ops[9], h0, h1;
    int64_t wv = c->full ? W : 1, pl = W * wv; /* entries per w and per plane */
    conv_valid(H, dh[0], c->wrap_h, &h0, &h1);
    if (SFX(conv_gather)(c, k, t, in_off, ia, ib, H, W, h0, h1, dh[0]))
        return 1;
    int t_zero = !c->has_t;
    for (int i = 0; i < c->nops; i++) {
        const int64_t *op = c->ops + (int64_t)i * CONV_OPW;
        const int64_t *relu = i + 1 < c->nops && op[CONV_OPW] == 1 ? op + CONV_OPW : NULL;
        if (op[0] == 1) { /* a Relu that does not follow a Conv of the run */
            for (int64_t h = h0; h < h1; h++) {
                int64_t hb = h + dh[i];
                hb -= hb >= H ? H : 0;
                const REAL m = SFX(conv_relu_plane)(c, k + h * pl, t + h * pl, !t_zero, op, H, W,
                                                    ia, ib, h, hb);
                *cmax = m > *cmax ? m : *cmax;
            }
            continue;
        }
        /* a Conv, and the Relu that follows it, output plane by output plane */
        const int64_t fh = op[1], sh = op[2], ph = op[3], Ho = op[5], Wo = op[10];
        const int64_t po = c->full ? Wo * Wo : Wo;
        int64_t g0, g1;
        conv_valid(Ho, dh[i + 1], c->wrap_h, &g0, &g1);
        const REAL a = c->opf[2 * i], b = c->opf[2 * i + 1];
        for (int pass = 0; pass < (t_zero ? 1 : 2); pass++) {
            if (c->full)
                SFX(conv_plane_sums)(pass ? tt : tk, pass ? t : k, op, c->wrap_w, h0, h1, seg,
                                     seg_stride, pad);
            else
                SFX(conv_line_sums)(pass ? tt : tk, pass ? t : k, op, c->wrap_w, h0, h1, seg,
                                    seg_stride, pad);
        }
        for (int64_t o = g0; o < g1; o++) {
            REAL *restrict yk = k2 + o * po, *restrict yt = t2 + o * po;
            const REAL *rk[CONV_MAXF], *rt[CONV_MAXF];
            int nr = 0;
            for (int64_t d = 0; d < fh; d++) {
                int64_t j = sh * o + d - ph;
                if (c->wrap_h)
                    j = conv_pmod(j, H);
                else if (j < h0 || j >= h1)
                    continue;
                rk[nr] = tk + j * po;
                rt[nr++] = tt + j * po;
            }
            SFX(conv_add_rows)(yk, rk, nr, po);
            if (!t_zero)
                SFX(conv_add_rows)(yt, rt, nr, po);
            if (t_zero) {
#pragma omp simd
                for (int64_t q = 0; q < po; q++) {
                    yk[q] = a * yk[q] + b;
                    yt[q] = yk[q];
                }
            } else {
#pragma omp simd
                for (int64_t q = 0; q < po; q++) {
                    yk[q] = a * yk[q] + b;
                    yt[q] = a * yt[q] + yk[q];
                }
            }
            if (relu != NULL) {
                int64_t ob = o + dh[i + 1];
                ob -= ob >= Ho ? Ho : 0;
                const REAL m = SFX(conv_relu_plane)(c, yk, yt, 1, relu, Ho, Wo, ia, ib, o, ob);
                *cmax = m > *cmax ? m : *cmax;
            }
        }
        t_zero = 0;
        REAL *sw = k;
        k = k2;
        k2 = sw;
        sw = t;
        t = t2;
        t2 = sw;
        H = Ho;
        W = Wo;
        wv = c->full ? W : 1;
        pl = W * wv;
        h0 = g0;
        h1 = g1;
        if (relu != NULL)
            i++;
    }
    if (c->red != NULL) {
        double sk = 0, st = 0;
        for (int64_t q = h0 * pl; q < h1 * pl; q++) {
            sk += (double)k[q];
            st += (double)t[q];
        }
        acc[0] += sk;
        acc[1] += st;
        return 0;
    }
    for (int64_t h = h0; h < h1; h++) {
        int64_t hb = h + dh[c->nops];
        hb -= hb >= H ? H : 0;
        const int64_t o = c->full ? (h * H + hb) * pl : h * pl;
        const int64_t om = c->full ? (hb * H + h) * pl : h * pl;
        memcpy(c->out_k + out_off + o, k + h * pl, (size_t)pl * sizeof(REAL));
        memcpy(c->out_t + out_off + o, t + h * pl, (size_t)pl * sizeof(REAL));
        if (mir_off >= 0) { /* the pair (b, a): positions swapped */
            for (int64_t w = 0; w < W; w++) {
                for (int64_t v = 0; v < wv; v++) {
                    c->out_k[mir_off + om + v * W + w] = k[h * pl + w * wv + v];
                    c->out_t[mir_off + om + v * W + w] = t[h * pl + w * wv + v];
                }
            }
        }
    }
    return 0;
}

/* The run over n_pairs pairs, from the pair tensors in_k, in_t (strides: of the first and
   second position index along each axis, h h' w w'), or with xa != NULL from the images xa,
   xb (n, chans, H, W), contiguous (then has_t = 0); pairs (n_pairs x 5): input offset,
   output offset, mirrored output offset (-1: none), index of the first and of the second
   image in the variances.
   ops (nops x CONV_OPW, see _fused_conv.py), opf (nops x 2). red: (n_pairs x 2) sums of the
   outputs (NULL: write out_k, out_t). Returns 1 if an entry was not finite. */
int SFX(ntklab_conv_chain)(const REAL *in_k, const REAL *in_t, int has_t, const REAL *xa,
                           const REAL *xb, int64_t chans, REAL *out_k,
                           REAL *out_t, double *red, int64_t n_pairs, const int64_t *pairs,
                           int full, int wrap_h, int wrap_w, int nops, const int64_t *ops,
                           const REAL *opf, const REAL *sa, const REAL *ra, const REAL *sb,
                           const REAL *rb, const int64_t *strides, int64_t maxhw, int64_t maxn,
                           int nthreads, REAL *cmax_out)
{
    SFX(conv_chain_t) c = {in_k, in_t, xa, xb, out_k, out_t, red, pairs, ops, opf, sa, ra,
                           sb, rb, n_pairs, 1, maxhw, maxn,
                           {strides[0], strides[1], strides[2], strides[3]}, chans,
                           has_t, full, wrap_h, wrap_w, nops};
    if (nops > CONV_MAXOPS)
        return 2;
    const int64_t *last = ops + (int64_t)(nops - 1) * CONV_OPW;
    if (full) {
        c.ncls_h = wrap_h ? last[5] : 2 * last[5] - 1;
    }
    const int64_t items = n_pairs * c.ncls_h;
    double *part = red != NULL ? calloc((size_t)(2 * items), sizeof(double)) : NULL;
    if (red != NULL && part == NULL)
        return 3;
    REAL cmax = 0;
    int bad = 0, nomem = 0;
#pragma omp parallel num_threads(nthreads) reduction(max : cmax) reduction(| : bad, nomem)
    {
        /* 6 level buffers, then the padded rows of one plane */
        REAL *buf = malloc((size_t)(6 * maxhw + (maxn + 2 * CONV_MAXF) * maxn) * sizeof(REAL));
        int64_t *seg = malloc((size_t)(3 * (maxn + 2) * CONV_MAXF) * sizeof(int64_t));
        if (buf == NULL || seg == NULL)
            nomem = 1;
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; it++) {
            if (buf == NULL || seg == NULL)
                continue;
            const int64_t p = it / c.ncls_h, ih = it % c.ncls_h;
            const int64_t dhl = (full && !wrap_h) ? ih - (last[5] - 1) : ih;
            double acc[2] = {0, 0};
            bad |= SFX(conv_item)(&c, buf, seg, p, dhl, &cmax, acc);
            if (part != NULL) {
                part[2 * it] = acc[0];
                part[2 * it + 1] = acc[1];
            }
        }
        free(buf);
        free(seg);
    }
    if (part != NULL) { /* in a fixed order: independent of the thread count */
        for (int64_t p = 0; p < n_pairs; p++) {
            double sk = 0, st = 0;
            for (int64_t ih = 0; ih < c.ncls_h; ih++) {
                sk += part[2 * (p * c.ncls_h + ih)];
                st += part[2 * (p * c.ncls_h + ih) + 1];
            }
            red[2 * p] = sk;
            red[2 * p + 1] = st;
        }
        free(part);
    }
    *cmax_out = cmax;
    return nomem ? 3 : bad;
}
"""
