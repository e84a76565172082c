/* troupe — the learning curve of a training run: the CSV the trainer writes (examples/fmnist
 * `--curve`) read back, and drawn as a PNG with cairo (`troupe plot`, the trainer's `--plot`).
 *
 * The CSV: the header `epoch,loss,test_accuracy,samples_per_s,seconds`, then one row per
 * epoch: epoch an integer >= 1; loss a finite number >= 0; test_accuracy in [0, 1];
 * samples_per_s and seconds finite and >= 0. Blank lines and a trailing `\r` are allowed.
 * A run resumed from a checkpoint appends to the same file; when a row's epoch is not after
 * the previous row's (a run resumed from an earlier checkpoint repeats epochs), the later rows
 * replace the earlier ones from that epoch on.
 *
 * The picture: two panels sharing the epoch axis, the training loss above and the test
 * accuracy below, each with its own value axis, ticks at round values and a light grid.
 * cairo (libcairo2-dev) draws it: it reports failures as status codes and never exits, loads
 * no plug-in at run time, and is already a dependency of most Debian desktops (PLplot's PNG
 * output goes through a driver loaded at run time, from another package, and its plexit()
 * ends the process on an internal error). Built without cairo (TROUPE_WITH_CAIRO), the reader
 * still works and troupe_curve_plot_png returns UNIMPLEMENTED.
 *
 * Thread safety: reentrant (no shared state).
 * Ownership: a troupe_curve_t owns its rows; troupe_curve_free releases them.
 */
#ifndef TROUPE_TOOLS_CURVE_PLOT_H
#define TROUPE_TOOLS_CURVE_PLOT_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CSV header, without its newline. */
#define TROUPE_CURVE_HEADER "epoch,loss,test_accuracy,samples_per_s,seconds"
/* The longest line troupe_curve_read accepts (a row is five numbers). */
#define TROUPE_CURVE_LINE_MAX 1024

/* One epoch of the curve: the fields of one CSV row. */
typedef struct troupe_curve_row {
    int epoch;
    double loss, test_accuracy, samples_per_s, seconds;
} troupe_curve_row_t;

/* The rows in epoch order (zero-initialise an empty one). */
typedef struct troupe_curve {
    troupe_curve_row_t *rows;
    size_t n, cap;
} troupe_curve_t;

/* Reads a curve CSV into *out (initialised here; free it with troupe_curve_free, also after a
 * failure). Errors, message "<path>:<line>: <problem>" (line counted from 1):
 * NOT_FOUND (cannot open: the OS's reason), INVALID_ARGUMENT (a header other than
 * TROUPE_CURVE_HEADER, a row with another number of fields, a field that is not a number or
 * out of its range, no data row, a line over TROUPE_CURVE_LINE_MAX bytes or with a NUL byte, a
 * path that is not a regular file: a device, a FIFO, a directory), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_curve_read(const char *path, troupe_curve_t *out);

/* Appends a row, or replaces the rows from row->epoch on when it is not after the last one
 * (see the header). Errors: INVALID_ARGUMENT (a field out of its range, as the reader checks),
 * RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t troupe_curve_add(troupe_curve_t *c, const troupe_curve_row_t *row);

/* Releases the rows and empties *c (NULL-safe). */
void troupe_curve_free(troupe_curve_t *c);

/* True when this build draws PNGs (it found cairo). */
bool troupe_curve_plot_available(void);

/* Draws the curve (at least one row) as a PNG of 900x640 pixels, `title` above the panels
 * (may be NULL), written to `png_path` through a temporary file beside it renamed into place,
 * so a reader never sees a partial picture. Errors: INVALID_ARGUMENT (no rows, NULL path),
 * UNIMPLEMENTED (built without cairo), UNAVAILABLE (cairo could not draw or write: its reason
 * and the path). */
TROUPE_MUST_USE troupe_status_t troupe_curve_plot_png(const troupe_curve_t *c, const char *title,
                                                      const char *png_path);

/* One panel of a picture: n points (x[i], y[i]), finite, x not decreasing, drawn as a line
 * (with markers up to 60 points); `name` labels its value axis; `unit` keeps that axis within
 * [0, 1] (an accuracy). The arrays are the caller's. */
typedef struct troupe_plot_panel {
    const double *x, *y;
    size_t n;
    const char *name;
    bool unit;
} troupe_plot_panel_t;

/* Draws `top` and, below it on the same x axis, `bottom` (NULL or no points: `top` alone,
 * full height) as a PNG of 900x640 pixels: `title` (NULL: "learning curve") and `caption`
 * (NULL: none) above, `x_name` below, written as troupe_curve_plot_png writes. The picture
 * of any run's curve, not only the CSV above (examples/gpt: loss per step, validation loss).
 * Errors: INVALID_ARGUMENT (NULL top, x_name or path; a top panel without points; a point not
 * finite or x decreasing, naming the panel and point), UNIMPLEMENTED (built without cairo),
 * UNAVAILABLE (cairo could not draw or write). */
TROUPE_MUST_USE troupe_status_t troupe_curve_plot_panels_png(const troupe_plot_panel_t *top,
                                                             const troupe_plot_panel_t *bottom,
                                                             const char *x_name,
                                                             const char *title,
                                                             const char *caption,
                                                             const char *png_path);

#ifdef __cplusplus
}
#endif
#endif
