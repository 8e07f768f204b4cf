/* Least-squares fit of the batch optimizer's memory model (batchopt_model.h). */
#include "tune/batchopt_model.h"

#include <math.h>
#include <string.h>

/* Below this RMS difference (fraction of the device) two forms are equally
 * good: noise, not evidence. */
#define BO_RMS_FLOOR 0.003
/* A slope is believed only when it explains a usage difference this large
 * between the points: smaller ones are within the noise of window peaks. */
#define BO_MIN_SIGNAL 0.01
/* Usage a failed setting needed at least: the whole device. */
#define BO_FAILED_USAGE 1.0

static double g_of(const bo_model_t *m, int form, int lq)
{
    if (m->max_lq <= 0) return 1.0;
    double u = (double)lq / m->max_lq;
    return form == 0 ? u : u * u;
}

static double x_of(const bo_model_t *m, int form, int batch, int lq)
{
    return batch * g_of(m, form, lq);
}

static void fit(bo_model_t *m)
{
    int forms = m->max_lq > 0 ? BO_FORMS : 1;
    const bo_point_t *last = &m->pts[m->npts - 1];
    double best_rms = INFINITY;
    for (int f = 0; f < forms; f++) {
        double sx = 0, sy = 0, sxx = 0, sxy = 0;
        for (int i = 0; i < m->npts; i++) {
            double x = x_of(m, f, m->pts[i].batch, m->pts[i].lq), y = m->pts[i].peak;
            sx += x, sy += y, sxx += x * x, sxy += x * y;
        }
        double n = m->npts, var = sxx - sx * sx / n, b = 0, rms = 0;
        double xmin = INFINITY, xmax = 0;
        for (int i = 0; i < m->npts; i++) {
            double x = x_of(m, f, m->pts[i].batch, m->pts[i].lq);
            xmin = x < xmin ? x : xmin;
            xmax = x > xmax ? x : xmax;
        }
        if (m->npts >= 2 && var > 1e-12 * (sxx > 0 ? sxx : 1)) {
            b = (sxy - sx * sy / n) / var;
            double a_ls = (sy - b * sx) / n;
            for (int i = 0; i < m->npts; i++) {
                double r = m->pts[i].peak - a_ls - b * x_of(m, f, m->pts[i].batch, m->pts[i].lq);
                rms += r * r;
            }
            rms = sqrt(rms / n);
            if (b * (xmax - xmin) < BO_MIN_SIGNAL) b = 0;
        }
        if (!(b > 0)) b = m->have_prior ? m->prior_b[f] : 0, rms = 0;
        m->learned_b[f] = b; /* what a later epoch may start from */
        /* No slope learned yet: assume everything scales with the setting
         * (a = 0), which overstates growth and so errs on the safe side. */
        double xl = x_of(m, f, last->batch, last->lq);
        if (!(b > 0)) b = xl > 0 ? last->peak / xl : 0;
        /* Every failed setting beyond the latest needed the whole device: a
         * slope that says otherwise is too shallow. */
        for (int i = 0; i < m->nfailed; i++) {
            double xf = x_of(m, f, m->failed[i].batch, m->failed[i].lq);
            if (xf > xl && b * (xf - xl) < BO_FAILED_USAGE - last->peak)
                b = (BO_FAILED_USAGE - last->peak) / (xf - xl);
        }
        m->b[f] = b;
        /* The latest window is the truth about the present: anchor on it. */
        m->a[f] = last->peak - b * xl;
        m->rms[f] = rms;
        if (rms < best_rms) best_rms = rms;
    }
    for (int f = 0; f < BO_FORMS; f++)
        m->plausible[f] = f < forms && (m->npts >= 3 ? m->rms[f] <= 2 * best_rms + BO_RMS_FLOOR
                                                     : !m->have_prior || m->prior_plausible[f]);
    m->fitted = true;
}

void bo_model_init(bo_model_t *m, int max_lq)
{
    memset(m, 0, sizeof *m);
    m->max_lq = max_lq;
}

void bo_model_new_epoch(bo_model_t *m)
{
    if (m->fitted) {
        for (int f = 0; f < BO_FORMS; f++) {
            m->prior_b[f] = m->learned_b[f];
            m->prior_plausible[f] = m->plausible[f];
        }
        m->have_prior = true;
    }
    m->npts = 0;
}

void bo_model_add(bo_model_t *m, int batch, int lq, double peak, double shift_tol)
{
    if (m->npts > 0) {
        const bo_point_t *last = &m->pts[m->npts - 1];
        if (last->batch == batch && last->lq == lq && fabs(last->peak - peak) > shift_tol) {
            if (peak < last->peak) m->nfailed = 0; /* memory was freed: failures may fit now */
            bo_model_new_epoch(m);
        }
    }
    for (int i = 0; i < m->npts; i++) /* one point per setting: the latest */
        if (m->pts[i].batch == batch && m->pts[i].lq == lq) {
            memmove(&m->pts[i], &m->pts[i + 1], (size_t)(m->npts - i - 1) * sizeof m->pts[0]);
            m->npts--;
            break;
        }
    if (m->npts == BO_POINTS) {
        memmove(&m->pts[0], &m->pts[1], (BO_POINTS - 1) * sizeof m->pts[0]);
        m->npts--;
    }
    m->pts[m->npts++] = (bo_point_t){batch, lq, peak};
    fit(m);
}

void bo_model_failed(bo_model_t *m, int batch, int lq)
{
    if (m->nfailed == BO_POINTS) {
        memmove(&m->failed[0], &m->failed[1], (BO_POINTS - 1) * sizeof m->failed[0]);
        m->nfailed--;
    }
    m->failed[m->nfailed++] = (bo_point_t){batch, lq, BO_FAILED_USAGE};
    bo_model_floor(m, batch, lq, BO_FAILED_USAGE);
}

bool bo_model_dominates_failure(const bo_model_t *m, int batch, int lq)
{
    for (int i = 0; i < m->nfailed; i++)
        if (batch >= m->failed[i].batch && lq >= m->failed[i].lq) return true;
    return false;
}

void bo_model_floor(bo_model_t *m, int batch, int lq, double usage)
{
    if (!m->fitted) return;
    for (int f = 0; f < BO_FORMS; f++) {
        double need = usage - m->b[f] * x_of(m, f, batch, lq);
        if (m->a[f] < need) m->a[f] = need;
    }
}

static double predict(const bo_model_t *m, int batch, int lq, double sign)
{
    if (!m->fitted) return 0;
    double best = -INFINITY;
    for (int f = 0; f < BO_FORMS; f++)
        if (m->plausible[f]) {
            double p = sign * (m->a[f] + m->b[f] * x_of(m, f, batch, lq));
            if (p > best) best = p;
        }
    return sign * best;
}

double bo_model_predict(const bo_model_t *m, int batch, int lq)
{
    return predict(m, batch, lq, 1);
}

double bo_model_predict_low(const bo_model_t *m, int batch, int lq)
{
    return predict(m, batch, lq, -1);
}

bool bo_model_quadratic(const bo_model_t *m)
{
    return m->max_lq > 0 && m->plausible[1] && !m->plausible[0];
}

bool bo_model_has_slope(const bo_model_t *m)
{
    for (int f = 0; f < BO_FORMS; f++)
        if (m->plausible[f] && m->learned_b[f] > 0) return true;
    return false;
}
