/* fmnist — the live progress bar within an epoch, on a terminal:
 *
 *   epoch 2/10 [=========>          ] 210/468 steps  17688 samples/s  loss 0.4947  ETA 1.8 s
 *
 * steps issued of the epoch's, training rows per second since the epoch started (all ranks,
 * as of the last sampled loss), the mean of the losses sampled so far in the epoch, and the
 * time the rest of the epoch takes at that rate. It is drawn in place (carriage return, erase line)
 * only when stdout is a terminal of our own (run_t.tty in main.c: rank 0, not under a launcher,
 * whose ranks always see a pseudo-terminal), at most every 0.2 s and at each sampled loss, cut to
 * the terminal's width; the epoch line then overwrites it. In a pipe, a file or a CI log nothing is
 * drawn.
 *
 * Thread safety: one thread (the trainer's). Ownership: nothing allocated.
 */
#ifndef FMNIST_PROGRESS_H
#define FMNIST_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fmnist_progress {
    bool tty;         /* draw at all */
    int width;        /* the terminal's columns */
    int epoch;        /* the epoch drawn */
    int64_t first;    /* steps of it done before this run's first call (a resumed epoch) */
    double last_draw; /* seconds (the caller's clock) of the last drawing */
    double rate;      /* rows per second at the last synced step; 0 before it */
    int64_t synced;   /* that step */
    double synced_at; /* and when */
} fmnist_progress_t;

/* Starts a bar that draws only when `tty`; reads the terminal's width (TIOCGWINSZ, else 80). */
void fmnist_progress_init(fmnist_progress_t *p, bool tty);

/* The bar's text (no carriage return) for `width` columns into buf[cap]: see the header.
 * step of steps; rate in rows per second; loss NaN before the first sample and eta_s < 0 when
 * unknown (each then left out). The bar shrinks, then goes, when the terminal is narrow; the
 * text never takes more than width - 1 columns (a full line would wrap on some terminals). */
void fmnist_progress_format(char *buf, size_t cap, int width, int epoch, int epochs, int64_t step,
                            int64_t steps, double rate, double loss, double eta_s);

/* Called after step `step` of `steps` of epoch `epoch` (1-based) was issued: draws the bar
 * when drawing, at a `synced` step (the caller waited for it: its loss was read) and at most
 * every 0.2 s in between. Steps are issued ahead of their execution, so the rate and the ETA
 * come from the last synced step (rows_per_step: the global minibatch); the ETA counts down
 * from there. now and epoch_start in seconds of one clock. */
void fmnist_progress_update(fmnist_progress_t *p, int epoch, int epochs, int64_t step,
                            int64_t steps, int64_t rows_per_step, double loss, double now,
                            double epoch_start, bool synced);

#endif
