/* gpt train's learning curve: CSV and PNG (curve.h). */
#define _POSIX_C_SOURCE 200809L
#include "curve.h"

#include "curve_plot.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

troupe_status_t gpt_curve_check(const char *csv, const char *png)
{
    char line[128];
    if (csv) {
        FILE *f = fopen(csv, "r");
        if (f) {
            bool empty = !fgets(line, sizeof line, f);
            fclose(f);
            line[strcspn(line, "\r\n")] = '\0';
            if (!empty && strcmp(line, GPT_CURVE_HEADER) != 0)
                return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                        "option --curve: '%s' exists and is not a gpt learning "
                                        "curve (its first line is not '%s'); remove it or "
                                        "choose another file",
                                        csv, GPT_CURVE_HEADER);
        }
    }
    if (png) {
        FILE *f = fopen(png, "rb");
        if (f) {
            size_t n = fread(line, 1, 8, f);
            fclose(f);
            if (n > 0 && (n < 8 || memcmp(line, "\x89PNG\r\n\x1a\n", 8) != 0))
                return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                        "option --plot: '%s' exists and is not a PNG picture; "
                                        "remove it or choose another file",
                                        png);
        }
    }
    return TROUPE_OK;
}

/* Appends (x, y) to a growing pair of arrays. */
static bool s_push(double **x, double **y, size_t *n, size_t *cap, double vx, double vy)
{
    if (*n == *cap) {
        size_t cap2 = *cap ? 2 * *cap : 256;
        double *x2 = realloc(*x, cap2 * sizeof *x2);
        if (!x2)
            return false;
        *x = x2;
        double *y2 = realloc(*y, cap2 * sizeof *y2);
        if (!y2)
            return false;
        *y = y2;
        *cap = cap2;
    }
    (*x)[*n] = vx;
    (*y)[*n] = vy;
    (*n)++;
    return true;
}

/* A field: a finite number, or NAN when empty. False when neither. */
static bool s_field(const char *s, double *out)
{
    if (*s == '\0') {
        *out = NAN;
        return true;
    }
    char *end = NULL;
    errno = 0;
    *out = strtod(s, &end);
    return end != s && *end == '\0' && errno == 0 && isfinite(*out);
}

/* The rows of an earlier run's CSV before step `first`, into c's arrays (rewritten later). */
static troupe_status_t s_read_back(gpt_curve_t *c, long long first, double (*rows)[4],
                                   size_t *nrows, size_t cap)
{
    FILE *f = fopen(c->csv, "r");
    if (!f)
        return TROUPE_OK; /* nothing to keep */
    char line[256];
    long lineno = 0;
    troupe_status_t st = TROUPE_OK;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (lineno == 1 || line[0] == '\0')
            continue;
        double v[4];
        char *p = line;
        int k = 0;
        bool ok = true;
        for (; k < 4 && ok; k++) {
            char *comma = strchr(p, ',');
            if (comma)
                *comma = '\0';
            ok = s_field(p, &v[k]) && (comma != NULL) == (k < 3);
            p = comma ? comma + 1 : p;
        }
        if (!ok || isnan(v[0])) {
            st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                  "%s:%ld: not a row of %s (to keep before step %lld)", c->csv,
                                  lineno, GPT_CURVE_HEADER, first);
            break;
        }
        if ((long long)v[0] >= first)
            break;
        if (*nrows == cap) {
            st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: too many rows", c->csv);
            break;
        }
        memcpy(rows[(*nrows)++], v, sizeof v);
    }
    fclose(f);
    return st;
}

static void s_write_row(FILE *f, long long step, double loss, double val, double seconds)
{
    fprintf(f, "%lld,", step);
    if (!isnan(loss))
        fprintf(f, "%.6f", loss);
    fputc(',', f);
    if (!isnan(val))
        fprintf(f, "%.6f", val);
    fprintf(f, ",%.3f\n", seconds);
}

troupe_status_t gpt_curve_open(gpt_curve_t *c, const char *csv, const char *png,
                               long long first, const char *title)
{
    memset(c, 0, sizeof *c);
    c->csv = csv;
    c->png = png;
    snprintf(c->title, sizeof c->title, "%s", title ? title : "gpt");
    size_t nrows = 0, cap = first > 0 ? (size_t)first + 1 : 0;
    double (*rows)[4] = NULL;
    troupe_status_t st = TROUPE_OK;
    if (csv && first > 0) {
        rows = malloc(cap * sizeof *rows);
        if (!rows)
            return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: out of memory", csv);
        st = s_read_back(c, first, rows, &nrows, cap);
        if (st != TROUPE_OK)
            goto out;
    }
    if (csv) {
        c->f = fopen(csv, "w");
        if (!c->f) {
            st = troupe_error_set(TROUPE_FAILED_PRECONDITION,
                                  "option --curve: cannot write '%s': %s", csv, strerror(errno));
            goto out;
        }
        fprintf(c->f, "%s\n", GPT_CURVE_HEADER);
    }
    for (size_t i = 0; i < nrows; i++) {
        st = gpt_curve_add(c, (long long)rows[i][0], rows[i][1], rows[i][2], rows[i][3]);
        if (st != TROUPE_OK)
            goto out;
    }
    c->seconds0 = nrows > 0 ? rows[nrows - 1][3] : 0; /* this run's seconds count on from it */
out:
    free(rows);
    if (st != TROUPE_OK)
        gpt_curve_close(c);
    return st;
}

troupe_status_t gpt_curve_add(gpt_curve_t *c, long long step, double loss, double val,
                              double seconds)
{
    if (!isnan(loss) && !s_push(&c->sx, &c->sy, &c->sn, &c->scap, (double)step, loss))
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "the learning curve: out of memory");
    if (!isnan(val) && !s_push(&c->vx, &c->vy, &c->vn, &c->vcap, (double)step, val))
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "the learning curve: out of memory");
    if (!c->f)
        return TROUPE_OK;
    s_write_row(c->f, step, loss, val, c->seconds0 + seconds);
    if (fflush(c->f) != 0 || ferror(c->f))
        return troupe_error_set(TROUPE_FAILED_PRECONDITION, "writing %s: %s", c->csv,
                                strerror(errno));
    return TROUPE_OK;
}

void gpt_curve_draw(gpt_curve_t *c)
{
    if (!c->png || c->sn == 0 || c->warned)
        return;
    troupe_plot_panel_t top = {c->sx, c->sy, c->sn, "training loss", false};
    troupe_plot_panel_t bottom = {c->vx, c->vy, c->vn, "validation loss", false};
    char caption[160];
    int at = snprintf(caption, sizeof caption, "step %.0f: loss %.4f", c->sx[c->sn - 1],
                      c->sy[c->sn - 1]);
    if (c->vn > 0 && at > 0 && (size_t)at < sizeof caption)
        snprintf(caption + at, sizeof caption - (size_t)at, ", validation loss %.4f (step %.0f)",
                 c->vy[c->vn - 1], c->vx[c->vn - 1]);
    if (troupe_curve_plot_panels_png(&top, &bottom, "step", c->title, caption, c->png) !=
        TROUPE_OK) {
        fprintf(stderr, "gpt: warning: --plot %s: %s (training goes on; no more attempts)\n",
                c->png, troupe_last_error());
        c->warned = true;
    }
}

void gpt_curve_close(gpt_curve_t *c)
{
    if (!c)
        return;
    if (c->f && fclose(c->f) != 0)
        fprintf(stderr, "gpt: writing %s: %s\n", c->csv, strerror(errno));
    c->f = NULL;
    free(c->sx);
    free(c->sy);
    free(c->vx);
    free(c->vy);
    c->sx = c->sy = c->vx = c->vy = NULL;
    c->sn = c->vn = c->scap = c->vcap = 0;
}
