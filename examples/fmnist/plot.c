/* fmnist — the learning curve as a PNG (plot.h). */
#define _POSIX_C_SOURCE 200809L
#include "plot.h"

#include "base/file_impl.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool fmnist_plot_open(fmnist_plot_t *p, const char *path, const char *curve, char *err, size_t cap)
{
    p->path = path;
    if (!path)
        return true;
    if (!troupe_curve_plot_available()) {
        snprintf(err, cap,
                 "option --plot: this fmnist was built without cairo (libcairo2-dev): it "
                 "cannot draw");
        return false;
    }
    /* the drawing goes through a temporary beside the file */
    if (troupe__file_check_writable(path) != TROUPE_OK) {
        troupe__format_fit(err, cap, "option --plot: %s", troupe_last_error());
        return false;
    }
    if (curve && access(curve, F_OK) == 0 && troupe_curve_read(curve, &p->rows) != TROUPE_OK) {
        fprintf(stderr, "fmnist: warning: --plot draws this run's epochs only: %s\n",
                troupe_last_error());
        troupe_curve_free(&p->rows);
    }
    return true;
}

troupe_status_t fmnist_plot_epoch(fmnist_plot_t *p, const troupe_curve_row_t *row)
{
    if (!p->path)
        return TROUPE_OK;
    troupe_status_t st = troupe_curve_add(&p->rows, row);
    if (st == TROUPE_OK)
        st = troupe_curve_plot_png(&p->rows, p->title[0] ? p->title : NULL, p->path);
    return st;
}

void fmnist_plot_free(fmnist_plot_t *p)
{
    troupe_curve_free(&p->rows);
}

const char *fmnist_plot_help_note(void)
{
    return troupe_curve_plot_available() ? "" : " (not built: this fmnist has no cairo)";
}
