/* The batch optimizer's memory model: usage = a + b * batch * g(lq), fitted
 * to window peaks, with g(lq) = lq (linear) or lq^2 (quadratic) in units of
 * max_lq, or either plus a constant r (memory per sample that lq does not
 * change: labels, per-sample buffers). Predictions take the largest of the forms the data cannot
 * rule out, so an unproven form never pushes the settings up too far. */
#ifndef VRAM_TUNE_BATCHOPT_MODEL_H
#define VRAM_TUNE_BATCHOPT_MODEL_H

#include <stdbool.h>

#define BO_POINTS 8 /* distinct settings remembered per epoch */
/* 0: g linear in lq, 1: quadratic; 2 and 3: the same plus memory per sample
 * that does not depend on lq (g = r + lq or r + lq^2, r >= 0 fitted). */
#define BO_FORMS 4

typedef struct {
    int batch, lq;
    double peak, mean, se; /* of the latest window at the setting; se: of its mean */
    double ref_mean;       /* of the first window at it (shift detection) */
} bo_point_t;

typedef struct {
    int max_lq;                /* 0: batch only, g = 1 */
    bo_point_t pts[BO_POINTS]; /* this epoch's settings, oldest first */
    int npts;
    bo_point_t failed[BO_POINTS]; /* settings that ran out of memory, oldest first */
    int nfailed;
    bo_point_t over[BO_POINTS]; /* settings above target in this epoch */
    int nover;
    bool have_prior; /* slopes carried over from an earlier epoch */
    double prior_b[BO_FORMS], prior_r[BO_FORMS];
    bool prior_plausible[BO_FORMS];
    double a[BO_FORMS], b[BO_FORMS];
    double r[BO_FORMS];         /* per-sample memory independent of lq, in units of b */
    bool usable[BO_FORMS];      /* forms 2, 3: r was fitted (4 points, both terms positive) */
    double learned_b[BO_FORMS]; /* slope from data (or the prior), 0 = none yet */
    double rms[BO_FORMS];
    double worst[BO_FORMS], last_res[BO_FORMS]; /* largest residual; the latest point's */
    bool plausible[BO_FORMS];
    bool fitted;
    int epoch; /* counts new epochs */
} bo_model_t;

void vram_bomodel_init(bo_model_t *m, int max_lq);
/* Adds a window's peak and mean at a setting. A mean that differs from the last one at
 * the same setting by more than shift_tol means the surroundings changed
 * (another job, fragmentation): a new epoch starts that keeps the slopes. */
void vram_bomodel_add(bo_model_t *m, int batch, int lq, double peak, double mean, double se,
                      double shift_tol);
/* Starts a new epoch keeping the slopes (after an OOM). */
void vram_bomodel_new_epoch(bo_model_t *m);
/* Records an OOM at a setting: it needed at least the whole device, and
 * settings at or above it in both parameters are out of bounds until a
 * window shows memory was freed. */
void vram_bomodel_failed(bo_model_t *m, int batch, int lq);
/* Records a window above target at a setting, with its peak: growth does
 * not return to it (or above it) in this epoch, which ends oscillation when
 * no setting falls inside the dead band, and later fits predict at least that
 * peak there. */
void vram_bomodel_over(bo_model_t *m, int batch, int lq, double peak);
/* A window at (batch, lq) ran under target: failures and over-target marks
 * at or below it are stale (the surroundings changed). */
void vram_bomodel_fine(bo_model_t *m, int batch, int lq);
/* True when (batch, lq) is at or above a failed or over-target setting. */
bool vram_bomodel_dominates_failure(const bo_model_t *m, int batch, int lq);
/* Raises the intercepts so that (batch, lq) predicts at least `usage`. */
void vram_bomodel_floor(bo_model_t *m, int batch, int lq, double usage);
/* Predicted peak usage; 0 before any point. */
double vram_bomodel_predict(const bo_model_t *m, int batch, int lq);
/* The latest peak scaled as if all memory grew with batch * g(lq) (the
 * steeper form): the worst case when nothing is known. */
double vram_bomodel_scaled(const bo_model_t *m, int batch, int lq);
/* The lowest prediction of the plausible forms. */
double vram_bomodel_predict_low(const bo_model_t *m, int batch, int lq);
/* True when a plausible form has a slope learned from this epoch's points. */
bool vram_bomodel_has_slope(const bo_model_t *m);
/* has_slope, or an earlier epoch learned one (the job's memory per sample
 * rarely changes when its surroundings do): enough to pick over the grid. */
bool vram_bomodel_knows_slope(const bo_model_t *m);
/* The plausible form with the smallest largest residual; -1 before a fit. */
int vram_bomodel_best_form(const bo_model_t *m);
/* True when the best form is quadratic and its linear twin is ruled out. */
bool vram_bomodel_quadratic(const bo_model_t *m);

#endif
