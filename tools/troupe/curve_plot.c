/* troupe — the learning curve: CSV reader and PNG drawing (curve_plot.h). */
#define _POSIX_C_SOURCE 200809L /* fileno */
#include "curve_plot.h"

#include "base/alloc.h"
#include "base/strbuf.h"
#include "base/vec.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if TROUPE_CURVE_HAVE_CAIRO
#include <cairo.h>
#endif

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define S_FIELDS 5

static const char *const s_field_names[S_FIELDS] = {"epoch", "loss", "test_accuracy",
                                                    "samples_per_s", "seconds"};

/* ---- reading ------------------------------------------------------------------------------- */

/* Field k of a row: a finite number within its range (epoch: an integer >= 1). */
static bool s_field_ok(int k, double v)
{
    if (!isfinite(v) || v < 0)
        return false;
    if (k == 0)
        return v >= 1 && v <= 1e9 && v == floor(v);
    if (k == 2)
        return v <= 1;
    return true;
}

static const char *s_field_want(int k)
{
    return k == 0 ? "an integer >= 1" : k == 2 ? "a number in [0, 1]" : "a finite number >= 0";
}

troupe_status_t troupe_curve_add(troupe_curve_t *c, const troupe_curve_row_t *row)
{
    const double v[S_FIELDS] = {row->epoch, row->loss, row->test_accuracy, row->samples_per_s,
                                row->seconds};
    for (int k = 0; k < S_FIELDS; k++)
        if (!s_field_ok(k, v[k]))
            return troupe_error_set(TROUPE_INVALID_ARGUMENT, "curve row: %s %g is not %s",
                                    s_field_names[k], v[k], s_field_want(k));
    while (c->n > 0 && c->rows[c->n - 1].epoch >= row->epoch)
        c->n--; /* a resumed run repeats these epochs: its rows win */
    if (!TROUPE__VEC_PUSH(c->rows, c->n, c->cap, *row))
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "curve: out of memory");
    return TROUPE_OK;
}

void troupe_curve_free(troupe_curve_t *c)
{
    if (!c)
        return;
    troupe_free(c->rows);
    c->rows = NULL;
    c->n = c->cap = 0;
}

/* Parses one data row (NUL-terminated, no newline) into *row; on failure writes the problem
 * into err. */
static bool s_parse_row(char *line, troupe_curve_row_t *row, char *err, size_t cap)
{
    double v[S_FIELDS];
    int n = 0;
    char *p = line; /* split by hand: strtok would merge empty fields */
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (n < S_FIELDS) {
            char *end = NULL;
            errno = 0;
            v[n] = strtod(p, &end);
            while (end && *end == ' ')
                end++;
            if (end == p || errno == ERANGE || *end != '\0' || !s_field_ok(n, v[n])) {
                char got[48];
                snprintf(err, cap, "field %s: expected %s, got '%s'", s_field_names[n],
                         s_field_want(n), troupe__escaped(p, strlen(p), got, sizeof got));
                return false;
            }
        }
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    if (n != S_FIELDS) {
        snprintf(err, cap, "expected %d fields (%s), got %d", S_FIELDS, TROUPE_CURVE_HEADER, n);
        return false;
    }
    row->epoch = (int)v[0];
    row->loss = v[1];
    row->test_accuracy = v[2];
    row->samples_per_s = v[3];
    row->seconds = v[4];
    return true;
}

/* What a non-regular file is, for an error message. */
static const char *s_file_kind(const struct stat *sb)
{
    if (S_ISDIR(sb->st_mode))
        return "a directory";
    if (S_ISCHR(sb->st_mode))
        return "a character device";
    if (S_ISBLK(sb->st_mode))
        return "a block device";
    if (S_ISFIFO(sb->st_mode))
        return "a FIFO";
    if (S_ISSOCK(sb->st_mode))
        return "a socket";
    return "not a regular file";
}

/* One line of f into buf (at most cap - 1 bytes, NUL-terminated, the newline dropped), its
 * length in *len. Returns 1 for a line, 0 at the end of the file, -1 for a line longer than
 * cap - 1 bytes, -2 for a NUL byte in it. */
static int s_read_line(FILE *f, char *buf, size_t cap, size_t *len)
{
    size_t n = 0;
    int c;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (c == '\0')
            return -2;
        if (n + 1 >= cap)
            return -1;
        buf[n++] = (char)c;
    }
    buf[n] = '\0';
    *len = n;
    return c == EOF && n == 0 ? 0 : 1;
}

troupe_status_t troupe_curve_read(const char *path, troupe_curve_t *out)
{
    memset(out, 0, sizeof *out);
    if (!path)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "curve: NULL path");
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return troupe_error_set(TROUPE_NOT_FOUND, "%s: cannot open: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "%s: cannot open: %s", path,
                                strerror(errno));
    }
    troupe_status_t st = TROUPE_OK;
    char line[TROUPE_CURVE_LINE_MAX + 1], err[160];
    long lineno = 0;
    bool header = false;
    size_t len = 0;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                              "%s: %s, not a regular file: expected a learning-curve CSV", path,
                              s_file_kind(&sb));
        goto out_file;
    }
    int got;
    while ((got = s_read_line(f, line, sizeof line, &len)) != 0) {
        lineno++;
        if (got == -1) {
            st = troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                  "%s:%ld: a line longer than %d bytes: not a learning-curve CSV",
                                  path, lineno, TROUPE_CURVE_LINE_MAX);
            goto out_file;
        }
        if (got == -2) {
            st = troupe_error_set(TROUPE_INVALID_ARGUMENT, "%s:%ld: a NUL byte: not a CSV text",
                                  path, lineno);
            goto out_file;
        }
        while (len > 0 && line[len - 1] == '\r')
            line[--len] = '\0';
        if (!header) {
            if (strcmp(line, TROUPE_CURVE_HEADER) != 0) {
                char head[72];
                st = troupe_error_set(
                    TROUPE_INVALID_ARGUMENT, "%s:%ld: expected the header '%s', got '%s'", path,
                    lineno, TROUPE_CURVE_HEADER, troupe__escaped(line, len, head, sizeof head));
                goto out_file;
            }
            header = true;
            continue;
        }
        if (len == 0)
            continue;
        troupe_curve_row_t row;
        if (!s_parse_row(line, &row, err, sizeof err)) {
            st = troupe_error_set(TROUPE_INVALID_ARGUMENT, "%s:%ld: %s", path, lineno, err);
            goto out_file;
        }
        st = troupe_curve_add(out, &row);
        if (st != TROUPE_OK)
            goto out_file;
    }
    if (ferror(f))
        st = troupe_error_set(TROUPE_NOT_FOUND, "%s:%ld: read error: %s", path, lineno + 1,
                              strerror(errno));
    else if (!header)
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT, "%s:1: empty file: expected the header '%s'",
                              path, TROUPE_CURVE_HEADER);
    else if (out->n == 0)
        st = troupe_error_set(TROUPE_INVALID_ARGUMENT, "%s:%ld: no data row after the header", path,
                              lineno);
out_file:
    fclose(f);
    return st;
}

/* ---- drawing ------------------------------------------------------------------------------- */

#if TROUPE_CURVE_HAVE_CAIRO

#define S_W 900
#define S_H 640
#define S_LEFT 86.0
#define S_RIGHT 30.0
#define S_TOP 62.0
#define S_GAP 46.0
#define S_BOTTOM 56.0
#define S_MAX_MARKERS 60 /* points drawn as markers up to this many epochs */

/* An axis: data range [lo, hi] cut by `step` into round ticks. */
typedef struct s_axis {
    double lo, hi, step;
} s_axis_t;

/* 1, 2 or 5 times a power of ten, the nearest round step at or above `raw`. */
static double s_nice_step(double raw)
{
    double p = pow(10, floor(log10(raw)));
    double m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/* An axis covering [lo, hi] with about `ticks` round ticks, bounds on ticks; `integer` keeps
 * the step a whole number. */
static s_axis_t s_axis(double lo, double hi, int ticks, bool integer)
{
    if (hi - lo < 1e-12 * (fabs(lo) + fabs(hi)) || hi - lo < 1e-300) {
        double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 0.1;
        lo -= integer ? 1 : pad;
        hi += integer ? 1 : pad;
    }
    s_axis_t a;
    a.step = s_nice_step((hi - lo) / ticks);
    if (integer && a.step < 1)
        a.step = 1;
    a.lo = floor(lo / a.step + 1e-9) * a.step;
    a.hi = ceil(hi / a.step - 1e-9) * a.step;
    return a;
}

/* Decimals a tick label of this step needs. */
static int s_decimals(double step)
{
    int d = (int)ceil(-log10(step) - 1e-9);
    return d < 0 ? 0 : d > 6 ? 6 : d;
}

/* Text with its anchor: ax 0 left, 0.5 centred, 1 right; ay likewise from the top. */
static void s_text(cairo_t *cr, double x, double y, double ax, double ay, const char *s)
{
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    cairo_move_to(cr, x - ax * e.width - e.x_bearing, y - ay * e.height - e.y_bearing);
    cairo_show_text(cr, s);
}

/* One panel: frame, grid, ticks, the series and its name. */
static void s_panel(cairo_t *cr, const troupe_plot_panel_t *p, double top, double height,
                    const s_axis_t *xa, const double rgb[3], bool x_labels)
{
    double left = S_LEFT, width = S_W - S_LEFT - S_RIGHT;
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < p->n; i++) {
        lo = fmin(lo, p->y[i]);
        hi = fmax(hi, p->y[i]);
    }
    s_axis_t ya = s_axis(lo, hi, 5, false);
    if (p->unit) { /* an accuracy: keep the axis within [0, 1] */
        ya.lo = fmax(ya.lo, 0);
        ya.hi = fmin(ya.hi, 1);
        if (ya.hi <= ya.lo)
            ya = (s_axis_t){0, 1, 0.2};
    }
#define S_X(v) (left + ((v)-xa->lo) / (xa->hi - xa->lo) * width)
#define S_Y(v) (top + height - ((v)-ya.lo) / (ya.hi - ya.lo) * height)
    char label[32];
    cairo_set_font_size(cr, 12);
    cairo_set_line_width(cr, 1);
    for (double t = ya.lo; t <= ya.hi + ya.step * 1e-6; t += ya.step) {
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, left, floor(S_Y(t)) + 0.5);
        cairo_line_to(cr, left + width, floor(S_Y(t)) + 0.5);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        snprintf(label, sizeof label, "%.*f", s_decimals(ya.step),
                 fabs(t) < ya.step * 1e-9 ? 0 : t);
        s_text(cr, left - 8, S_Y(t), 1, 0.5, label);
    }
    for (double t = xa->lo; t <= xa->hi + xa->step * 1e-6; t += xa->step) {
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, floor(S_X(t)) + 0.5, top);
        cairo_line_to(cr, floor(S_X(t)) + 0.5, top + height);
        cairo_stroke(cr);
        if (x_labels) {
            cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
            snprintf(label, sizeof label, "%.0f", t);
            s_text(cr, S_X(t), top + height + 8, 0.5, 0, label);
        }
    }
    cairo_set_source_rgb(cr, 0.35, 0.35, 0.35);
    cairo_rectangle(cr, left + 0.5, top + 0.5, width, height);
    cairo_stroke(cr);

    cairo_save(cr); /* the axes cover the data: no clip, so edge markers stay whole */
    cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
    cairo_set_line_width(cr, 2.2);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    for (size_t i = 0; i < p->n; i++) {
        if (i == 0)
            cairo_move_to(cr, S_X(p->x[i]), S_Y(p->y[i]));
        else
            cairo_line_to(cr, S_X(p->x[i]), S_Y(p->y[i]));
    }
    cairo_stroke(cr);
    if (p->n <= S_MAX_MARKERS) {
        for (size_t i = 0; i < p->n; i++) {
            cairo_new_sub_path(cr);
            cairo_arc(cr, S_X(p->x[i]), S_Y(p->y[i]), 3.5, 0, 2 * M_PI);
        }
        cairo_fill(cr);
    }
    cairo_restore(cr);
#undef S_X
#undef S_Y

    /* the value axis's name, turned along the axis */
    cairo_save(cr);
    cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
    cairo_set_font_size(cr, 13);
    cairo_translate(cr, 22, top + height / 2);
    cairo_rotate(cr, -M_PI / 2);
    s_text(cr, 0, 0, 0.5, 0.5, p->name ? p->name : "");
    cairo_restore(cr);
}

static troupe_status_t s_draw(const troupe_plot_panel_t *top_panel,
                              const troupe_plot_panel_t *bottom_panel, const char *x_name,
                              const char *title, const char *caption, const char *png_path)
{
    troupe_status_t st = TROUPE_OK;
    cairo_surface_t *surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, S_W, S_H);
    cairo_t *cr = cairo_create(surface);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);

    double x_lo = top_panel->x[0], x_hi = top_panel->x[top_panel->n - 1];
    if (bottom_panel && bottom_panel->n > 0) {
        x_lo = fmin(x_lo, bottom_panel->x[0]);
        x_hi = fmax(x_hi, bottom_panel->x[bottom_panel->n - 1]);
    }
    s_axis_t xa = s_axis(x_lo, x_hi, 10, true);
    static const double blue[3] = {0.12, 0.40, 0.70}, orange[3] = {0.85, 0.37, 0.01};
    if (bottom_panel && bottom_panel->n > 0) {
        double height = (S_H - S_TOP - S_BOTTOM - S_GAP) / 2;
        s_panel(cr, top_panel, S_TOP, height, &xa, blue, false);
        s_panel(cr, bottom_panel, S_TOP + height + S_GAP, height, &xa, orange, true);
    } else {
        s_panel(cr, top_panel, S_TOP, S_H - S_TOP - S_BOTTOM, &xa, blue, true);
    }

    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    cairo_set_font_size(cr, 13);
    s_text(cr, S_LEFT + (S_W - S_LEFT - S_RIGHT) / 2, S_H - 12, 0.5, 1, x_name);
    if (caption) {
        cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
        cairo_set_font_size(cr, 12);
        s_text(cr, S_LEFT, 36, 0, 0, caption);
    }
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
    cairo_set_font_size(cr, 15);
    s_text(cr, S_LEFT, 12, 0, 0, title ? title : "learning curve");
    cairo_destroy(cr);

    char *tmp = troupe_strdup_printf("%s.tmp.%ld", png_path, (long)getpid());
    if (!tmp) {
        st = troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "plot: out of memory");
        goto out_surface;
    }
    cairo_status_t cs = cairo_surface_status(surface);
    if (cs == CAIRO_STATUS_SUCCESS)
        cs = cairo_surface_write_to_png(surface, tmp);
    if (cs != CAIRO_STATUS_SUCCESS) {
        unlink(tmp);
        st = troupe_error_set(TROUPE_UNAVAILABLE, "cannot write the plot '%s': cairo: %s", png_path,
                              cairo_status_to_string(cs));
    } else if (rename(tmp, png_path) != 0) {
        st = troupe_error_set(TROUPE_UNAVAILABLE, "cannot write the plot '%s': rename: %s",
                              png_path, strerror(errno));
        unlink(tmp);
    }
    troupe_free(tmp);
out_surface:
    cairo_surface_destroy(surface);
    return st;
}

bool troupe_curve_plot_available(void)
{
    return true;
}

#else /* !TROUPE_CURVE_HAVE_CAIRO */

bool troupe_curve_plot_available(void)
{
    return false;
}

#endif

/* A panel's points: at least one (none when may_be_empty), finite, x not decreasing. */
static troupe_status_t s_panel_check(const troupe_plot_panel_t *p, const char *which,
                                     bool may_be_empty)
{
    if (p->n == 0 && may_be_empty)
        return TROUPE_OK;
    if (p->n == 0 || !p->x || !p->y)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "plot: the %s panel has no points",
                                which);
    for (size_t i = 0; i < p->n; i++) {
        if (!isfinite(p->x[i]) || !isfinite(p->y[i]))
            return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                    "plot: the %s panel's point %zu (%g, %g) is not finite", which,
                                    i, p->x[i], p->y[i]);
        if (i > 0 && p->x[i] < p->x[i - 1])
            return troupe_error_set(TROUPE_INVALID_ARGUMENT,
                                    "plot: the %s panel's x values decrease at point %zu", which,
                                    i);
    }
    return TROUPE_OK;
}

troupe_status_t troupe_curve_plot_panels_png(const troupe_plot_panel_t *top,
                                             const troupe_plot_panel_t *bottom,
                                             const char *x_name, const char *title,
                                             const char *caption, const char *png_path)
{
    if (!top || !png_path || !x_name)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "plot: no top panel, x name or path");
    TROUPE_RETURN_IF_ERROR(s_panel_check(top, "top", false));
    if (bottom)
        TROUPE_RETURN_IF_ERROR(s_panel_check(bottom, "bottom", true));
#if TROUPE_CURVE_HAVE_CAIRO
    return s_draw(top, bottom, x_name, title, caption, png_path);
#else
    (void)title;
    (void)caption;
    return troupe_error_set(TROUPE_UNIMPLEMENTED,
                            "this troupe was built without cairo (libcairo2-dev): no PNG plots");
#endif
}

troupe_status_t troupe_curve_plot_png(const troupe_curve_t *c, const char *title,
                                      const char *png_path)
{
    if (!c || c->n == 0 || !png_path)
        return troupe_error_set(TROUPE_INVALID_ARGUMENT, "plot: no rows to draw, or no path");
    troupe_status_t st = TROUPE_OK;
    double *v = troupe_malloc(3 * c->n * sizeof *v);
    if (!v)
        return troupe_error_set(TROUPE_RESOURCE_EXHAUSTED, "plot: out of memory");
    double *x = v, *loss = v + c->n, *acc = v + 2 * c->n;
    for (size_t i = 0; i < c->n; i++) {
        x[i] = c->rows[i].epoch;
        loss[i] = c->rows[i].loss;
        acc[i] = c->rows[i].test_accuracy;
    }
    troupe_plot_panel_t top = {x, loss, c->n, "training loss", false};
    troupe_plot_panel_t bottom = {x, acc, c->n, "test accuracy", true};
    const troupe_curve_row_t *z = &c->rows[c->n - 1];
    char caption[128];
    snprintf(caption, sizeof caption, "epoch %d: loss %.4f, test accuracy %.4f", z->epoch,
             z->loss, z->test_accuracy);
    st = troupe_curve_plot_panels_png(&top, &bottom, "epoch", title, caption, png_path);
    troupe_free(v);
    return st;
}
