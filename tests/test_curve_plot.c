/* Tests for the learning-curve library of the `troupe` command and the trainer
 * (tools/troupe/curve_plot.h): the CSV reader (good files, each kind of malformed line named by
 * its number, resumed runs that repeat epochs) and the PNG it draws (signature, IHDR size, and
 * read back with cairo: both series drawn in their colours on a white page). */
#define _POSIX_C_SOURCE 200809L
#include "curve_plot.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if TROUPE_TEST_HAVE_CAIRO
#include <cairo.h>
#endif

#define S_GOOD                                                                                     \
    TROUPE_CURVE_HEADER "\n"                                                                       \
                        "1,0.612300,0.781200,20512.3,2.950\n"                                      \
                        "2,0.420100,0.832000,21000.0,5.800\n"                                      \
                        "3,0.371000,0.851100,20800.5,8.700\n"                                      \
                        "4,0.340500,0.860300,20950.1,11.600\n"

/* Writes text to a fresh file in the build tree; returns its path (static storage per slot). */
static const char *s_file(int slot, const char *text)
{
    static char paths[4][512];
    snprintf(paths[slot], sizeof paths[slot], "%s/curve_plot_%d_%ld.csv", TROUPE_TEST_BUILD_DIR,
             slot, (long)getpid());
    FILE *f = fopen(paths[slot], "w");
    cr_assert(f != NULL, "cannot write %s", paths[slot]);
    fputs(text, f);
    fclose(f);
    return paths[slot];
}

Test(curve_plot, reads_rows)
{
    troupe_curve_t c;
    cr_assert_eq(troupe_curve_read(s_file(0, S_GOOD), &c), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(c.n, 4);
    cr_assert_eq(c.rows[0].epoch, 1);
    cr_assert_float_eq(c.rows[0].loss, 0.6123, 1e-12);
    cr_assert_float_eq(c.rows[3].test_accuracy, 0.8603, 1e-12);
    cr_assert_float_eq(c.rows[2].samples_per_s, 20800.5, 1e-9);
    cr_assert_float_eq(c.rows[3].seconds, 11.6, 1e-12);
    troupe_curve_free(&c);
    cr_assert_null(c.rows);
}

Test(curve_plot, crlf_and_blank_lines)
{
    troupe_curve_t c;
    const char *p = s_file(0, TROUPE_CURVE_HEADER "\r\n1,0.5,0.7,100,1\r\n\r\n2,0.4,0.8,100,2\r\n");
    cr_assert_eq(troupe_curve_read(p, &c), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(c.n, 2);
    troupe_curve_free(&c);
}

/* A resumed run repeats epochs: the later rows replace the earlier ones from there on. */
Test(curve_plot, resumed_rows_replace)
{
    troupe_curve_t c;
    const char *p = s_file(0, TROUPE_CURVE_HEADER "\n1,0.5,0.70,100,1\n2,0.4,0.75,100,2\n"
                                                  "3,0.3,0.80,100,3\n2,0.45,0.74,90,2.5\n"
                                                  "3,0.35,0.79,90,3.5\n");
    cr_assert_eq(troupe_curve_read(p, &c), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(c.n, 3);
    cr_assert_float_eq(c.rows[1].loss, 0.45, 1e-12);
    cr_assert_float_eq(c.rows[2].loss, 0.35, 1e-12);
    troupe_curve_free(&c);
}

/* Each malformed file fails with INVALID_ARGUMENT and "<path>:<line>: <problem>". */
Test(curve_plot, malformed_names_the_line)
{
    static const struct {
        const char *text;
        int line;
        const char *problem;
    } cases[] = {
        {"", 1, "empty file: expected the header"},
        {"epoch,loss\n1,2\n", 1, "expected the header 'epoch,loss,test_accuracy"},
        {TROUPE_CURVE_HEADER "\n", 1, "no data row after the header"},
        {TROUPE_CURVE_HEADER "\n1,0.5,0.7,100,1\n2,0.4,0.8,100\n", 3, "expected 5 fields"},
        {TROUPE_CURVE_HEADER "\n1,0.5,0.7,100,1,9\n", 2, "expected 5 fields"},
        {TROUPE_CURVE_HEADER "\n1,abc,0.7,100,1\n", 2, "field loss: expected a finite number"},
        {TROUPE_CURVE_HEADER "\n1,0.5,1.5,100,1\n", 2,
         "field test_accuracy: expected a number in [0, 1], got '1.5'"},
        {TROUPE_CURVE_HEADER "\n1.5,0.5,0.7,100,1\n", 2, "field epoch: expected an integer >= 1"},
        {TROUPE_CURVE_HEADER "\n0,0.5,0.7,100,1\n", 2, "field epoch"},
        {TROUPE_CURVE_HEADER "\n1,nan,0.7,100,1\n", 2, "field loss"},
        {TROUPE_CURVE_HEADER "\n1,0.5,0.7,-3,1\n", 2, "field samples_per_s"},
        {TROUPE_CURVE_HEADER "\n1,0.5,0.7,100,\n", 2, "field seconds"},
        {TROUPE_CURVE_HEADER "\n1,0.5,0.7,100,1\n\n4,0.5,0.7,1e999,1\n", 4, "field samples_per_s"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        troupe_curve_t c;
        const char *p = s_file(1, cases[i].text);
        cr_assert_eq(troupe_curve_read(p, &c), TROUPE_INVALID_ARGUMENT, "case %zu", i);
        char want[600];
        snprintf(want, sizeof want, "%s:%d: ", p, cases[i].line);
        cr_assert(strncmp(troupe_last_error(), want, strlen(want)) == 0,
                  "case %zu: '%s' does not start with '%s'", i, troupe_last_error(), want);
        cr_assert(strstr(troupe_last_error(), cases[i].problem) != NULL,
                  "case %zu: '%s' lacks '%s'", i, troupe_last_error(), cases[i].problem);
        troupe_curve_free(&c);
    }
}

/* Control bytes of a bad CSV are quoted escaped ("\\x1b", "\\t"): none reaches the terminal raw. */
Test(curve_plot, control_bytes_are_escaped)
{
    static const struct {
        const char *text;
        const char *shown;
    } cases[] = {
        {"\x1b[2J\x1b[31mepoch\tloss\n", "got '\\x1b[2J\\x1b[31mepoch\\tloss'"},
        {TROUPE_CURVE_HEADER "\n1,\x1b]0;owned\x07,0.7,100,1\n",
         "field loss: expected a finite number >= 0, got '\\x1b]0;owned\\x07'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        troupe_curve_t c;
        const char *p = s_file(1, cases[i].text);
        cr_assert_eq(troupe_curve_read(p, &c), TROUPE_INVALID_ARGUMENT, "case %zu", i);
        const char *msg = troupe_last_error();
        cr_assert(strstr(msg, cases[i].shown), "case %zu: '%s' lacks '%s'", i, msg, cases[i].shown);
        for (const char *q = msg; *q; q++)
            cr_assert((unsigned char)*q >= 0x20 && (unsigned char)*q != 0x7f,
                      "case %zu: a raw control byte 0x%02x", i, (unsigned char)*q);
        troupe_curve_free(&c);
    }
}

Test(curve_plot, missing_file)
{
    troupe_curve_t c;
    cr_assert_eq(troupe_curve_read("/nonexistent/curve.csv", &c), TROUPE_NOT_FOUND);
    cr_assert(strstr(troupe_last_error(), "/nonexistent/curve.csv: cannot open") != NULL, "%s",
              troupe_last_error());
}

Test(curve_plot, add_checks_ranges)
{
    troupe_curve_t c = {0};
    troupe_curve_row_t bad = {1, 0.5, 1.2, 10, 1};
    cr_assert_eq(troupe_curve_add(&c, &bad), TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "test_accuracy") != NULL);
    cr_assert_eq(c.n, 0);
    troupe_curve_free(&c);
}

static uint32_t s_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Counts the pixels within `tol` of an RGB colour in an RGB24/ARGB32 cairo image. */
#if TROUPE_TEST_HAVE_CAIRO
static long s_pixels_near(cairo_surface_t *s, int r, int g, int b, int tol)
{
    int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
    int stride = cairo_image_surface_get_stride(s);
    const unsigned char *data = cairo_image_surface_get_data(s);
    long n = 0;
    for (int y = 0; y < h; y++) {
        const uint32_t *row = (const uint32_t *)(data + (size_t)y * (size_t)stride);
        for (int x = 0; x < w; x++) {
            int pr = (int)(row[x] >> 16 & 0xff), pg = (int)(row[x] >> 8 & 0xff),
                pb = (int)(row[x] & 0xff);
            n += abs(pr - r) <= tol && abs(pg - g) <= tol && abs(pb - b) <= tol;
        }
    }
    return n;
}
#endif

Test(curve_plot, draws_png)
{
    troupe_curve_t c;
    cr_assert_eq(troupe_curve_read(s_file(0, S_GOOD), &c), TROUPE_OK, "%s", troupe_last_error());
    char png[512];
    snprintf(png, sizeof png, "%s/curve_plot_%ld.png", TROUPE_TEST_BUILD_DIR, (long)getpid());
    troupe_status_t st = troupe_curve_plot_png(&c, "test curve", png);
    if (!troupe_curve_plot_available()) {
        cr_assert_eq(st, TROUPE_UNIMPLEMENTED);
        cr_assert(strstr(troupe_last_error(), "without cairo") != NULL);
        troupe_curve_free(&c);
        cr_skip_test("built without cairo: no PNG to check");
    }
    cr_assert_eq(st, TROUPE_OK, "%s", troupe_last_error());
    /* the file: PNG signature, then the IHDR chunk with the size */
    FILE *f = fopen(png, "rb");
    cr_assert(f != NULL);
    unsigned char head[33];
    cr_assert_eq(fread(head, 1, sizeof head, f), sizeof head);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    cr_assert(memcmp(head, sig, 8) == 0, "no PNG signature");
    cr_assert(memcmp(head + 12, "IHDR", 4) == 0);
    cr_assert_eq(s_be32(head + 16), 900);
    cr_assert_eq(s_be32(head + 20), 640);
    cr_assert_gt(size, 8000, "a %ld-byte PNG is too small to hold two panels of text", size);
    /* no temporary left beside it */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", png, (long)getpid());
    cr_assert_neq(access(tmp, F_OK), 0);
#if TROUPE_TEST_HAVE_CAIRO
    cairo_surface_t *s = cairo_image_surface_create_from_png(png);
    cr_assert_eq(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
    long total = 900L * 640, white = s_pixels_near(s, 255, 255, 255, 0);
    long blue = s_pixels_near(s, 31, 102, 178, 12), orange = s_pixels_near(s, 217, 94, 3, 12);
    cr_assert_gt(white, total / 2, "the page is not mostly white (%ld of %ld)", white, total);
    cr_assert_lt(white, total - 5000, "the page is nearly blank (%ld white of %ld)", white, total);
    cr_assert_gt(blue, 500, "the loss series is missing (%ld blue pixels)", blue);
    cr_assert_gt(orange, 500, "the accuracy series is missing (%ld orange pixels)", orange);
    cairo_surface_destroy(s);
#endif
    unlink(png);
    troupe_curve_free(&c);
}

/* One epoch (a flat range) still draws. */
Test(curve_plot, single_epoch)
{
    if (!troupe_curve_plot_available())
        cr_skip_test("built without cairo");
    troupe_curve_t c = {0};
    troupe_curve_row_t row = {1, 0.5, 0.8, 100, 1};
    cr_assert_eq(troupe_curve_add(&c, &row), TROUPE_OK);
    char png[512];
    snprintf(png, sizeof png, "%s/curve_plot_one_%ld.png", TROUPE_TEST_BUILD_DIR, (long)getpid());
    cr_assert_eq(troupe_curve_plot_png(&c, NULL, png), TROUPE_OK, "%s", troupe_last_error());
    cr_assert_eq(access(png, R_OK), 0);
    unlink(png);
    troupe_curve_free(&c);
}

Test(curve_plot, unwritable_png)
{
    if (!troupe_curve_plot_available())
        cr_skip_test("built without cairo");
    troupe_curve_t c = {0};
    troupe_curve_row_t row = {1, 0.5, 0.8, 100, 1};
    cr_assert_eq(troupe_curve_add(&c, &row), TROUPE_OK);
    cr_assert_eq(troupe_curve_plot_png(&c, NULL, "/nonexistent/dir/x.png"), TROUPE_UNAVAILABLE);
    cr_assert(strstr(troupe_last_error(), "/nonexistent/dir/x.png") != NULL, "%s",
              troupe_last_error());
    troupe_curve_free(&c);
}

/* The panels API (any run's curve, examples/gpt's): the points are checked, naming the panel
 * and point, before anything is drawn; one panel alone draws the whole page in its colour. */
Test(curve_plot, panels_checked)
{
    const double x[3] = {0, 1, 2}, y[3] = {5.5, 5.1, 4.9}, back[3] = {0, 2, 1};
    const double bad[3] = {5.5, NAN, 4.9};
    troupe_plot_panel_t top = {x, y, 3, "training loss", false};
    troupe_plot_panel_t empty = {NULL, NULL, 0, "training loss", false};
    troupe_plot_panel_t nan_y = {x, bad, 3, "validation loss", false};
    troupe_plot_panel_t decreasing = {back, y, 3, "validation loss", false};
    const char *png = "/nonexistent/dir/never.png";
    cr_assert_eq(troupe_curve_plot_panels_png(&empty, NULL, "step", NULL, NULL, png),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "top panel has no points") != NULL, "%s",
              troupe_last_error());
    cr_assert_eq(troupe_curve_plot_panels_png(&top, &nan_y, "step", NULL, NULL, png),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "bottom panel's point 1") != NULL, "%s",
              troupe_last_error());
    cr_assert_eq(troupe_curve_plot_panels_png(&top, &decreasing, "step", NULL, NULL, png),
                 TROUPE_INVALID_ARGUMENT);
    cr_assert(strstr(troupe_last_error(), "decrease at point 2") != NULL, "%s",
              troupe_last_error());
    cr_assert_eq(troupe_curve_plot_panels_png(&top, NULL, NULL, NULL, NULL, png),
                 TROUPE_INVALID_ARGUMENT);
}

Test(curve_plot, one_panel)
{
    if (!troupe_curve_plot_available())
        cr_skip_test("built without cairo");
    const double x[4] = {0, 1, 2, 3}, y[4] = {5.5, 5.1, 4.9, 4.6};
    troupe_plot_panel_t top = {x, y, 4, "training loss", false};
    troupe_plot_panel_t none = {NULL, NULL, 0, "validation loss", false};
    char png[512];
    snprintf(png, sizeof png, "%s/curve_plot_panel_%ld.png", TROUPE_TEST_BUILD_DIR,
             (long)getpid());
    cr_assert_eq(troupe_curve_plot_panels_png(&top, &none, "step", "gpt", "step 3: loss 4.6", png),
                 TROUPE_OK, "%s", troupe_last_error());
#if TROUPE_TEST_HAVE_CAIRO
    cairo_surface_t *s = cairo_image_surface_create_from_png(png);
    cr_assert_eq(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
    long blue = s_pixels_near(s, 31, 102, 178, 12), orange = s_pixels_near(s, 217, 94, 3, 12);
    cr_assert_gt(blue, 500, "the loss series is missing (%ld blue pixels)", blue);
    cr_assert_eq(orange, 0, "an empty bottom panel was drawn (%ld orange pixels)", orange);
    cairo_surface_destroy(s);
#else
    cr_assert_eq(access(png, R_OK), 0);
#endif
    unlink(png);
}
