"""C source of the fused ``[Conv, Relu]`` chain (:mod:`ntklab.kernels._fused_conv`).

It is compiled into the same library as the fused ``[Relu, Dense]`` kernel
(:data:`ntklab.kernels._fused.SOURCE`), after that kernel's ``acos_sin`` routine, once per
precision (``REAL``, ``UINT``, ``EXP_MASK``, ``SNAP`` and ``SFX`` defined by the includer).

The carried tensor of one image pair is cut into **offset classes**: in the full layout
``K[h, h', w, w']`` the convolution sums along diagonals, :math:`K'_{hh'} = \\sum_d
K_{sh + d - p,\\, sh' + d - p}`, so the entries with the same offsets :math:`(h' - h, w' - w)`
(taken modulo the size for circular padding) form a small image that the whole run maps to
the class of offsets divided by the strides. Each class goes through every layer of the run
in a few kB of scratch memory (window sums as separable passes along rows, then along
columns; ReLU duals elementwise), and is written back (or summed, for a pooling top) once.
The diagonal layout is the single class of offset 0.
"""

from __future__ import annotations

__all__ = ["CONV_HEAD", "CONV_GENERIC"]

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
    int64_t n_pairs, ncls_h, ncls_w, maxhw, maxn, st[4], chans;
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

/* Window sums of one class through one Conv op: in (rows [hi0, hi1) x cols [wi0, wi1) of
   an Hi x Wi level) to out (rows [ho0, ho1) x cols [wo0, wo1) of Ho x Wo), via tmp. */
static void SFX(conv_sums)(REAL *restrict out, const REAL *restrict in, REAL *restrict tmp,
                           const int64_t *op, int wrap_h, int wrap_w, int64_t hi0, int64_t hi1,
                           int64_t wi0, int64_t wi1, int64_t ho0, int64_t ho1, int64_t wo0,
                           int64_t wo1, int64_t *seg)
{
    const int64_t fh = op[1], sh = op[2], ph = op[3], Hi = op[4];
    const int64_t fw = op[6], sw = op[7], pw = op[8], Wi = op[9], Wo = op[10];
    const int64_t m = wo1 - wo0;
    if (m <= 0 || ho1 <= ho0)
        return;
    for (int64_t h = hi0; h < hi1; h++)
        memset(tmp + h * Wo + wo0, 0, (size_t)m * sizeof(REAL));
    for (int64_t e = 0; e < fw; e++) { /* along w, row by row */
        const int ns = conv_segments(wo0, wo1, e, sw, pw, Wi, wi0, wi1, wrap_w, seg);
        for (int g = 0; g < ns; g++) {
            const int64_t a = seg[3 * g], b = seg[3 * g + 1], j = seg[3 * g + 2];
            for (int64_t h = hi0; h < hi1; h++) {
                REAL *restrict o = tmp + h * Wo;
                const REAL *restrict x = in + h * Wi + j;
                if (sw == 1) {
#pragma omp simd
                    for (int64_t q = 0; q < b - a; q++)
                        o[a + q] += x[q];
                } else {
                    for (int64_t q = 0; q < b - a; q++)
                        o[a + q] += x[sw * q];
                }
            }
        }
    }
    for (int64_t h = ho0; h < ho1; h++)
        memset(out + h * Wo + wo0, 0, (size_t)m * sizeof(REAL));
    for (int64_t d = 0; d < fh; d++) { /* along h, whole rows */
        const int ns = conv_segments(ho0, ho1, d, sh, ph, Hi, hi0, hi1, wrap_h, seg);
        for (int g = 0; g < ns; g++) {
            const int64_t a = seg[3 * g], b = seg[3 * g + 1], j = seg[3 * g + 2];
            for (int64_t o = a; o < b; o++) {
                REAL *restrict y = out + o * Wo + wo0;
                const REAL *restrict x = tmp + (j + sh * (o - a)) * Wo + wo0;
#pragma omp simd
                for (int64_t q = 0; q < m; q++)
                    y[q] += x[q];
            }
        }
    }
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

/* Full layout: the window sums of one Conv op along the (w, w') diagonals of the planes of
   rows [h0, h1) (in: Wi x Wi planes, out: Wo x Wo planes), one output row at a time (it
   stays in L1 while the filter offsets add into it). seg: fw lists of 3 (maxn + 2). */
static void SFX(conv_plane_sums)(REAL *restrict out, const REAL *restrict in, const int64_t *op,
                                 int wrap_w, int64_t h0, int64_t h1, int64_t *seg,
                                 int64_t seg_stride)
{
    const int64_t fw = op[6], sw = op[7], pw = op[8], Wi = op[9], Wo = op[10];
    const int64_t pi = Wi * Wi, po = Wo * Wo;
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

/* Full layout: plane rows (h, h + dh) of pair p, dh at the last level, through the run.
   Level data: rows h in [h0, h1) of W x W planes (w, w'). buf: 6 buffers of maxhw. */
static int SFX(conv_rows)(const SFX(conv_chain_t) *c, REAL *buf, int64_t *seg, int64_t p,
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
    REAL *tk = buf + 4 * c->maxhw, *tt = buf + 5 * c->maxhw;
    int64_t H = c->ops[4], W = c->ops[9], h0, h1;
    conv_valid(H, dh[0], c->wrap_h, &h0, &h1);
    UINT bits = 0;
    if (c->xa != NULL) { /* the input kernel from the images: mean over channels */
        const int64_t hw = H * W;
        const REAL *xa = c->xa + ia * c->chans * hw, *xb = c->xb + ib * c->chans * hw;
        const REAL inv = (REAL)1 / (REAL)c->chans;
        for (int64_t h = h0; h < h1; h++) {
            int64_t hb = h + dh[0];
            hb -= hb >= H ? H : 0;
            for (int64_t w = 0; w < W; w++) {
                REAL *restrict y = k + (h * W + w) * W;
                memset(y, 0, (size_t)W * sizeof(REAL));
                for (int64_t ch = 0; ch < c->chans; ch++) {
                    const REAL u = xa[ch * hw + h * W + w];
                    const REAL *restrict v = xb + ch * hw + hb * W;
#pragma omp simd
                    for (int64_t q = 0; q < W; q++)
                        y[q] += u * v[q];
                }
#pragma omp simd
                for (int64_t q = 0; q < W; q++)
                    y[q] *= inv;
            }
        }
    }
    for (int64_t h = h0; h < (c->xa != NULL ? h0 : h1); h++) {
        int64_t hb = h + dh[0];
        hb -= hb >= H ? H : 0;
        const int64_t base = in_off + h * c->st[0] + hb * c->st[1];
        for (int64_t w = 0; w < W; w++) {
            const REAL *xk = c->in_k + base + w * c->st[2];
            const REAL *xt = c->in_t + base + w * c->st[2];
            REAL *yk = k + (h * W + w) * W, *yt = t + (h * W + w) * W;
            for (int64_t v = 0; v < W; v++) {
                const REAL x = xk[v * c->st[3]];
                UINT b;
                memcpy(&b, &x, sizeof b);
                bits |= (b & EXP_MASK) == EXP_MASK;
                yk[v] = x;
            }
            if (c->has_t) {
                for (int64_t v = 0; v < W; v++) {
                    const REAL x = xt[v * c->st[3]];
                    UINT b;
                    memcpy(&b, &x, sizeof b);
                    bits |= (b & EXP_MASK) == EXP_MASK;
                    yt[v] = x;
                }
            }
        }
    }
    if (bits)
        return 1;
    int t_zero = !c->has_t;
    for (int i = 0; i < c->nops; i++) {
        const int64_t *op = c->ops + (int64_t)i * CONV_OPW;
        const int64_t *relu = i + 1 < c->nops && op[CONV_OPW] == 1 ? op + CONV_OPW : NULL;
        if (op[0] == 0) { /* Conv, and the Relu that follows it, plane by plane */
            const int64_t fh = op[1], sh = op[2], ph = op[3], Ho = op[5], Wo = op[10];
            const int64_t po = Wo * Wo, hwo = Ho * Wo;
            int64_t g0, g1;
            conv_valid(Ho, dh[i + 1], c->wrap_h, &g0, &g1);
            const REAL a = c->opf[2 * i], b = c->opf[2 * i + 1];
            SFX(conv_plane_sums)(tk, k, op, c->wrap_w, h0, h1, seg, seg_stride);
            if (!t_zero)
                SFX(conv_plane_sums)(tt, t, op, c->wrap_w, h0, h1, seg, seg_stride);
            for (int64_t o = g0; o < g1; o++) {
                REAL *restrict yk = k2 + o * po, *restrict yt = t2 + o * po;
                memset(yk, 0, (size_t)po * sizeof(REAL));
                if (!t_zero)
                    memset(yt, 0, (size_t)po * sizeof(REAL));
                for (int64_t d = 0; d < fh; d++) {
                    int64_t j = sh * o + d - ph;
                    if (c->wrap_h)
                        j = conv_pmod(j, H);
                    else if (j < h0 || j >= h1)
                        continue;
                    const REAL *restrict xk = tk + j * po;
#pragma omp simd
                    for (int64_t q = 0; q < po; q++)
                        yk[q] += xk[q];
                    if (!t_zero) {
                        const REAL *restrict xt = tt + j * po;
#pragma omp simd
                        for (int64_t q = 0; q < po; q++)
                            yt[q] += xt[q];
                    }
                }
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
                    const REAL *sa = c->sa + relu[1] + ia * hwo + o * Wo;
                    const REAL *ra = c->ra + relu[1] + ia * hwo + o * Wo;
                    const REAL *sb = c->sb + relu[2] + ib * hwo + ob * Wo;
                    const REAL *rb = c->rb + relu[2] + ib * hwo + ob * Wo;
                    for (int64_t w = 0; w < Wo; w++) {
                        const REAL m = SFX(conv_relu_row)(yk + w * Wo, yt + w * Wo, 1, Wo, sa[w],
                                                          ra[w], sb, rb);
                        *cmax = m > *cmax ? m : *cmax;
                    }
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
            h0 = g0;
            h1 = g1;
            if (relu != NULL)
                i++;
        } else { /* a Relu that does not follow a Conv of the run */
            const int64_t hw = H * W;
            const REAL *sa = c->sa + op[1] + ia * hw, *ra = c->ra + op[1] + ia * hw;
            const REAL *sb = c->sb + op[2] + ib * hw, *rb = c->rb + op[2] + ib * hw;
            for (int64_t h = h0; h < h1; h++) {
                int64_t hb = h + dh[i];
                hb -= hb >= H ? H : 0;
                for (int64_t w = 0; w < W; w++) {
                    const REAL m = SFX(conv_relu_row)(
                        k + (h * W + w) * W, t + (h * W + w) * W, !t_zero, W, sa[h * W + w],
                        ra[h * W + w], sb + hb * W, rb + hb * W);
                    *cmax = m > *cmax ? m : *cmax;
                }
            }
        }
    }
    const int64_t po = W * W;
    if (c->red != NULL) {
        double sk = 0, st = 0;
        for (int64_t q = h0 * po; q < h1 * po; q++) {
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
        const int64_t o = (h * H + hb) * po, om = (hb * H + h) * po;
        memcpy(c->out_k + out_off + o, k + h * po, (size_t)po * sizeof(REAL));
        memcpy(c->out_t + out_off + o, t + h * po, (size_t)po * sizeof(REAL));
        if (mir_off >= 0) {
            for (int64_t w = 0; w < W; w++) {
                for (int64_t v = 0; v < W; v++) {
                    c->out_k[mir_off + om + v * W + w] = k[h * po + w * W + v];
                    c->out_t[mir_off + om + v * W + w] = t[h * po + w * W + v];
                }
            }
        }
    }
    return 0;
}

/* One offset class (dh, dw at the last level) of pair p through the run. buf: K, T, K2, T2,
   TMP (maxhw each). Adds the sums of the outputs to acc[0..1] (reduce) or writes them. */
static int SFX(conv_class)(const SFX(conv_chain_t) *c, REAL *buf, int64_t *seg, int64_t p,
                           int64_t dhl, int64_t dwl, REAL *cmax, double *acc)
{
    const int64_t *pr = c->pairs + 5 * p;
    const int64_t in_off = pr[0], out_off = pr[1], mir_off = pr[2], ia = pr[3], ib = pr[4];
    int64_t dh[CONV_MAXOPS + 1], dw[CONV_MAXOPS + 1];
    dh[c->nops] = dhl;
    dw[c->nops] = dwl;
    for (int i = c->nops - 1; i >= 0; i--) {
        const int64_t *op = c->ops + (int64_t)i * CONV_OPW;
        if (op[0] == 0) {
            dh[i] = c->wrap_h ? conv_pmod(dh[i + 1] * op[2], op[4]) : dh[i + 1] * op[2];
            dw[i] = c->wrap_w ? conv_pmod(dw[i + 1] * op[7], op[9]) : dw[i + 1] * op[7];
        } else {
            dh[i] = dh[i + 1];
            dw[i] = dw[i + 1];
        }
    }
    REAL *k = buf, *t = buf + c->maxhw, *k2 = buf + 2 * c->maxhw, *t2 = buf + 3 * c->maxhw;
    REAL *tmp = buf + 4 * c->maxhw;
    int64_t H = c->ops[4], W = c->ops[9], h0, h1, w0, w1;
    conv_valid(H, dh[0], c->wrap_h, &h0, &h1);
    conv_valid(W, dw[0], c->wrap_w, &w0, &w1);
    /* gather the class from the input pair tensor */
    int64_t s1 = c->st[0], s2 = c->st[1], r1 = c->st[2], r2 = c->st[3];
    UINT bits = 0;
    if (c->xa != NULL) { /* the input kernel from the images (the diagonal layout: dh = 0) */
        const int64_t hw = H * W;
        const REAL *xa = c->xa + ia * c->chans * hw, *xb = c->xb + ib * c->chans * hw;
        const REAL inv = (REAL)1 / (REAL)c->chans;
        memset(k, 0, (size_t)hw * sizeof(REAL));
        for (int64_t ch = 0; ch < c->chans; ch++) {
#pragma omp simd
            for (int64_t q = 0; q < hw; q++)
                k[q] += xa[ch * hw + q] * xb[ch * hw + q];
        }
#pragma omp simd
        for (int64_t q = 0; q < hw; q++)
            k[q] *= inv;
    }
    for (int64_t h = h0; h < (c->xa != NULL ? h0 : h1); h++) {
        int64_t hb = h + dh[0];
        hb -= hb >= H ? H : 0;
        const int64_t base = in_off + h * s1 + hb * s2;
        for (int64_t w = w0; w < w1; w++) {
            int64_t wb = w + dw[0];
            wb -= wb >= W ? W : 0;
            const REAL x = c->in_k[base + w * r1 + wb * r2];
            UINT b;
            memcpy(&b, &x, sizeof b);
            bits |= (b & EXP_MASK) == EXP_MASK;
            k[h * W + w] = x;
            if (c->has_t) {
                const REAL y = c->in_t[base + w * r1 + wb * r2];
                memcpy(&b, &y, sizeof b);
                bits |= (b & EXP_MASK) == EXP_MASK;
                t[h * W + w] = y;
            }
        }
    }
    if (bits)
        return 1;
    int t_zero = !c->has_t;
    for (int i = 0; i < c->nops; i++) {
        const int64_t *op = c->ops + (int64_t)i * CONV_OPW;
        if (op[0] == 0) { /* Conv: K' = a sum K + b, T' = a sum T + K' */
            const int64_t Ho = op[5], Wo = op[10];
            int64_t g0, g1, v0, v1;
            conv_valid(Ho, dh[i + 1], c->wrap_h, &g0, &g1);
            conv_valid(Wo, dw[i + 1], c->wrap_w, &v0, &v1);
            const REAL a = c->opf[2 * i], b = c->opf[2 * i + 1];
            SFX(conv_sums)(k2, k, tmp, op, c->wrap_h, c->wrap_w, h0, h1, w0, w1, g0, g1, v0, v1,
                           seg);
            if (!t_zero)
                SFX(conv_sums)(t2, t, tmp, op, c->wrap_h, c->wrap_w, h0, h1, w0, w1, g0, g1, v0,
                               v1, seg);
            for (int64_t h = g0; h < g1; h++) {
                REAL *restrict kr = k2 + h * Wo + v0;
                REAL *restrict tr = t2 + h * Wo + v0;
                if (t_zero) {
#pragma omp simd
                    for (int64_t q = 0; q < v1 - v0; q++) {
                        kr[q] = a * kr[q] + b;
                        tr[q] = kr[q];
                    }
                } else {
#pragma omp simd
                    for (int64_t q = 0; q < v1 - v0; q++) {
                        kr[q] = a * kr[q] + b;
                        tr[q] = a * tr[q] + kr[q];
                    }
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
            h0 = g0;
            h1 = g1;
            w0 = v0;
            w1 = v1;
        } else { /* Relu, with the variances of this level */
            const int64_t hw = H * W;
            const REAL *sa = c->sa + op[1] + ia * hw, *ra = c->ra + op[1] + ia * hw;
            const REAL *sb = c->sb + op[2] + ib * hw, *rb = c->rb + op[2] + ib * hw;
            const int64_t split = W - dw[i] < w1 ? W - dw[i] : w1; /* where w + dw wraps */
            for (int64_t h = h0; h < h1; h++) {
                int64_t hb = h + dh[i];
                hb -= hb >= H ? H : 0;
                const int64_t ra0 = h * W, rb0 = hb * W + dw[i];
                REAL m;
                if (split > w0) {
                    m = SFX(conv_relu_seg)(k + ra0 + w0, t + ra0 + w0, !t_zero, split - w0,
                                           sa + ra0 + w0, ra + ra0 + w0, sb + rb0 + w0,
                                           rb + rb0 + w0);
                    *cmax = m > *cmax ? m : *cmax;
                }
                const int64_t ws = split > w0 ? split : w0;
                if (w1 > ws) {
                    m = SFX(conv_relu_seg)(k + ra0 + ws, t + ra0 + ws, !t_zero, w1 - ws,
                                           sa + ra0 + ws, ra + ra0 + ws, sb + rb0 + ws - W,
                                           rb + rb0 + ws - W);
                    *cmax = m > *cmax ? m : *cmax;
                }
            }
        }
    }
    if (c->red != NULL) {
        double sk = 0, st = 0;
        for (int64_t h = h0; h < h1; h++) {
            for (int64_t w = w0; w < w1; w++) {
                sk += (double)k[h * W + w];
                st += (double)t[h * W + w];
            }
        }
        acc[0] += sk;
        acc[1] += st;
        return 0;
    }
    s1 = c->full ? H * W * W : W;
    s2 = c->full ? W * W : 0;
    r1 = c->full ? W : 1;
    for (int64_t h = h0; h < h1; h++) {
        int64_t hb = h + dh[c->nops];
        hb -= hb >= H ? H : 0;
        for (int64_t w = w0; w < w1; w++) {
            int64_t wb = w + dw[c->nops];
            wb -= wb >= W ? W : 0;
            const int64_t o = h * s1 + hb * s2 + w * r1 + wb * r2;
            c->out_k[out_off + o] = k[h * W + w];
            c->out_t[out_off + o] = t[h * W + w];
            if (mir_off >= 0) {
                const int64_t om = hb * s1 + h * s2 + wb * r1 + w * r2;
                c->out_k[mir_off + om] = k[h * W + w];
                c->out_t[mir_off + om] = t[h * W + w];
            }
        }
    }
    return 0;
}

/* The run over n_pairs pairs, from the pair tensors in_k, in_t (strides: of the first and
   second position index along each axis, h h' w w'), or with xa != NULL from the images xa,
   xb (n, chans, H, W), contiguous (then has_t = 0); pairs (n_pairs x 5): input offset, output offset, mirrored
   output offset (-1: none), index of the first and of the second image in the variances.
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
                           sb, rb, n_pairs, 1, 1, maxhw, maxn,
                           {strides[0], strides[1], strides[2], strides[3]}, chans,
                           has_t, full, wrap_h, wrap_w, nops};
    if (nops > CONV_MAXOPS)
        return 2;
    const int64_t *last = ops + (int64_t)(nops - 1) * CONV_OPW;
    if (full) {
        c.ncls_h = wrap_h ? last[5] : 2 * last[5] - 1;
        c.ncls_w = 1; /* conv_rows takes whole (w, w') planes */
    }
    const int64_t items = n_pairs * c.ncls_h;
    double *part = red != NULL ? calloc((size_t)(2 * items), sizeof(double)) : NULL;
    if (red != NULL && part == NULL)
        return 3;
    REAL cmax = 0;
    int bad = 0, nomem = 0;
#pragma omp parallel num_threads(nthreads) reduction(max : cmax) reduction(| : bad, nomem)
    {
        REAL *buf = malloc((size_t)(6 * maxhw + 16) * sizeof(REAL));
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
            if (full)
                bad |= SFX(conv_rows)(&c, buf, seg, p, dhl, &cmax, acc);
            else
                bad |= SFX(conv_class)(&c, buf, seg, p, 0, 0, &cmax, acc);
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
