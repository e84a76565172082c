/* troupe plot CURVE.csv [-o FILE.png] — draws the trainer's learning curve (the CSV of
 * examples/fmnist --curve: epoch,loss,test_accuracy,samples_per_s,seconds) as a PNG: training
 * loss and test accuracy per epoch, two panels (curve_plot.h). The picture goes to FILE.png,
 * by default CURVE's name with `.png` in place of `.csv` (or added). Prints
 * `plot: FILE.png (N epochs)` on success.
 *
 * Exit status: 0 drawn; 1 the CSV cannot be read or is malformed (one line naming the file and
 * line), the PNG cannot be written, or this build has no cairo; 2 usage error.
 */
#include "cmd_impl.h"
#include "curve_plot.h"

#include "base/alloc.h"

#include <stdio.h>
#include <string.h>

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: troupe plot CURVE.csv [-o FILE.png]\n"
            "Draws training loss and test accuracy per epoch from the trainer's --curve CSV\n"
            "(%s) as a PNG; FILE.png defaults to CURVE with .png for .csv.%s\n"
            "exit status: 0 drawn, 1 unreadable or malformed CSV or unwritable PNG, 2 usage\n",
            TROUPE_CURVE_HEADER,
            troupe_curve_plot_available() ? "" : "\n(this build has no cairo: it cannot draw)");
}

/* CSV path with .png in place of a final .csv, or .png appended. Caller frees (troupe_free). */
static char *s_default_png(const char *csv)
{
    size_t n = strlen(csv);
    if (n > 4 && strcmp(csv + n - 4, ".csv") == 0)
        n -= 4;
    return troupe_strdup_printf("%.*s.png", (int)n, csv);
}

int troupe__cmd_plot(int argc, char **argv)
{
    const char *csv = NULL, *png = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            s_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc || !*argv[i + 1]) {
                fprintf(stderr, "troupe plot: option %s needs a file name\n", a);
                return 2;
            }
            png = argv[++i];
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "troupe plot: unknown option '%s'; try 'troupe plot --help'\n", a);
            return 2;
        } else if (csv) {
            fprintf(stderr, "troupe plot: one CSV file only (got '%s' and '%s')\n", csv, a);
            return 2;
        } else {
            csv = a;
        }
    }
    if (!csv) {
        s_usage(stderr);
        return 2;
    }
    int code = 1;
    char *dflt = png ? NULL : s_default_png(csv);
    troupe_curve_t curve;
    if (troupe_curve_read(csv, &curve) != TROUPE_OK) {
        fprintf(stderr, "troupe plot: %s\n", troupe_last_error());
        goto out_curve;
    }
    if (!png && !(png = dflt)) {
        fprintf(stderr, "troupe plot: out of memory\n");
        goto out_curve;
    }
    const char *slash = strrchr(csv, '/');
    if (troupe_curve_plot_png(&curve, slash ? slash + 1 : csv, png) != TROUPE_OK) {
        fprintf(stderr, "troupe plot: %s\n", troupe_last_error());
        goto out_curve;
    }
    printf("plot: %s (%zu epoch%s)\n", png, curve.n, curve.n == 1 ? "" : "s");
    code = fflush(stdout) == 0 ? 0 : 1;
out_curve:
    troupe_curve_free(&curve);
    troupe_free(dflt);
    return code;
}
