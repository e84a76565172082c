/* gpt train's learning curve: `--curve FILE` (CSV) and `--plot FILE` (PNG, drawn with
 * tools/troupe/curve_plot.h's panels: the training loss per step above, the validation loss
 * below).
 *
 * The CSV: the header GPT_CURVE_HEADER, then one row per step: the step, its training loss,
 * the validation loss measured before that step (the parameters after `step` updates; empty
 * when none ran), and the training seconds so far. The validation after the last step is a
 * row of its own with the loss empty. A resumed run keeps the rows before the step it resumes
 * at and writes the rest.
 *
 * Thread safety: none (rank 0's training loop).
 * Ownership: a gpt_curve_t owns its file and arrays; gpt_curve_close releases them.
 */
#ifndef GPT_CURVE_H
#define GPT_CURVE_H

#include "base/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define GPT_CURVE_HEADER "step,loss,val_loss,seconds"

typedef struct gpt_curve {
    FILE *f;
    const char *csv, *png; /* the caller's strings; either may be NULL */
    double *sx, *sy;       /* training loss per step */
    size_t sn, scap;
    double *vx, *vy; /* validation loss */
    size_t vn, vcap;
    double seconds0; /* the kept rows' last seconds (a resumed run) */
    char title[200];
    bool warned; /* a plot failure was reported once */
} gpt_curve_t;

/* Checks, without writing, that an existing `csv` is a gpt curve (its first line the header)
 * and an existing `png` a PNG picture, so neither overwrites another file. Either may be
 * NULL. Errors: INVALID_ARGUMENT naming the option, the path and the problem. */
TROUPE_MUST_USE troupe_status_t gpt_curve_check(const char *csv, const char *png);

/* Opens the curve (*c initialised here): for a run resuming at step `first` (> 0), keeps the
 * existing CSV's rows before it; writes the CSV afresh. Errors: FAILED_PRECONDITION (cannot
 * write csv: the OS's reason), INVALID_ARGUMENT (a malformed row to keep), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t gpt_curve_open(gpt_curve_t *c, const char *csv, const char *png,
                                               long long first, const char *title);

/* Records a step: `loss` its training loss, `val` the validation before it (NAN: none; a
 * step with NAN loss records a validation alone), `seconds` this run's training time so far. Writes the row (flushed). Errors:
 * FAILED_PRECONDITION (a write error), RESOURCE_EXHAUSTED. */
TROUPE_MUST_USE troupe_status_t gpt_curve_add(gpt_curve_t *c, long long step, double loss,
                                              double val, double seconds);

/* Redraws the picture (when --plot was given and there is a training loss). A failure is
 * reported on stderr once and training goes on. */
void gpt_curve_draw(gpt_curve_t *c);

/* Closes the file and frees the arrays (NULL-safe, idempotent). */
void gpt_curve_close(gpt_curve_t *c);

#endif
