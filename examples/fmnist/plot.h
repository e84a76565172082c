/* fmnist — `--plot FILE`: the learning curve (training loss and test accuracy per epoch) drawn
 * as a PNG after every epoch by rank 0, through tools/troupe/curve_plot.h (cairo), so the file
 * shows the run so far. A resumed run that also writes --curve draws the epochs that file
 * already holds too (a later row replaces an earlier one of the same epoch). A build without
 * cairo refuses the option before any work.
 *
 * Thread safety: one thread. Ownership: fmnist_plot_t owns its rows (fmnist_plot_free).
 */
#ifndef FMNIST_PLOT_H
#define FMNIST_PLOT_H

#include "curve_plot.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct fmnist_plot {
    const char *path; /* --plot FILE (borrowed) or NULL */
    char title[160];
    troupe_curve_t rows;
} fmnist_plot_t;

/* Before any work: can `path` be drawn (cairo built) and written (a file beside it can be
 * created)? With `curve` (the --curve file of a resumed run, may be NULL) its rows are read
 * first; a curve that does not read is a warning on stderr, not a failure. false with one line
 * in err (a bad option). */
bool fmnist_plot_open(fmnist_plot_t *p, const char *path, const char *curve, char *err, size_t cap);

/* Adds an epoch and redraws the PNG. Errors: those of troupe_curve_add and
 * troupe_curve_plot_png. NULL path: nothing (OK). */
troupe_status_t fmnist_plot_epoch(fmnist_plot_t *p, const troupe_curve_row_t *row);

void fmnist_plot_free(fmnist_plot_t *p);

/* " (not built: this fmnist has no cairo)" for --help, or "". */
const char *fmnist_plot_help_note(void);

#endif
