/* Alert rules at work: each rule is evaluated on every sample for each of its
 * subjects (devices, running jobs, queued jobs). A condition that holds for
 * the rule's `for` duration fires once; it resolves only when the value
 * crosses back past the clear threshold (hysteresis), or its subject is gone.
 * Firing and resolving are stored with timestamps and handed to the delivery
 * queues; nothing here waits on a sink. */
#include "watch_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const level_names[] = {"info", "warning", "error", "critical"};

const char *vram_alert_level_name(vram_alert_level_t level)
{
    return (unsigned)level < 4 ? level_names[level] : "unknown";
}

int vram_alert_level_parse(const char *name)
{
    for (int i = 0; name && i < 4; i++)
        if (!strcasecmp(name, level_names[i])) return i;
    return -1;
}

static const char *const metric_names[WATCH_M_COUNT_] = {
    [WATCH_M_MEMORY_USED_RATIO] = "memory_used_ratio",
    [WATCH_M_MEMORY_FREE_BYTES] = "memory_free_bytes",
    [WATCH_M_TEMPERATURE] = "temperature_celsius",
    [WATCH_M_POWER] = "power_watts",
    [WATCH_M_UTILIZATION] = "utilization_ratio",
    [WATCH_M_JOB_OVER_RESERVATION] = "job_used_over_reserved_ratio",
    [WATCH_M_DEVICE_ERROR] = "device_error",
    [WATCH_M_QUEUE_WAIT] = "queue_wait_seconds",
};

const char *vram_watch_metric_name(watch_metric_t m)
{
    return (unsigned)m < WATCH_M_COUNT_ ? metric_names[m] : "unknown";
}

int vram_watch_metric_parse(const char *name)
{
    for (int i = 0; name && i < WATCH_M_COUNT_; i++)
        if (!strcmp(name, metric_names[i])) return i;
    return -1;
}

/* A number with at most `decimals` decimals and no trailing zeros: 90, 91.2. */
static void tidy(double v, int decimals, const char *unit, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%.*f", decimals, v);
    if (n > 0 && (size_t)n < len && strchr(buf, '.')) {
        while (n > 0 && buf[n - 1] == '0')
            buf[--n] = 0;
        if (n > 0 && buf[n - 1] == '.') buf[--n] = 0;
    }
    if (!strcmp(buf, "-0")) snprintf(buf, len, "0");
    size_t at = strlen(buf);
    snprintf(buf + at, len - at, "%s", unit);
}

void vram_watch_describe(int metric, double v, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    switch (metric) {
    case WATCH_M_MEMORY_USED_RATIO:
    case WATCH_M_UTILIZATION:
    case WATCH_M_JOB_OVER_RESERVATION:
        tidy(v * 100, 1, "%", buf, len);
        break;
    case WATCH_M_MEMORY_FREE_BYTES: {
        size_t u = 0;
        while (fabs(v) >= 1024 && u + 1 < sizeof units / sizeof units[0]) {
            v /= 1024;
            u++;
        }
        tidy(v, 2, units[u], buf, len); /* 8GiB, 7.5GiB, 512MiB */
        break;
    }
    case WATCH_M_TEMPERATURE:
        tidy(v, 1, " C", buf, len);
        break;
    case WATCH_M_POWER:
        tidy(v, 1, " W", buf, len);
        break;
    case WATCH_M_QUEUE_WAIT:
        tidy(v, 1, " s", buf, len);
        break;
    default:
        tidy(v, 3, "", buf, len);
    }
}

static bool holds(const watch_rule_t *r, double v)
{
    return r->below ? v < r->threshold : v > r->threshold;
}

static bool cleared(const watch_rule_t *r, double v)
{
    return r->below ? v >= r->clear : v <= r->clear;
}

static void transition(vram_watch_t *w, const vram_alert_t *a)
{
    vram_watch_log(w,
                   a->level >= VRAM_ALERT_ERROR     ? "error"
                   : a->level == VRAM_ALERT_WARNING ? "warn"
                                                    : "info",
                   "alert %s %s [%s] on %s: %s", a->rule,
                   a->resolved_at > 0 ? "resolved" : "firing", vram_alert_level_name(a->level),
                   a->subject, a->message);
    for (size_t i = 0; i < w->nsinks; i++)
        vram_watch_outbox_push(w->sinks[i], a);
}

/* Resolves a firing alert. `gone`: its subject left the sample (a job that
 * ended, a device that no longer answers) rather than the value clearing;
 * `value` is then the last one seen. The message says which, with the
 * value at resolution, instead of repeating the firing text. */
static void resolve(vram_watch_t *w, watch_alert_state_t *st, double now, double value, bool gone)
{
    const watch_rule_t *r = &w->rules.rules[st->rule];
    vram_alert_t *a = &st->alert;
    char v[48], c[48];
    vram_watch_describe(r->metric, value, v, sizeof v);
    vram_watch_describe(r->metric, r->clear, c, sizeof c);
    const char *sep = *st->detail ? " " : "";
    int n; /* long names are cut: the message has 256 bytes */
    if (!gone)
        n = snprintf(a->message, sizeof a->message,
                     "%.47s%s%.60s: %.28s back to %.20s (clears %s %.20s) after %d s firing",
                     a->subject, sep, st->detail, a->metric, v,
                     r->below ? "at or above" : "at or below", c, (int)(now - a->fired_at));
    else
        n = snprintf(a->message, sizeof a->message,
                     "%.47s%s%.60s: %s; %.28s was %.20s when last seen, after %d s firing",
                     a->subject, sep, st->detail,
                     r->metric == WATCH_M_QUEUE_WAIT ? "the job left the queue"
                     : st->job_id                    ? "the job is no longer running"
                                                     : "the device no longer reports it",
                     a->metric, v, (int)(now - a->fired_at));
    (void)n;
    snprintf(a->reason, sizeof a->reason, "%s", gone ? "gone" : "cleared");
    a->resolved_at = now;
    a->value = value;
    if (w->store && vram_watch_store_alert_resolve(w->store, &st->alert) != 0)
        vram_watch_log(w, "warn", "alerts: %s", vram_last_error());
    transition(w, &st->alert);
}

static watch_alert_state_t *find_state(vram_watch_t *w, size_t rule, int device, int64_t job)
{
    for (size_t i = 0; i < w->nalerts; i++) {
        watch_alert_state_t *s = &w->alerts[i];
        if (s->rule == rule && s->device == device && s->job_id == job) return s;
    }
    return NULL;
}

typedef struct {
    int device;
    int64_t job_id;
    char subject[48];
    char detail[96]; /* e.g. the device's or job's name */
} subject_t;

/* Feeds one value of rule `ri` on one subject into its state. */
static void observe(vram_watch_t *w, size_t ri, const subject_t *sub, double value, double now)
{
    const watch_rule_t *r = &w->rules.rules[ri];
    watch_alert_state_t *st = find_state(w, ri, sub->device, sub->job_id);
    bool cond = holds(r, value);
    if (!st) {
        if (!cond) return;
        if (!vram_watch_grow((void **)&w->alerts, &w->alerts_cap, w->nalerts + 1,
                             sizeof *w->alerts))
            return;
        st = &w->alerts[w->nalerts++];
        memset(st, 0, sizeof *st);
        st->rule = ri;
        st->device = sub->device;
        st->job_id = sub->job_id;
        st->pending = true;
        vram_alert_t *a = &st->alert;
        snprintf(a->rule, sizeof a->rule, "%s", r->name);
        snprintf(a->metric, sizeof a->metric, "%s", vram_watch_metric_name(r->metric));
        snprintf(a->subject, sizeof a->subject, "%s", sub->subject);
        a->level = r->level;
        a->device = sub->device;
        a->job_id = sub->job_id;
        a->threshold = r->threshold;
        a->pending_since = now;
    }
    st->seen = true;
    st->alert.value = value;
    snprintf(st->detail, sizeof st->detail, "%s", sub->detail);
    if (st->firing) {
        if (cleared(r, value)) {
            resolve(w, st, now, value, false);
            st->firing = false;
            st->seen = false; /* dropped below */
        }
        return;
    }
    if (!cond) {
        st->seen = false; /* the condition broke before `for`: start again */
        return;
    }
    if (now - st->alert.pending_since < r->for_s) return;
    vram_alert_t *a = &st->alert;
    char v[48], t[48], held[48];
    vram_watch_describe(r->metric, value, v, sizeof v);
    vram_watch_describe(r->metric, r->threshold, t, sizeof t);
    vram_watch_describe(WATCH_M_QUEUE_WAIT, now - a->pending_since, held,
                        sizeof held); /* seconds */
    int n = snprintf(a->message, sizeof a->message, "%.47s%s%.95s: %.28s %.20s %s %.20s for %.20s",
                     sub->subject, *sub->detail ? " " : "", sub->detail,
                     vram_watch_metric_name(r->metric), v, r->below ? "<" : ">", t, held);
    (void)n; /* long names are cut */
    a->fired_at = now;
    st->pending = false;
    st->firing = true;
    atomic_fetch_add(&w->alerts_fired, 1);
    if (w->store && vram_watch_store_alert_insert(w->store, a) != 0)
        vram_watch_log(w, "warn", "alerts: %s", vram_last_error());
    transition(w, a);
}

static double ratio(uint64_t part, uint64_t whole)
{
    return whole && whole != VRAM_UNKNOWN_U64 && part != VRAM_UNKNOWN_U64
               ? (double)part / (double)whole
               : -1;
}

/* The value of a device metric, or < -0.5 when unknown. */
static double device_value(watch_metric_t m, const vram_device_info_t *d)
{
    switch (m) {
    case WATCH_M_MEMORY_USED_RATIO:
        return ratio(d->used_bytes, d->total_bytes);
    case WATCH_M_MEMORY_FREE_BYTES:
        return d->free_bytes == VRAM_UNKNOWN_U64 ? -1 : (double)d->free_bytes;
    case WATCH_M_TEMPERATURE:
        return d->temperature_c < 0 ? -1 : d->temperature_c;
    case WATCH_M_POWER:
        return d->power_w;
    case WATCH_M_UTILIZATION:
        return d->utilization_pct < 0 ? -1 : d->utilization_pct / 100.0;
    case WATCH_M_DEVICE_ERROR:
        return d->health == VRAM_HEALTH_ERROR ? 1 : 0;
    default:
        return -1;
    }
}

static void eval_rule(vram_watch_t *w, size_t ri, const watch_sample_t *s)
{
    watch_metric_t m = w->rules.rules[ri].metric;
    subject_t sub;
    if (m == WATCH_M_JOB_OVER_RESERVATION || m == WATCH_M_QUEUE_WAIT) {
        for (size_t i = 0; i < s->njobs; i++) {
            const vram_job_t *j = &s->jobs[i];
            double v;
            if (m == WATCH_M_QUEUE_WAIT && j->state == VRAM_JOB_QUEUED)
                v = s->t - j->submitted_at;
            else if (m == WATCH_M_JOB_OVER_RESERVATION && j->state == VRAM_JOB_RUNNING) {
                v = 0; /* the worst of its devices */
                for (size_t k = 0; k < s->nuses; k++)
                    if (s->uses[k].job_id == j->id && s->uses[k].reserved_bytes)
                        v = fmax(v,
                                 (double)s->uses[k].used_bytes / (double)s->uses[k].reserved_bytes);
            } else
                continue;
            sub = (subject_t){.device = j->ndevices == 1 ? j->devices[0] : -1, .job_id = j->id};
            snprintf(sub.subject, sizeof sub.subject, "job %lld", (long long)j->id);
            snprintf(sub.detail, sizeof sub.detail, "\"%.60s\"", j->req.name);
            observe(w, ri, &sub, v, s->t);
        }
        return;
    }
    for (int d = 0; d < s->ndev; d++) {
        double v = device_value(m, &s->devs[d]);
        if (v < -0.5) continue;
        sub = (subject_t){.device = d};
        snprintf(sub.subject, sizeof sub.subject, "gpu%d", d);
        snprintf(sub.detail, sizeof sub.detail, "(%.80s)", s->devs[d].name);
        observe(w, ri, &sub, v, s->t);
    }
}

void vram_watch_alerts_eval(vram_watch_t *w, const watch_sample_t *s)
{
    for (size_t i = 0; i < w->nalerts; i++)
        w->alerts[i].seen = false;
    for (size_t ri = 0; ri < w->rules.nrules; ri++)
        eval_rule(w, ri, s);
    /* Unseen states: the condition broke, or the subject is gone (a job that
     * ended resolves its alerts). */
    size_t k = 0;
    for (size_t i = 0; i < w->nalerts; i++) {
        watch_alert_state_t *st = &w->alerts[i];
        if (!st->seen && st->firing) resolve(w, st, s->t, st->alert.value, true);
        if (st->seen) w->alerts[k++] = *st;
    }
    w->nalerts = k;
}

static void reload_one(void *arg, const vram_alert_t *a)
{
    vram_watch_t *w = arg;
    for (size_t ri = 0; ri < w->rules.nrules; ri++) {
        if (strcmp(w->rules.rules[ri].name, a->rule) ||
            !vram_watch_grow((void **)&w->alerts, &w->alerts_cap, w->nalerts + 1,
                             sizeof *w->alerts))
            continue;
        watch_alert_state_t *st = &w->alerts[w->nalerts++];
        memset(st, 0, sizeof *st);
        st->rule = ri;
        st->device = a->device;
        st->job_id = a->job_id;
        st->firing = true;
        st->alert = *a;
        return;
    }
    /* Its rule is gone: nothing can resolve it any more, so it ends now. */
    vram_alert_t done = *a;
    done.resolved_at = vram_watch_now(w);
    (void)vram_watch_store_alert_resolve(w->store, &done);
}

int vram_watch_alerts_reload(vram_watch_t *w)
{
    return w->store ? vram_watch_store_alerts(w->store, true, 0, reload_one, w) : 0;
}

int vram_watch_alerts_firing_by_level(vram_watch_t *w, int counts[4])
{
    memset(counts, 0, 4 * sizeof *counts);
    int n = 0;
    for (size_t i = 0; i < w->nalerts; i++)
        if (w->alerts[i].firing) {
            counts[w->alerts[i].alert.level & 3]++;
            n++;
        }
    return n;
}

/* ---- JSON ------------------------------------------------------------------- */

static json_t *alert_json(const vram_alert_t *a, const char *state)
{
    json_t *o = json_object();
    if (a->id) json_object_set_new(o, "id", json_integer(a->id));
    json_object_set_new(o, "state", json_string(state));
    json_object_set_new(o, "rule", json_string(a->rule));
    json_object_set_new(o, "level", json_string(vram_alert_level_name(a->level)));
    json_object_set_new(o, "metric", json_string(a->metric));
    json_object_set_new(o, "subject", json_string(a->subject));
    json_object_set_new(o, "device", a->device >= 0 ? json_integer(a->device) : json_null());
    json_object_set_new(o, "job_id", a->job_id ? json_integer(a->job_id) : json_null());
    json_object_set_new(o, "value", json_real(a->value));
    json_object_set_new(o, "threshold", json_real(a->threshold));
    json_object_set_new(o, "pending_since", json_real(a->pending_since));
    json_object_set_new(o, "fired_at", a->fired_at > 0 ? json_real(a->fired_at) : json_null());
    json_object_set_new(o, "resolved_at",
                        a->resolved_at > 0 ? json_real(a->resolved_at) : json_null());
    json_object_set_new(o, "message", json_string(a->message));
    return o;
}

char *vram_watch_alert_json_text(vram_watch_t *w, const vram_alert_t *a)
{
    json_t *o = alert_json(a, a->resolved_at > 0 ? "resolved" : "firing");
    if (a->resolved_at > 0) json_object_set_new(o, "reason", json_string(a->reason));
    json_object_set_new(o, "host", json_string(w->host));
    json_object_set_new(o, "cluster", w->cluster ? json_string(w->cluster) : json_null());
    char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return text;
}

static void append_resolved(void *arg, const vram_alert_t *a)
{
    json_array_append_new(arg, alert_json(a, "resolved"));
}

char *vram_watch_alerts_json(vram_watch_t *w, int limit)
{
    if (!w) {
        vram_fail(VRAM_EINVAL, "NULL watch");
        return NULL;
    }
    json_t *firing = json_array(), *pending = json_array(), *resolved = json_array();
    json_t *rules = json_array();
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < w->nalerts; i++) {
        const watch_alert_state_t *st = &w->alerts[i];
        json_array_append_new(st->firing ? firing : pending,
                              alert_json(&st->alert, st->firing ? "firing" : "pending"));
    }
    int rc = w->store && limit > 0
                 ? vram_watch_store_alerts(w->store, false, limit, append_resolved, resolved)
                 : 0;
    for (size_t i = 0; i < w->rules.nrules; i++) {
        const watch_rule_t *r = &w->rules.rules[i];
        json_t *o =
            json_pack("{s:s,s:s}", "name", r->name, "metric", vram_watch_metric_name(r->metric));
        json_object_set_new(o, r->below ? "below" : "above", json_real(r->threshold));
        json_object_set_new(o, "clear", json_real(r->clear));
        json_object_set_new(o, "for_s", json_real(r->for_s));
        json_object_set_new(o, "level", json_string(vram_alert_level_name(r->level)));
        json_array_append_new(rules, o);
    }
    pthread_mutex_unlock(&w->lock);
    json_t *out = json_pack("{s:o,s:o,s:o,s:o}", "firing", firing, "pending", pending, "resolved",
                            resolved, "rules", rules);
    char *text = rc ? NULL : json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(out);
    return text;
}
