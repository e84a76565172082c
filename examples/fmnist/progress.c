/* fmnist — the live progress bar (progress.h). */
#define _POSIX_C_SOURCE 200809L
#include "progress.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define S_REDRAW_S 0.2 /* seconds between drawings at most */
#define S_BAR_MAX 30   /* the bar's cells at most */
#define S_BAR_MIN 6    /* fewer cells would fit: no bar */

void fmnist_progress_init(fmnist_progress_t *p, bool tty)
{
    memset(p, 0, sizeof *p);
    p->tty = tty;
    p->width = 80;
    struct winsize ws;
    if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        p->width = ws.ws_col;
}

/* The text after the bar. */
static void s_tail(char *buf, size_t cap, int64_t step, int64_t steps, double rate,
                   const char *loss, const char *eta)
{
    snprintf(buf, cap, " %lld/%lld steps  %.0f samples/s  loss %s  ETA %s", (long long)step,
             (long long)steps, rate, loss, eta);
}

void fmnist_progress_format(char *buf, size_t cap, int width, int epoch, int epochs, int64_t step,
                            int64_t steps, double rate, double loss, double eta_s)
{
    char head[32], tail[160], loss_text[16] = "-", eta_text[16] = "-";
    if (!isnan(loss))
        snprintf(loss_text, sizeof loss_text, "%.4f", loss);
    if (eta_s >= 0)
        snprintf(eta_text, sizeof eta_text, "%.1f s", eta_s < 1e5 ? eta_s : 1e5);
    snprintf(head, sizeof head, "epoch %d/%d", epoch, epochs);
    s_tail(tail, sizeof tail, step, steps, rate, loss_text, eta_text);
    /* the bar's cells from the widest tail of the epoch, so it keeps its length; the whole
     * line within width - 1 columns */
    char widest[160];
    s_tail(widest, sizeof widest, steps, steps, 999999, "0.0000", "999.9 s");
    int cells = width - 1 - (int)strlen(head) - 3 - (int)strlen(widest);
    if (cells > S_BAR_MAX)
        cells = S_BAR_MAX;
    char bar[S_BAR_MAX + 3] = "";
    if (cells >= S_BAR_MIN) {
        int done = steps > 0 ? (int)((double)cells * (double)step / (double)steps) : 0;
        bar[0] = '[';
        for (int i = 0; i < cells; i++)
            bar[1 + i] = i < done ? '=' : i == done ? '>' : ' ';
        bar[1 + cells] = ']';
        bar[2 + cells] = '\0';
    }
    snprintf(buf, cap, "%s %s%s", head, bar, tail);
    if (width > 1 && strlen(buf) > (size_t)width - 1)
        buf[width - 1] = '\0';
}

void fmnist_progress_update(fmnist_progress_t *p, int epoch, int epochs, int64_t step,
                            int64_t steps, int64_t rows_per_step, double loss, double now,
                            double epoch_start, bool synced)
{
    if (!p->tty)
        return;
    if (epoch != p->epoch) { /* a new epoch: nothing measured yet */
        p->epoch = epoch;
        p->rate = 0;
        p->first = step - 1; /* a resumed epoch starts past its beginning */
        p->synced = 0;
        p->synced_at = epoch_start;
        p->last_draw = now;
    }
    if (synced && now > epoch_start) {
        p->rate = (double)((step - p->first) * rows_per_step) / (now - epoch_start);
        p->synced = step;
        p->synced_at = now;
    } else if (now - p->last_draw < S_REDRAW_S) {
        return;
    }
    p->last_draw = now;
    double eta = -1;
    if (p->rate > 0) {
        eta = (double)((steps - p->synced) * rows_per_step) / p->rate - (now - p->synced_at);
        eta = eta > 0 ? eta : 0;
    }
    char line[512];
    fmnist_progress_format(line, sizeof line, p->width, epoch, epochs, step, steps, p->rate, loss,
                           eta);
    printf("\r\033[K%s", line);
    fflush(stdout);
}
