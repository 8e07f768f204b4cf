/* Least-squares fit of the batch optimizer's memory model (batchopt_model.h). */
#include "tune/batchopt_model.h"

#include <math.h>
#include <string.h>

/* Slopes come from window means (a mean of many readings is far less noisy
 * than a peak); the intercept from the latest peak. Below this RMS
 * difference (fraction of the device) two forms are equally good. */
#define BO_RMS_FLOOR 0.002
/* A slope is believed only when the difference of window means it explains
 * stands out of their noise: this many standard errors, and at least
 * BO_MIN_SIGNAL (readings are rounded, so noise can look like zero). */
#define BO_SIGNAL_SE  5.0
#define BO_MIN_SIGNAL 0.001
/* Usage a failed setting needed at least: the whole device. */
#define BO_FAILED_USAGE 1.0

static double g_of(const bo_model_t *m, int form, int lq)
{
    if (m->max_lq <= 0) return 1.0;
    double u = (double)lq / m->max_lq;
    return m->r[form] + (form % 2 == 0 ? u : u * u);
}

/* Forms 2 and 3: usage = a + c * batch + b * batch * g(lq) by least squares
 * over the epoch's means; r = c / b. Needs 4 settings (one more than the
 * parameters, so a form that fits cannot be a mere interpolation) in which
 * batch and batch * g vary independently, and both terms positive. */
static void fit_per_sample(bo_model_t *m, int f)
{
    m->usable[f] = false;
    m->r[f] = 0;
    if (m->npts < 4) return;
    double n = m->npts, s1 = 0, s2 = 0, sy = 0, s11 = 0, s22 = 0, s12 = 0, s1y = 0, s2y = 0;
    for (int i = 0; i < m->npts; i++) {
        double x1 = m->pts[i].batch, x2 = x1 * g_of(m, f, m->pts[i].lq), y = m->pts[i].mean;
        s1 += x1, s2 += x2, sy += y, s11 += x1 * x1, s22 += x2 * x2, s12 += x1 * x2;
        s1y += x1 * y, s2y += x2 * y;
    }
    /* centred normal equations for (c, b) */
    double v11 = s11 - s1 * s1 / n, v22 = s22 - s2 * s2 / n, v12 = s12 - s1 * s2 / n;
    double v1y = s1y - s1 * sy / n, v2y = s2y - s2 * sy / n, det = v11 * v22 - v12 * v12;
    if (!(det > 1e-6 * v11 * v22)) return; /* batch and batch * g move together */
    double c = (v22 * v1y - v12 * v2y) / det, b = (v11 * v2y - v12 * v1y) / det;
    if (!(c > 0 && b > 0)) return;
    m->r[f] = c / b;
    m->usable[f] = true;
}

static double x_of(const bo_model_t *m, int form, int batch, int lq)
{
    return batch * g_of(m, form, lq);
}

/* The slope b, raised so that each setting of list beyond the latest point
 * is predicted at least the peak it was seen with. */
static double steepen(const bo_model_t *m, int f, const bo_point_t *list, int n,
                      const bo_point_t *last, double b)
{
    double xl = x_of(m, f, last->batch, last->lq);
    for (int i = 0; i < n; i++) {
        double xf = x_of(m, f, list[i].batch, list[i].lq);
        if (xf > xl && b * (xf - xl) < list[i].peak - last->peak)
            b = (list[i].peak - last->peak) / (xf - xl);
    }
    return b;
}

static void fit(bo_model_t *m)
{
    int forms = m->max_lq > 0 ? BO_FORMS : 1;
    const bo_point_t *last = &m->pts[m->npts - 1];
    double best_rms = INFINITY;
    m->usable[0] = m->usable[1] = true;
    for (int f = 2; f < forms; f++) {
        m->r[f] = 0;
        fit_per_sample(m, f);
        /* too few settings in this epoch: the previous epoch's r serves */
        if (!m->usable[f] && m->npts < 4 && m->have_prior && m->prior_plausible[f])
            m->r[f] = m->prior_r[f], m->usable[f] = true;
    }
    for (int f = 0; f < forms; f++) {
        if (!m->usable[f]) continue;
        double sx = 0, sy = 0, sxx = 0, sxy = 0;
        for (int i = 0; i < m->npts; i++) {
            double x = x_of(m, f, m->pts[i].batch, m->pts[i].lq), y = m->pts[i].mean;
            sx += x, sy += y, sxx += x * x, sxy += x * y;
        }
        double n = m->npts, var = sxx - sx * sx / n, b = 0, rms = 0, worst = 0, last_res = 0;
        double xmin = INFINITY, xmax = 0, signal = BO_MIN_SIGNAL;
        for (int i = 0; i < m->npts; i++) {
            if (BO_SIGNAL_SE * m->pts[i].se > signal) signal = BO_SIGNAL_SE * m->pts[i].se;
            double x = x_of(m, f, m->pts[i].batch, m->pts[i].lq);
            xmin = x < xmin ? x : xmin;
            xmax = x > xmax ? x : xmax;
        }
        if (m->npts >= 2 && var > 1e-12 * (sxx > 0 ? sxx : 1)) {
            b = (sxy - sx * sy / n) / var;
            double a_ls = (sy - b * sx) / n;
            for (int i = 0; i < m->npts; i++) {
                double r = m->pts[i].mean - a_ls - b * x_of(m, f, m->pts[i].batch, m->pts[i].lq);
                rms += r * r;
                if (fabs(r) > worst) worst = fabs(r);
                last_res = r;
            }
            rms = sqrt(rms / n);
            if (b * (xmax - xmin) < signal) b = 0;
        }
        /* The previous epoch's slope serves until this one has two points. */
        if (!(b > 0)) b = m->have_prior && m->npts == 1 ? m->prior_b[f] : 0, rms = 0;
        m->learned_b[f] = b; /* what a later epoch may start from */
        /* No slope learned yet: assume everything scales with the setting
         * (a = 0), which overstates growth and so errs on the safe side. */
        double xl = x_of(m, f, last->batch, last->lq);
        if (!(b > 0)) b = xl > 0 ? last->peak / xl : 0;
        /* Every failed setting beyond the latest needed the whole device, and
         * every setting seen above target at least its peak: a slope that
         * says otherwise is too shallow (the form does not describe the
         * memory well there, so trust what was seen). */
        b = steepen(m, f, m->failed, m->nfailed, last, b);
        b = steepen(m, f, m->over, m->nover, last, b);
        m->b[f] = b;
        /* The latest window is the truth about the present: anchor on it. */
        m->a[f] = last->peak - b * xl;
        m->rms[f] = rms;
        m->worst[f] = worst;
        m->last_res[f] = last_res;
        if (rms < best_rms) best_rms = rms;
    }
    for (int f = 0; f < BO_FORMS; f++)
        m->plausible[f] = f < forms && m->usable[f] &&
                          (m->npts >= 3 ? m->rms[f] <= 2 * best_rms + BO_RMS_FLOOR
                                        : !m->have_prior || m->prior_plausible[f]);
    m->fitted = true;
}

bool vram_bomodel_has_slope(const bo_model_t *m)
{
    if (m->npts < 2) return false; /* a prior is a guess until this epoch confirms it */
    for (int f = 0; f < BO_FORMS; f++)
        if (m->plausible[f] && m->learned_b[f] > 0) return true;
    return false;
}

bool vram_bomodel_knows_slope(const bo_model_t *m)
{
    if (vram_bomodel_has_slope(m)) return true;
    for (int f = 0; f < BO_FORMS; f++)
        if (m->have_prior && m->prior_plausible[f] && m->prior_b[f] > 0) return true;
    return false;
}

double vram_bomodel_scaled(const bo_model_t *m, int batch, int lq)
{
    if (m->npts == 0) return INFINITY;
    const bo_point_t *last = &m->pts[m->npts - 1];
    double worst = 0;
    for (int f = 0; f < (m->max_lq > 0 ? 2 : 1); f++) {
        double r = x_of(m, f, batch, lq) / x_of(m, f, last->batch, last->lq);
        if (r > worst) worst = r;
    }
    return last->peak * worst;
}

void vram_bomodel_init(bo_model_t *m, int max_lq)
{
    memset(m, 0, sizeof *m);
    m->max_lq = max_lq;
}

void vram_bomodel_new_epoch(bo_model_t *m)
{
    if (m->fitted) {
        for (int f = 0; f < BO_FORMS; f++) {
            m->prior_b[f] = m->learned_b[f];
            m->prior_r[f] = m->r[f];
            m->prior_plausible[f] = m->plausible[f];
        }
        m->have_prior = true;
    }
    m->npts = 0;
    m->nover = 0;
    m->epoch++;
}

int vram_bomodel_best_form(const bo_model_t *m)
{
    int best = -1;
    for (int f = 0; f < BO_FORMS; f++)
        if (m->plausible[f] && (best < 0 || m->worst[f] < m->worst[best])) best = f;
    return best;
}

void vram_bomodel_add(bo_model_t *m, int batch, int lq, double peak, double mean, double se,
                      double shift_tol)
{
    if (m->npts > 0) {
        bo_point_t *last = &m->pts[m->npts - 1];
        bool same = last->batch == batch && last->lq == lq;
        if (same && fabs(last->ref_mean - mean) <= shift_tol) {
            /* Another window at the same setting. The latest mean is the
             * present; the first one is the reference a change spread over
             * several windows is measured against. */
            last->mean = mean;
            last->peak = peak;
            last->se = se;
            fit(m);
            return;
        }
        if (same) {
            if (mean < last->ref_mean) m->nfailed = 0; /* memory was freed: failures may fit now */
            vram_bomodel_new_epoch(m);
        } else {
            /* Memory grows with both settings: a larger setting using less
             * (or a smaller one more) than the last means the surroundings
             * changed. Start over from this window, keeping the slopes as a
             * first guess. */
            bool larger = batch >= last->batch && lq >= last->lq;
            bool smaller = batch <= last->batch && lq <= last->lq;
            if (larger && mean < last->mean - shift_tol) {
                m->nfailed = 0; /* memory was freed: failures may fit now */
                vram_bomodel_new_epoch(m);
            } else if (smaller && mean > last->mean + shift_tol) {
                vram_bomodel_new_epoch(m);
            }
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
    m->pts[m->npts++] = (bo_point_t){batch, lq, peak, mean, se, mean};
    fit(m);
    /* No form fits the points within the tolerance: they do not describe one
     * situation (the surroundings changed between settings). Keep this one. */
    int f = vram_bomodel_best_form(m);
    if (m->npts >= 3 && f >= 0 && m->worst[f] > shift_tol) {
        if (m->last_res[f] < 0) m->nfailed = 0;
        bo_point_t keep = m->pts[m->npts - 1];
        vram_bomodel_new_epoch(m);
        m->pts[m->npts++] = keep;
        fit(m);
    }
}

void vram_bomodel_over(bo_model_t *m, int batch, int lq, double peak)
{
    if (m->nover == BO_POINTS) {
        memmove(&m->over[0], &m->over[1], (BO_POINTS - 1) * sizeof m->over[0]);
        m->nover--;
    }
    m->over[m->nover++] = (bo_point_t){batch, lq, peak, peak, 0, peak};
}

void vram_bomodel_failed(bo_model_t *m, int batch, int lq)
{
    if (m->nfailed == BO_POINTS) {
        memmove(&m->failed[0], &m->failed[1], (BO_POINTS - 1) * sizeof m->failed[0]);
        m->nfailed--;
    }
    m->failed[m->nfailed++] =
        (bo_point_t){batch, lq, BO_FAILED_USAGE, BO_FAILED_USAGE, 0, BO_FAILED_USAGE};
    vram_bomodel_floor(m, batch, lq, BO_FAILED_USAGE);
}

/* Drops the entries of list at or below (batch, lq). */
static void drop_at_or_below(bo_point_t *list, int *n, int batch, int lq)
{
    int kept = 0;
    for (int i = 0; i < *n; i++)
        if (!(list[i].batch <= batch && list[i].lq <= lq)) list[kept++] = list[i];
    *n = kept;
}

void vram_bomodel_fine(bo_model_t *m, int batch, int lq)
{
    drop_at_or_below(m->failed, &m->nfailed, batch, lq);
    drop_at_or_below(m->over, &m->nover, batch, lq);
}

bool vram_bomodel_dominates_failure(const bo_model_t *m, int batch, int lq)
{
    for (int i = 0; i < m->nfailed; i++)
        if (batch >= m->failed[i].batch && lq >= m->failed[i].lq) return true;
    for (int i = 0; i < m->nover; i++)
        if (batch >= m->over[i].batch && lq >= m->over[i].lq) return true;
    return false;
}

void vram_bomodel_floor(bo_model_t *m, int batch, int lq, double usage)
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

double vram_bomodel_predict(const bo_model_t *m, int batch, int lq)
{
    return predict(m, batch, lq, 1);
}

double vram_bomodel_predict_low(const bo_model_t *m, int batch, int lq)
{
    return predict(m, batch, lq, -1);
}

bool vram_bomodel_quadratic(const bo_model_t *m)
{
    int f = vram_bomodel_best_form(m);
    return m->max_lq > 0 && f >= 0 && f % 2 == 1 && !m->plausible[f - 1];
}
