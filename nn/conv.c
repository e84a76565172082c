/* troupe — 2-d convolution as forward assignments (see conv.h). */
#include "nn/conv.h"

#include "troupe/ir/memory_mode.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define S_PROV 3201 /* provenance of the memory modes set here */
/* Fewer input channels than this: im2col (each shifted product would reduce over too few). */
#define S_SHIFTED_MIN_CIN 8
/* AUTO's Winograd budget: the transformed input matrices of one call of the routine, 16 for
 * F(2x2) and 36 for F(4x4) (the convnet's conv2 at 4 samples: F(2x2) 16 * 32 * 4 * 144 single
 * values, 1.2 MB; F(4x4) 36 * 32 * 4 * 36, 0.66 MB). Measured on the convnet (docs/trainer.md,
 * "Convolution lowering"): F(2x2) faster than the shifted products at 4 samples a micro-step,
 * slower at 8 (2.4 MB) and above, where every transform pass leaves the core's caches. */
#define S_WINOGRAD_MAX_BYTES ((int64_t)2 << 20)

/* "(s·it + d·ik)" with unit coefficients left out, e.g. "(2h+k)", "(h+2k)". */
static void s_window(char *buf, size_t cap, int64_t s, char it, int64_t d, char ik)
{
    char a[24] = "", c[24] = "";
    if (s != 1)
        snprintf(a, sizeof a, "%lld", (long long)s);
    if (d != 1)
        snprintf(c, sizeof c, "%lld", (long long)d);
    snprintf(buf, cap, "(%s%c+%s%c)", a, it, c, ik);
}

static troupe_status_t s_fail(troupe_nn_t *nn, troupe_status_t st)
{
    return troupe_nn_add(nn, st, NULL);
}

/* xp := zeros (B, C, H + 2 ph, W + 2 pw), or (B, H + 2 ph, W + 2 pw, C) when cl (channels last),
 * then x added into the interior. */
static troupe_status_t s_pad(troupe_nn_t *nn, troupe_tnode_t *x, int64_t ph, int64_t pw, bool cl,
                             troupe_tnode_t **out)
{
    const int ah = cl ? 1 : 2;
    int64_t dims[4] = {x->dims[0], x->dims[1], x->dims[2], x->dims[3]};
    dims[ah] += 2 * ph;
    dims[ah + 1] += 2 * pw;
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "padded", 4, dims, out));
    troupe_asgn_t *t = NULL;
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_add(nn, troupe_asgn_fetch_constant(troupe_nn_comp(nn), *out, 0.0, &t), &t));
    char spec[96];
    snprintf(spec, sizeof spec, cl ? "bhwc=>b(h+%lld)(w+%lld)c" : "bchw=>bc(h+%lld)(w+%lld)",
             (long long)ph, (long long)pw);
    return troupe_nn_un(nn, false, TROUPE_BINOP_ADD, *out, TROUPE_UNOP_IDENTITY, x, spec);
}

/* A node the GEMM matcher must see as an array (compiler/gemm.h: a factor inlined into the
 * product would make it a nest of loops again). */
static troupe_status_t s_materialize(troupe_nn_t *nn, troupe_tnode_t *tn)
{
    return troupe_nn_materialize(nn, tn, S_PROV);
}

/* The layer's output node y, labelled "conv2d": (B, Cout, OH, OW), or (B, OH, OW, Cout) when cl
 * (channels last). */
static troupe_status_t s_y_node(troupe_nn_t *nn, int64_t nb, int64_t cout, const int64_t od[2],
                                bool cl, troupe_tnode_t **out)
{
    const int64_t nchw[4] = {nb, cout, od[0], od[1]}, nhwc[4] = {nb, od[0], od[1], cout};
    return troupe_nn_node(nn, "conv2d", 4, cl ? nhwc : nchw, out);
}

/* Stride 1: the convolution as KH*KW shifted matrix products, no im2col. The input (padded
 * when asked) is copied into rows of Hp*Wp cells, xf (B, Cin, Hp*Wp); the output is first
 * computed "wide", yw (B, Cout, L) with L = (OH-1)*Wp + OW: output cell (h, w) at p = h*Wp + w,
 * so that the window offset (k, l) reads xf at p + dh*Wp*k + dw*l, one dense run of L cells
 * for every (k, l). Per sample and offset that is one GEMM, yw[b] (Cout x L) +=
 * wt[k,l] (Cout x Cin) xf[b] shifted (Cin x L), the matcher's outer loops over b, k, l (a
 * batch-reduce over k, l); the weight is read through wt (KH, KW, Cout, Cin), a copy that gives
 * each offset's matrix a unit stride. The derived gradients are the same shape: dxf
 * accumulates wt[k,l]^T dyw[b] at each shift, dwt[k,l] accumulates dyw[b] xf[b]^T. The
 * columns p with p mod Wp >= OW are computed and dropped by the copy into y (Wp/OW more work,
 * against im2col's KH*KW-fold copy of the input, its gradient and their trips to memory). */
static troupe_status_t s_shifted(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w,
                                 troupe_tnode_t *b, const troupe_nn_conv2d_opts_t *o,
                                 const int64_t od[2], troupe_tnode_t **out)
{
    const int64_t nb = x->dims[0], cin = w->dims[1], cout = w->dims[0], kh = w->dims[2],
                  kw = w->dims[3];
    const int64_t hp = x->dims[2] + 2 * o->padding[0], wp = x->dims[3] + 2 * o->padding[1];
    const int64_t len = (od[0] - 1) * wp + od[1];
    char spec[160];
    troupe_tnode_t *xf = NULL, *wt = NULL, *yw = NULL;
    troupe_asgn_t *t = NULL;
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_node(nn, "conv2d_rows", 3, (int64_t[]){nb, cin, hp * wp}, &xf));
    TROUPE_RETURN_IF_ERROR(s_materialize(nn, xf));
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_add(nn, troupe_asgn_fetch_constant(troupe_nn_comp(nn), xf, 0.0, &t), &t));
    snprintf(spec, sizeof spec, "bchw=>bc(%lldh+w+%lld)", (long long)wp,
             (long long)(o->padding[0] * wp + o->padding[1]));
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_un(nn, false, TROUPE_BINOP_ADD, xf, TROUPE_UNOP_IDENTITY, x, spec));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "conv2d_wt", 4, (int64_t[]){kh, kw, cout, cin}, &wt));
    TROUPE_RETURN_IF_ERROR(s_materialize(nn, wt));
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, wt, TROUPE_UNOP_IDENTITY, w, "oikl=>kloi"));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "conv2d_wide", 3, (int64_t[]){nb, cout, len}, &yw));
    TROUPE_RETURN_IF_ERROR(s_materialize(nn, yw));
    if (b)
        TROUPE_RETURN_IF_ERROR(
            troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, yw, TROUPE_UNOP_IDENTITY, b, "o=>^bo^p"));
    snprintf(spec, sizeof spec, "kloi,bi(p+%lldk+%lldl)=>bop", (long long)(o->dilation[0] * wp),
             (long long)o->dilation[1]);
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_bin(nn, b == NULL, TROUPE_BINOP_ADD, yw, TROUPE_BINOP_MUL, wt, xf, spec));
    TROUPE_RETURN_IF_ERROR(s_y_node(nn, nb, cout, od, false, out));
    snprintf(spec, sizeof spec, "bo(%lldh+w)=>bohw", (long long)wp);
    return troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, *out, TROUPE_UNOP_IDENTITY, yw, spec);
}

/* lhs = sum over k < n of coef[k] * src[k] read with spec[k] ("<src axes>=><lhs axes>"), the
 * zero coefficients left out: the first positive term (else the first nonzero one) sets lhs,
 * the others add or subtract |coef| times their term, in k order. A coefficient of 1 copies its
 * term; the others multiply it by a constant node (troupe_nn_const). */
static troupe_status_t s_lincomb(troupe_nn_t *nn, troupe_tnode_t *lhs, int n, const double *coef,
                                 troupe_tnode_t *const *src, const char *const *spec)
{
    int first = -1;
    for (int k = 0; k < n && first < 0; k++)
        if (coef[k] > 0)
            first = k;
    for (int k = 0; k < n && first < 0; k++)
        if (coef[k] != 0)
            first = k;
    if (first < 0)
        return s_fail(nn, troupe__error(TROUPE_INTERNAL, "conv2d: an all-zero transform row"));
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < n; k++) {
            if ((pass == 0) != (k == first) || coef[k] == 0)
                continue;
            const bool init = k == first;
            const troupe_binop_t acc = init          ? TROUPE_BINOP_ARG2
                                       : coef[k] < 0 ? TROUPE_BINOP_SUB
                                                     : TROUPE_BINOP_ADD;
            const double c = init ? coef[k] : fabs(coef[k]);
            if (c == 1) {
                TROUPE_RETURN_IF_ERROR(
                    troupe_nn_un(nn, init, acc, lhs, TROUPE_UNOP_IDENTITY, src[k], spec[k]));
                continue;
            }
            troupe_tnode_t *cn = NULL;
            TROUPE_RETURN_IF_ERROR(troupe_nn_const(nn, c, &cn));
            char bspec[160]; /* "<src>=><lhs>" -> "<src>,=><lhs>": the constant has no axes */
            const char *arrow = strstr(spec[k], "=>");
            if (arrow == NULL)
                return s_fail(nn,
                              troupe__error(TROUPE_INTERNAL, "conv2d: spec %s has no =>", spec[k]));
            snprintf(bspec, sizeof bspec, "%.*s,%s", (int)(arrow - spec[k]), spec[k], arrow);
            TROUPE_RETURN_IF_ERROR(
                troupe_nn_bin(nn, init, acc, lhs, TROUPE_BINOP_MUL, src[k], cn, bspec));
        }
    return TROUPE_OK;
}

/* A Winograd lowering's output y (B, Cout, OH, OW) (cl: (B, OH, OW, Cout)), set to the bias (or
 * zeros) before the tiles are added in, and its grid (TH, TW) of zeros: the tiles' h and w appear
 * only inside their flat index (b TH TW + h TW + w), so an operand of that shape, read with ARG1,
 * gives them their sizes. */
static troupe_status_t s_wino_output(troupe_nn_t *nn, troupe_tnode_t *b, int64_t nb, int64_t cout,
                                     const int64_t od[2], int64_t th, int64_t tw, bool cl,
                                     troupe_tnode_t **out, troupe_tnode_t **grid)
{
    troupe_asgn_t *t = NULL;
    TROUPE_RETURN_IF_ERROR(s_y_node(nn, nb, cout, od, cl, out));
    if (b)
        TROUPE_RETURN_IF_ERROR(troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, *out, TROUPE_UNOP_IDENTITY,
                                            b, cl ? "o=>^b^h^wo" : "o=>^bo^h^w"));
    else
        TROUPE_RETURN_IF_ERROR(
            troupe_nn_add(nn, troupe_asgn_fetch_constant(troupe_nn_comp(nn), *out, 0.0, &t), &t));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "conv2d_wino_grid", 2, (int64_t[]){th, tw}, grid));
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_add(nn, troupe_asgn_fetch_constant(troupe_nn_comp(nn), *grid, 0.0, &t), &t));
    return troupe_nn_stop_gradient(nn, *grid);
}

/* Winograd F(2x2, 3x3) (Lavin and Gray 2015, "Fast Algorithms for Convolutional Neural
 * Networks"): stride 1, dilation 1, a 3x3 kernel and an even output. Each 2x2 output tile is
 * A^T [(G g G^T) . (B^T d B)] A over the 4x4 input window d at stride 2, so the products are 16
 * matrix products per tile position, M[r,c] (Cout x tiles) = U[r,c] (Cout x Cin)
 * V[r,c] (Cin x tiles), 16 multiply-adds per tile and channel pair where the direct form has
 * 36. B^T and A^T hold only 0 and +-1: the input and output transforms are sums and
 * differences of shifted reads, one assignment per row and column, and every node they write
 * is written once whole (the differentiation derives their gradients as the same sums read
 * backwards). The weight transform is elementwise passes too (below). The tiles of all
 * samples are one dense axis (b, th, tw), so each of the 16 products is one library call;
 * AUTO takes this lowering only while those tiles are few (S_WINOGRAD_MAX_BYTES). */
static troupe_status_t s_winograd(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w,
                                  troupe_tnode_t *b, const troupe_nn_conv2d_opts_t *o,
                                  const int64_t od[2], troupe_tnode_t **out)
{
    /* B^T's rows and A^T's: out = in[first] op in[second] (then op in[third] for A^T) */
    static const struct {
        int first, second;
        troupe_binop_t op;
    } bt[4] = {{0, 2, TROUPE_BINOP_SUB},
               {1, 2, TROUPE_BINOP_ADD},
               {2, 1, TROUPE_BINOP_SUB},
               {1, 3, TROUPE_BINOP_SUB}};
    static const struct {
        int first, second, third;
        troupe_binop_t op, op3;
    } at[2] = {{0, 1, 2, TROUPE_BINOP_ADD, TROUPE_BINOP_ADD},
               {1, 2, 3, TROUPE_BINOP_SUB, TROUPE_BINOP_SUB}};
    troupe_tnode_t *xp = x;
    if (o->padding[0] || o->padding[1])
        TROUPE_RETURN_IF_ERROR(s_pad(nn, x, o->padding[0], o->padding[1], false, &xp));
    const int64_t nb = x->dims[0], cin = w->dims[1], cout = w->dims[0], th = od[0] / 2,
                  tw = od[1] / 2, wd = xp->dims[3], ntl = nb * th * tw;
    char spec[160], tile[64]; /* a tile's flat index in M and what is built from it */
    snprintf(tile, sizeof tile, "(%lldb+%lldh+w)", (long long)(th * tw), (long long)tw);
    /* U = G g G^T as 16 (Cout, Cin) matrices. G's rows are g0, (g0+g1+g2)/2, (g0-g1+g2)/2 and
     * g2, so with the weight copied to wt (3, 3, Cout, Cin) every step is an elementwise pass
     * over unit-stride (Cout, Cin) slices: wg[r] (3, Cout, Cin) combines wt's rows (k), U[r][c]
     * wg[r]'s columns (l). Rows 0 and 3 of G pick one row, so those wg and U are slices of wt
     * or wg (uref: a node and the fixed indices in front of its (o, i) axes). */
    static const double g[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    char gspecs[3][32];
    const char *gsp[3] = {gspecs[0], gspecs[1], gspecs[2]};
    troupe_tnode_t *gsrc[3];
    troupe_tnode_t *wt = NULL, *wg[4] = {NULL};
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_node(nn, "conv2d_wino_wt", 4, (int64_t[]){3, 3, cout, cin}, &wt));
    TROUPE_RETURN_IF_ERROR(s_materialize(nn, wt));
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, wt, TROUPE_UNOP_IDENTITY, w, "oikl=>kloi"));
    for (int r = 1; r <= 2; r++) {
        TROUPE_RETURN_IF_ERROR(
            troupe_nn_node(nn, "conv2d_wino_wg", 3, (int64_t[]){3, cout, cin}, &wg[r]));
        TROUPE_RETURN_IF_ERROR(s_materialize(nn, wg[r]));
        for (int k = 0; k < 3; k++) {
            gsrc[k] = wt;
            snprintf(gspecs[k], sizeof gspecs[k], "[%d]loi=>loi", k);
        }
        TROUPE_RETURN_IF_ERROR(s_lincomb(nn, wg[r], 3, g[r], gsrc, gsp));
    }
    struct {
        troupe_tnode_t *n;
        char pre[16];
    } uref[4][4];
    for (int r = 0; r < 4; r++) {
        troupe_tnode_t *src = r == 1 || r == 2 ? wg[r] : wt;
        const char *srow = r == 0 ? "[0]" : r == 3 ? "[2]" : "";
        for (int c = 0; c < 4; c++) {
            if (c == 0 || c == 3) {
                uref[r][c].n = src;
                snprintf(uref[r][c].pre, sizeof uref[r][c].pre, "%s[%d]", srow, c == 0 ? 0 : 2);
                continue;
            }
            TROUPE_RETURN_IF_ERROR(
                troupe_nn_node(nn, "conv2d_wino_u", 2, (int64_t[]){cout, cin}, &uref[r][c].n));
            TROUPE_RETURN_IF_ERROR(s_materialize(nn, uref[r][c].n));
            uref[r][c].pre[0] = '\0';
            for (int l = 0; l < 3; l++) {
                gsrc[l] = src;
                snprintf(gspecs[l], sizeof gspecs[l], "%s[%d]oi=>oi", srow, l);
            }
            TROUPE_RETURN_IF_ERROR(s_lincomb(nn, uref[r][c].n, 3, g[c], gsrc, gsp));
        }
    }
    /* V = B^T d B: rows (Cin, B, TH, W), then V[r][c] (Cin, B, TH, TW) */
    troupe_tnode_t *rows[4] = {NULL}, *m[4][4] = {{NULL}};
    for (int r = 0; r < 4; r++) {
        TROUPE_RETURN_IF_ERROR(
            troupe_nn_node(nn, "conv2d_wino_rows", 4, (int64_t[]){cin, nb, th, wd}, &rows[r]));
        snprintf(spec, sizeof spec, "bi(2h+%d)w,bi(2h+%d)w=>ibhw", bt[r].first, bt[r].second);
        TROUPE_RETURN_IF_ERROR(
            troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, rows[r], bt[r].op, xp, xp, spec));
    }
    /* all sixteen transforms first (one fused pass over the rows), then the products */
    troupe_tnode_t *v[4][4] = {{NULL}};
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) {
            TROUPE_RETURN_IF_ERROR(
                troupe_nn_node(nn, "conv2d_wino_v", 4, (int64_t[]){cin, nb, th, tw}, &v[r][c]));
            TROUPE_RETURN_IF_ERROR(s_materialize(nn, v[r][c]));
            snprintf(spec, sizeof spec, "ibh(2w+%d),ibh(2w+%d)=>ibhw", bt[c].first, bt[c].second);
            TROUPE_RETURN_IF_ERROR(troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, v[r][c], bt[c].op,
                                                 rows[r], rows[r], spec));
        }
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) {
            TROUPE_RETURN_IF_ERROR(
                troupe_nn_node(nn, "conv2d_wino_m", 2, (int64_t[]){cout, ntl}, &m[r][c]));
            TROUPE_RETURN_IF_ERROR(s_materialize(nn, m[r][c]));
            snprintf(spec, sizeof spec, "%soi,ibhw=>o%s", uref[r][c].pre, tile);
            TROUPE_RETURN_IF_ERROR(troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, m[r][c],
                                                 TROUPE_BINOP_MUL, uref[r][c].n, v[r][c], spec));
        }
    /* Y = A^T M A over flat (Cout, B TH TW) tiles: cols[c] = A^T's row i over M[.][c], yq =
     * A^T's row j over the cols (the output of parity (i, j): flat unit-stride passes, and so
     * are their derived gradients), then yq added into y's stride-2 cells, the bias first */
    troupe_tnode_t *grid = NULL;
    TROUPE_RETURN_IF_ERROR(s_wino_output(nn, b, nb, cout, od, th, tw, false, out, &grid));
    for (int i = 0; i < 2; i++) {
        troupe_tnode_t *cols[4] = {NULL};
        for (int c = 0; c < 4; c++) {
            TROUPE_RETURN_IF_ERROR(
                troupe_nn_node(nn, "conv2d_wino_cols", 2, (int64_t[]){cout, ntl}, &cols[c]));
            TROUPE_RETURN_IF_ERROR(troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, cols[c], at[i].op,
                                                 m[at[i].first][c], m[at[i].second][c],
                                                 "on,on=>on"));
            TROUPE_RETURN_IF_ERROR(troupe_nn_un(nn, false, at[i].op3, cols[c], TROUPE_UNOP_IDENTITY,
                                                m[at[i].third][c], "on=>on"));
        }
        for (int j = 0; j < 2; j++) {
            troupe_tnode_t *z = NULL;
            TROUPE_RETURN_IF_ERROR(
                troupe_nn_node(nn, "conv2d_wino_yq", 2, (int64_t[]){cout, ntl}, &z));
            TROUPE_RETURN_IF_ERROR(troupe_nn_bin(nn, true, TROUPE_BINOP_ARG2, z, at[j].op,
                                                 cols[at[j].first], cols[at[j].second],
                                                 "on,on=>on"));
            TROUPE_RETURN_IF_ERROR(troupe_nn_un(nn, false, at[j].op3, z, TROUPE_UNOP_IDENTITY,
                                                cols[at[j].third], "on=>on"));
            snprintf(spec, sizeof spec, "o%s,hw=>bo(2h+%d)(2w+%d)", tile, i, j);
            TROUPE_RETURN_IF_ERROR(
                troupe_nn_bin(nn, false, TROUPE_BINOP_ADD, *out, TROUPE_BINOP_ARG1, z, grid, spec));
        }
    }
    return TROUPE_OK;
}

/* The matrices of Winograd F(m x m, 3 x 3), alpha = m + 2 (Lavin and Gray 2015): the input
 * transform B^T (alpha x alpha), the kernel transform G (alpha x 3), the output transform A^T
 * (m x alpha). F(4x4)'s come from the points 0, +-1, +-2 and infinity (Lavin and Gray's
 * section 4.2; the same matrices as NNPACK's and wincnn's). */
typedef struct s_wino {
    int m, alpha;
    double bt[6][6], g[6][3], at[4][6];
} s_wino_t;

static const s_wino_t s_wino_f4 = {
    4,
    6,
    {{4, 0, -5, 0, 1, 0},
     {0, -4, -4, 1, 1, 0},
     {0, 4, -4, -1, 1, 0},
     {0, -2, -1, 2, 1, 0},
     {0, 2, -1, -2, 1, 0},
     {0, 4, 0, -5, 0, 1}},
    {{0.25, 0, 0},
     {-1.0 / 6, -1.0 / 6, -1.0 / 6},
     {-1.0 / 6, 1.0 / 6, -1.0 / 6},
     {1.0 / 24, 1.0 / 12, 1.0 / 6},
     {1.0 / 24, -1.0 / 12, 1.0 / 6},
     {0, 0, 1}},
    {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}},
};

/* F(2x2)'s, for a channels-last side (the channels-first form, s_winograd, spells them out as
 * pairs). */
static const s_wino_t s_wino_f2 = {
    2,
    4,
    {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}},
    {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}},
    {{1, 1, 1, 0}, {0, 1, -1, -1}},
};

/* Winograd F(m x m, 3 x 3) with channels last inside (WINOGRAD4, f = F(4x4); WINOGRAD with a
 * channels-last side, f = F(2x2)): each m x m
 * output tile is A^T [(G g G^T) . (B^T d B)] A over the alpha x alpha input window d at stride
 * m, so alpha^2 products M[r,c] (tiles x Cout) = V[r,c] (tiles x Cin) U[r,c] (Cin x Cout): for
 * F(4x4) 36 multiply-adds per tile of 16 outputs and channel pair, where F(2x2) takes 64 and
 * the direct form 144. An NCHW input is first copied channels last, xc (B, H, W, Cin) (a
 * channels-last one is read as it is), so that every transform pass runs along the channels,
 * unit stride on both sides: rows[r]
 * (B, TH, W, Cin) = B^T's row r over
 * xc's rows at stride m, V[r][c] (B, TH, TW, Cin) = B^T's row c over rows[r]'s columns; U from
 * the weight copy (3, 3, Cin, Cout) the same way with G; the output over flat (tiles, Cout)
 * nodes, A^T's row i over the M (cols), then A^T's row j over the cols (yq), added into y's
 * cells (m h + i, m w + j) after the bias, NCHW or channels last. Every row of these matrices is a
 * weighted sum (s_lincomb), and the differentiation derives each gradient as the same sums read
 * backwards. The weights 1/6, 1/12 and 1/24 are not exact in binary: the results equal the direct
 * sum within float rounding, wider than F(2x2)'s. On an NCHW side, channels last inside costs
 * transposing passes at a scalar pace: the copy xc and its gradient, and the yq added into y's
 * NCHW cells and their gradients read from dy's (the convnet keeps its activations channels
 * last around these layers instead: examples/fmnist/cnn.c); the channels-first form of F(2x2)
 * (s_winograd) avoids them, but its column passes are short strided loops, and F(4x4)'s would be
 * shorter still (6 tiles a row on the convnet's conv2). A 3x3 kernel, stride 1, dilation 1 and an
 * output whose sides m divides. */
static troupe_status_t s_winograd_cl(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w,
                                     troupe_tnode_t *b, const troupe_nn_conv2d_opts_t *o,
                                     const int64_t od[2], const s_wino_t *f, troupe_tnode_t **out)
{
    const int mt = f->m, al = f->alpha;
    const bool xcl = o->layout & TROUPE_NN_CONV2D_X_NHWC, ycl = o->layout & TROUPE_NN_CONV2D_Y_NHWC;
    troupe_tnode_t *xp = x;
    if (o->padding[0] || o->padding[1])
        TROUPE_RETURN_IF_ERROR(s_pad(nn, x, o->padding[0], o->padding[1], xcl, &xp));
    const int64_t nb = x->dims[0], cin = w->dims[1], cout = w->dims[0], th = od[0] / mt,
                  tw = od[1] / mt, hp = xp->dims[xcl ? 1 : 2], wd = xp->dims[xcl ? 2 : 3],
                  ntl = nb * th * tw;
    char specs[6][160], spec[160], tile[64];
    const char *sp[6];
    troupe_tnode_t *src[6];
    for (int k = 0; k < 6; k++)
        sp[k] = specs[k];
    snprintf(tile, sizeof tile, "(%lldb+%lldh+w)", (long long)(th * tw), (long long)tw);
    /* U = G g G^T: wg[r] (3, Cin, Cout) = G's row r over wt's kernel rows, U[r][c] (Cin, Cout)
     * = G's row c over wg[r]'s kernel columns */
    troupe_tnode_t *wt = NULL, *wg[6] = {NULL}, *u[6][6] = {{NULL}};
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_node(nn, "conv2d_wino_wt", 4, (int64_t[]){3, 3, cin, cout}, &wt));
    TROUPE_RETURN_IF_ERROR(s_materialize(nn, wt));
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, wt, TROUPE_UNOP_IDENTITY, w, "oikl=>klio"));
    for (int r = 0; r < al; r++) {
        TROUPE_RETURN_IF_ERROR(
            troupe_nn_node(nn, "conv2d_wino_wg", 3, (int64_t[]){3, cin, cout}, &wg[r]));
        TROUPE_RETURN_IF_ERROR(s_materialize(nn, wg[r]));
        for (int k = 0; k < 3; k++) {
            src[k] = wt;
            snprintf(specs[k], sizeof specs[k], "[%d]lio=>lio", k);
        }
        TROUPE_RETURN_IF_ERROR(s_lincomb(nn, wg[r], 3, f->g[r], src, sp));
        for (int c = 0; c < al; c++) {
            TROUPE_RETURN_IF_ERROR(
                troupe_nn_node(nn, "conv2d_wino_u", 2, (int64_t[]){cin, cout}, &u[r][c]));
            TROUPE_RETURN_IF_ERROR(s_materialize(nn, u[r][c]));
            for (int l = 0; l < 3; l++) {
                src[l] = wg[r];
                snprintf(specs[l], sizeof specs[l], "[%d]io=>io", l);
            }
            TROUPE_RETURN_IF_ERROR(s_lincomb(nn, u[r][c], 3, f->g[c], src, sp));
        }
    }
    /* V = B^T d B over the channels-last input (an NCHW one copied), all of it before the
     * products */
    troupe_tnode_t *xc = xp, *rows[6] = {NULL}, *v[6][6] = {{NULL}}, *m[6][6] = {{NULL}};
    if (!xcl) {
        TROUPE_RETURN_IF_ERROR(
            troupe_nn_node(nn, "conv2d_wino_xc", 4, (int64_t[]){nb, hp, wd, cin}, &xc));
        TROUPE_RETURN_IF_ERROR(s_materialize(nn, xc));
        TROUPE_RETURN_IF_ERROR(
            troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, xc, TROUPE_UNOP_IDENTITY, xp, "bihw=>bhwi"));
    }
    for (int r = 0; r < al; r++) {
        TROUPE_RETURN_IF_ERROR(
            troupe_nn_node(nn, "conv2d_wino_rows", 4, (int64_t[]){nb, th, wd, cin}, &rows[r]));
        for (int k = 0; k < al; k++) {
            src[k] = xc;
            snprintf(specs[k], sizeof specs[k], "b(%dh+%d)wi=>bhwi", mt, k);
        }
        TROUPE_RETURN_IF_ERROR(s_lincomb(nn, rows[r], al, f->bt[r], src, sp));
    }
    for (int r = 0; r < al; r++)
        for (int c = 0; c < al; c++) {
            TROUPE_RETURN_IF_ERROR(
                troupe_nn_node(nn, "conv2d_wino_v", 4, (int64_t[]){nb, th, tw, cin}, &v[r][c]));
            TROUPE_RETURN_IF_ERROR(s_materialize(nn, v[r][c]));
            for (int k = 0; k < al; k++) {
                src[k] = rows[r];
                snprintf(specs[k], sizeof specs[k], "bh(%dw+%d)i=>bhwi", mt, k);
            }
            TROUPE_RETURN_IF_ERROR(s_lincomb(nn, v[r][c], al, f->bt[c], src, sp));
        }
    for (int r = 0; r < al; r++)
        for (int c = 0; c < al; c++) {
            TROUPE_RETURN_IF_ERROR(
                troupe_nn_node(nn, "conv2d_wino_m", 2, (int64_t[]){ntl, cout}, &m[r][c]));
            TROUPE_RETURN_IF_ERROR(s_materialize(nn, m[r][c]));
            snprintf(spec, sizeof spec, "bhwi,io=>%so", tile);
            TROUPE_RETURN_IF_ERROR(troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, m[r][c],
                                                 TROUPE_BINOP_MUL, v[r][c], u[r][c], spec));
        }
    /* Y = A^T M A over flat (tiles, Cout) nodes, added into y after the bias */
    troupe_tnode_t *grid = NULL;
    TROUPE_RETURN_IF_ERROR(s_wino_output(nn, b, nb, cout, od, th, tw, ycl, out, &grid));
    for (int k = 0; k < 6; k++)
        snprintf(specs[k], sizeof specs[k], "to=>to");
    for (int i = 0; i < mt; i++) {
        troupe_tnode_t *cols[6] = {NULL};
        for (int c = 0; c < al; c++) {
            TROUPE_RETURN_IF_ERROR(
                troupe_nn_node(nn, "conv2d_wino_cols", 2, (int64_t[]){ntl, cout}, &cols[c]));
            for (int k = 0; k < al; k++)
                src[k] = m[k][c];
            TROUPE_RETURN_IF_ERROR(s_lincomb(nn, cols[c], al, f->at[i], src, sp));
        }
        for (int j = 0; j < mt; j++) {
            troupe_tnode_t *z = NULL;
            TROUPE_RETURN_IF_ERROR(
                troupe_nn_node(nn, "conv2d_wino_yq", 2, (int64_t[]){ntl, cout}, &z));
            TROUPE_RETURN_IF_ERROR(s_lincomb(nn, z, al, f->at[j], cols, sp));
            snprintf(spec, sizeof spec,
                     ycl ? "%so,hw=>b(%dh+%d)(%dw+%d)o" : "%so,hw=>bo(%dh+%d)(%dw+%d)", tile, mt, i,
                     mt, j);
            TROUPE_RETURN_IF_ERROR(
                troupe_nn_bin(nn, false, TROUPE_BINOP_ADD, *out, TROUPE_BINOP_ARG1, z, grid, spec));
        }
    }
    return TROUPE_OK;
}

/* im2col: the windows copied out once, so that the convolution is one matrix product per
 * sample, y[b] (Cout x OH*OW) = wb (Cout x rows) cols[b] (rows x OH*OW), that the GEMM
 * matcher hands to the library (compiler/gemm.h); so are both derived gradients (dwb summed
 * over the samples as a loop of accumulating calls, dcols per sample), and the copy's own
 * gradient is the col2im scatter-add into the input's gradient. With a bias, cols has a last
 * row of ones and wb the bias as its last column: the bias is added inside the product and its
 * gradient (the sum of dy over the samples and cells) comes out of the weight gradient's
 * product, where a separate pass would add up an image of 4-d cells one by one. cols and wb
 * stay materialised: inlined into the product, they would make it a nest of loops again.
 *
 * folded (IM2COL_FOLDED): the batch folded into the product's columns instead, cols (rows, B,
 * OH, OW), so that the convolution is one matrix product for the whole batch, yt (Cout x
 * B*OH*OW) = wb cols, then y the copy of yt with its first two axes swapped; both derived
 * gradients are one product each as well (dwb = dyt cols^T over k = B*OH*OW, dcols = wb^T
 * dyt). This is the form for a GPU (cuBLASLt), whose GEMM step takes one product. xp is the
 * (padded) input. */
static troupe_status_t s_im2col(troupe_nn_t *nn, troupe_tnode_t *xp, troupe_tnode_t *w,
                                troupe_tnode_t *b, const troupe_nn_conv2d_opts_t *o,
                                const int64_t od[2], bool folded, troupe_tnode_t **out)
{
    const bool xcl = o->layout & TROUPE_NN_CONV2D_X_NHWC, ycl = o->layout & TROUPE_NN_CONV2D_Y_NHWC;
    const int64_t nb = xp->dims[0], cout = w->dims[0], kh = w->dims[2], kw = w->dims[3];
    const int64_t taps = w->dims[1] * kh * kw, rows = taps + (b != NULL);
    char hi[48], wi[48], spec[160];
    s_window(hi, sizeof hi, o->stride[0], 'h', o->dilation[0], 'k');
    s_window(wi, sizeof wi, o->stride[1], 'w', o->dilation[1], 'l');
    troupe_tnode_t *cols = NULL, *wb = NULL;
    troupe_asgn_t *t = NULL;
    const int64_t cd_sample[4] = {nb, rows, od[0], od[1]}, cd_folded[4] = {rows, nb, od[0], od[1]};
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "im2col", 4, folded ? cd_folded : cd_sample, &cols));
    TROUPE_RETURN_IF_ERROR(s_materialize(nn, cols));
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "conv2d_wb", 2, (int64_t[]){cout, rows}, &wb));
    TROUPE_RETURN_IF_ERROR(s_materialize(nn, wb));
    /* k and l index cols only inside its merged row: a (KH, KW) operand of zeros, read with
     * ARG1, gives them their sizes */
    troupe_tnode_t *win = NULL;
    TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "conv2d_taps", 2, (int64_t[]){kh, kw}, &win));
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_add(nn, troupe_asgn_fetch_constant(troupe_nn_comp(nn), win, 0.0, &t), &t));
    TROUPE_RETURN_IF_ERROR(troupe_nn_stop_gradient(nn, win));
    if (folded && (xcl || ycl)) /* s_plan refuses it */
        return s_fail(nn, troupe__error(TROUPE_INTERNAL, "conv2d: a folded im2col channels last"));
    if (xcl)
        snprintf(spec, sizeof spec, "b%s%si,kl=>b(%lldi+%lldk+l)hw", hi, wi, (long long)(kh * kw),
                 (long long)kw);
    else
        snprintf(spec, sizeof spec,
                 folded ? "bi%s%s,kl=>(%lldi+%lldk+l)bhw" : "bi%s%s,kl=>b(%lldi+%lldk+l)hw", hi, wi,
                 (long long)(kh * kw), (long long)kw);
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, cols, TROUPE_BINOP_ARG1, xp, win, spec));
    if (b) {
        troupe_tnode_t *one = NULL;
        TROUPE_RETURN_IF_ERROR(troupe_nn_node(nn, "conv2d_one", 1, (int64_t[]){1}, &one));
        TROUPE_RETURN_IF_ERROR(
            troupe_nn_add(nn, troupe_asgn_fetch_constant(troupe_nn_comp(nn), one, 1.0, &t), &t));
        TROUPE_RETURN_IF_ERROR(troupe_nn_stop_gradient(nn, one));
        snprintf(spec, sizeof spec, folded ? "=>[%lld]^b^h^w" : "=>^b[%lld]^h^w", (long long)taps);
        TROUPE_RETURN_IF_ERROR(
            troupe_nn_un(nn, false, TROUPE_BINOP_ADD, cols, TROUPE_UNOP_IDENTITY, one, spec));
        TROUPE_RETURN_IF_ERROR(
            troupe_nn_add(nn, troupe_asgn_fetch_constant(troupe_nn_comp(nn), wb, 0.0, &t), &t));
        snprintf(spec, sizeof spec, "o=>o[%lld]", (long long)taps);
        TROUPE_RETURN_IF_ERROR(
            troupe_nn_un(nn, false, TROUPE_BINOP_ADD, wb, TROUPE_UNOP_IDENTITY, b, spec));
    }
    snprintf(spec, sizeof spec, "oikl=>o(%lldi+%lldk+l)", (long long)(kh * kw), (long long)kw);
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_un(nn, b == NULL, TROUPE_BINOP_ADD, wb, TROUPE_UNOP_IDENTITY, w, spec));
    if (!folded) {
        TROUPE_RETURN_IF_ERROR(s_y_node(nn, nb, cout, od, ycl, out));
        return troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, *out, TROUPE_BINOP_MUL, wb, cols,
                             ycl ? "oj,bjhw=>bhwo" : "oj,bjhw=>bohw");
    }
    troupe_tnode_t *yt = NULL;
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_node(nn, "conv2d_folded", 4, (int64_t[]){cout, nb, od[0], od[1]}, &yt));
    TROUPE_RETURN_IF_ERROR(s_materialize(nn, yt));
    TROUPE_RETURN_IF_ERROR(
        troupe_nn_bin(nn, true, TROUPE_BINOP_ADD, yt, TROUPE_BINOP_MUL, wb, cols, "oj,jbhw=>obhw"));
    TROUPE_RETURN_IF_ERROR(s_y_node(nn, nb, cout, od, false, out));
    return troupe_nn_un(nn, true, TROUPE_BINOP_ARG2, *out, TROUPE_UNOP_IDENTITY, yt, "obhw=>bohw");
}

/* The output sides od and the lowering (AUTO resolved, nn/conv.h) for an input of xd (4 dims in
 * o's layout), w and b; INVALID_ARGUMENT naming the shapes, as an error the caller keeps or
 * drops (troupe_nn_conv2d_plan leaves the nn's status alone). */
static troupe_status_t s_plan(troupe_prec_t prec, int x_id, int x_ndims, const int64_t *xd,
                              const troupe_tnode_t *w, const troupe_tnode_t *b,
                              const troupe_nn_conv2d_opts_t *o, int64_t od[2],
                              troupe_nn_conv2d_lowering_t *low)
{
    /* "input #id (d0, d1, ...)", or "input (...)" for x_id < 0 (troupe_nn_conv2d_plan) */
    char xs[160];
    size_t n = x_id >= 0 ? (size_t)snprintf(xs, sizeof xs, "input #%d (", x_id)
                         : (size_t)snprintf(xs, sizeof xs, "input (");
    for (int a = 0; a < x_ndims && a < 8 && n < sizeof xs; a++)
        n += (size_t)snprintf(xs + n, sizeof xs - n, "%s%lld", a ? ", " : "", (long long)xd[a]);
    if (n < sizeof xs)
        snprintf(xs + n, sizeof xs - n, ")");
    for (int a = 0; a < 2; a++)
        if (o->stride[a] < 1 || o->dilation[a] < 1 || o->padding[a] < 0)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "conv2d: stride %lld, padding %lld, dilation %lld on axis %s "
                                 "(stride and dilation >= 1, padding >= 0)",
                                 (long long)o->stride[a], (long long)o->padding[a],
                                 (long long)o->dilation[a], a ? "w" : "h");
    if (o->layout & ~(TROUPE_NN_CONV2D_X_NHWC | TROUPE_NN_CONV2D_Y_NHWC))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "conv2d: layout %#x has bits other than X_NHWC (1) and Y_NHWC (2)",
                             o->layout);
    const bool xcl = o->layout & TROUPE_NN_CONV2D_X_NHWC;
    const int ac = xcl ? 3 : 1, ah = xcl ? 1 : 2; /* x's channel axis and its first spatial one */
    if (x_ndims != 4 || w->ndims != 4 || xd[ac] != w->dims[1] ||
        (b && (b->ndims != 1 || b->dims[0] != w->dims[0])))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "conv2d: %s (%d axes: %s expected, Cin %lld), weight #%d (%d "
                             "axes: Cout, Cin, KH, KW expected, Cin %lld)%s do not fit",
                             xs, x_ndims, xcl ? "B, H, W, Cin" : "B, Cin, H, W",
                             (long long)(x_ndims > ac ? xd[ac] : 0), w->id, w->ndims,
                             (long long)(w->ndims > 1 ? w->dims[1] : 0),
                             b ? " and bias (Cout)" : "");
    for (int a = 0; a < 2; a++) {
        int64_t in = xd[ah + a] + 2 * o->padding[a];
        int64_t span = o->dilation[a] * (w->dims[2 + a] - 1) + 1;
        if (span > in)
            return troupe__error(TROUPE_INVALID_ARGUMENT,
                                 "conv2d: the kernel of weight #%d spans %lld cells on axis %s "
                                 "(%lld x %lld, dilation %lld) but the padded %s has %lld "
                                 "(%lld x %lld, padding %lld)",
                                 w->id, (long long)span, a ? "w" : "h", (long long)w->dims[2],
                                 (long long)w->dims[3], (long long)o->dilation[a], xs,
                                 (long long)in, (long long)xd[ah], (long long)xd[ah + 1],
                                 (long long)o->padding[a]);
        od[a] = (in - span) / o->stride[a] + 1;
    }
    const bool wino_3x3 = o->stride[0] == 1 && o->stride[1] == 1 && o->dilation[0] == 1 &&
                          o->dilation[1] == 1 && w->dims[2] == 3 && w->dims[3] == 3;
    const bool wino_fits = wino_3x3 && od[0] % 2 == 0 && od[1] % 2 == 0;
    const bool wino4_fits = wino_3x3 && od[0] % 4 == 0 && od[1] % 4 == 0;
    /* AUTO (nn/conv.h): Winograd F(4x4), else F(2x2), where it fits and its transformed input
     * matrices stay within S_WINOGRAD_MAX_BYTES, else the shifted products, else im2col; with a
     * channels-last side not the shifted products */
    const int64_t esize = (int64_t)troupe_prec_size_bytes(prec); /* V's */
    const int64_t cin = w->dims[1];
    const int64_t wino_bytes = 16 * cin * xd[0] * (od[0] / 2) * (od[1] / 2) * esize;
    const int64_t wino4_bytes = 36 * cin * xd[0] * (od[0] / 4) * (od[1] / 4) * esize;
    const bool stride1 = o->stride[0] == 1 && o->stride[1] == 1, nchw = o->layout == 0;
    *low = o->lowering;
    if (*low == TROUPE_NN_CONV2D_AUTO)
        *low = wino4_fits && cin >= S_SHIFTED_MIN_CIN && wino4_bytes <= S_WINOGRAD_MAX_BYTES
                   ? TROUPE_NN_CONV2D_WINOGRAD4
               : wino_fits && cin >= S_SHIFTED_MIN_CIN && wino_bytes <= S_WINOGRAD_MAX_BYTES
                   ? TROUPE_NN_CONV2D_WINOGRAD
               : nchw && stride1 && cin >= S_SHIFTED_MIN_CIN ? TROUPE_NN_CONV2D_SHIFTED
                                                             : TROUPE_NN_CONV2D_IM2COL;
    if (*low < TROUPE_NN_CONV2D_AUTO || *low > TROUPE_NN_CONV2D_WINOGRAD4)
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "conv2d: weight #%d: lowering %d is none of AUTO, IM2COL, SHIFTED, "
                             "WINOGRAD, IM2COL_FOLDED, WINOGRAD4",
                             w->id, (int)*low);
    static const char *const names[] = {"auto",     "im2col",        "shifted",
                                        "winograd", "im2col_folded", "winograd4"};
    if (!nchw && (*low == TROUPE_NN_CONV2D_SHIFTED || *low == TROUPE_NN_CONV2D_IM2COL_FOLDED))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "conv2d: the %s lowering of weight #%d takes NCHW tensors only, not "
                             "layout %#x (channels last: im2col, winograd or winograd4)",
                             names[*low], w->id, o->layout);
    if ((*low == TROUPE_NN_CONV2D_SHIFTED && !stride1) ||
        (*low == TROUPE_NN_CONV2D_WINOGRAD && !wino_fits) ||
        (*low == TROUPE_NN_CONV2D_WINOGRAD4 && !wino4_fits))
        return troupe__error(TROUPE_INVALID_ARGUMENT,
                             "conv2d: the %s lowering does not fit weight #%d (%lld x %lld) with "
                             "stride %lld x %lld, dilation %lld x %lld, output %lld x %lld "
                             "(shifted: stride 1; winograd: 3 x 3, stride 1, dilation 1, an even "
                             "output; winograd4: the same, the output's sides divisible by 4)",
                             names[*low], w->id, (long long)w->dims[2], (long long)w->dims[3],
                             (long long)o->stride[0], (long long)o->stride[1],
                             (long long)o->dilation[0], (long long)o->dilation[1], (long long)od[0],
                             (long long)od[1]);
    return TROUPE_OK;
}

troupe_status_t troupe_nn_conv2d_plan(troupe_nn_t *nn, const int64_t x_dims[4],
                                      const troupe_tnode_t *w, const troupe_nn_conv2d_opts_t *opts,
                                      troupe_nn_conv2d_lowering_t *out)
{
    if (!nn || !x_dims || !w || !out)
        return troupe__error(TROUPE_INVALID_ARGUMENT, "conv2d_plan: NULL argument");
    const troupe_nn_conv2d_opts_t def = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
    int64_t od[2];
    return s_plan(troupe_nn_prec(nn), -1, 4, x_dims, w, NULL, opts ? opts : &def, od, out);
}

troupe_status_t troupe_nn_conv2d(troupe_nn_t *nn, troupe_tnode_t *x, troupe_tnode_t *w,
                                 troupe_tnode_t *b, const troupe_nn_conv2d_opts_t *opts,
                                 troupe_tnode_t **out)
{
    TROUPE_RETURN_IF_ERROR(troupe_nn_status(nn));
    if (!x || !w || !out)
        return s_fail(nn, troupe__error(TROUPE_INVALID_ARGUMENT, "conv2d: NULL argument"));
    const troupe_nn_conv2d_opts_t def = TROUPE_NN_CONV2D_OPTS(1, 0, 1);
    const troupe_nn_conv2d_opts_t *o = opts ? opts : &def;
    int64_t od[2];
    troupe_nn_conv2d_lowering_t low;
    troupe_status_t st = s_plan(troupe_nn_prec(nn), x->id, x->ndims, x->dims, w, b, o, od, &low);
    if (st != TROUPE_OK)
        return s_fail(nn, st);
    if (low == TROUPE_NN_CONV2D_WINOGRAD)
        return o->layout ? s_winograd_cl(nn, x, w, b, o, od, &s_wino_f2, out)
                         : s_winograd(nn, x, w, b, o, od, out);
    if (low == TROUPE_NN_CONV2D_WINOGRAD4)
        return s_winograd_cl(nn, x, w, b, o, od, &s_wino_f4, out);
    if (low == TROUPE_NN_CONV2D_SHIFTED)
        return s_shifted(nn, x, w, b, o, od, out);
    troupe_tnode_t *xp = x;
    if (o->padding[0] || o->padding[1])
        TROUPE_RETURN_IF_ERROR(
            s_pad(nn, x, o->padding[0], o->padding[1], o->layout & TROUPE_NN_CONV2D_X_NHWC, &xp));
    return s_im2col(nn, xp, w, b, o, od, low == TROUPE_NN_CONV2D_IM2COL_FOLDED, out);
}
