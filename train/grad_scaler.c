/* train/grad_scaler.c: torch.cuda.amp.GradScaler (weft/grad_scaler.h).
 *
 * The stages follow PyTorch's OptState: READY after update(), UNSCALED after unscale_(),
 * STEPPED after step(). The scale is a float32 value, updated as _amp_update_scale_ does
 * (product in double, stored as float, growth only while the result is finite), so a
 * checkpointed scale reads back bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "weft.h"
#include "weft/grad_scaler.h"

enum stage { READY, UNSCALED, STEPPED };

struct weft_grad_scaler {
    struct weft_grad_scaler_params p;
    float scale;
    int64_t growth_tracker;
    enum stage stage;
    bool found_inf;     /* recorded by the last unscale_ */
    bool checked;       /* an inf check ran since the last update */
    bool skipped;       /* the last step() did not step */
};

struct weft_grad_scaler_params weft_grad_scaler_defaults(void)
{
    return (struct weft_grad_scaler_params){
        .init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5,
        .growth_interval = 2000, .enabled = true};
}

weft_grad_scaler *weft_grad_scaler_create(const struct weft_grad_scaler_params *params)
{
    struct weft_grad_scaler_params p = params ? *params : weft_grad_scaler_defaults();
    if (p.enabled) {
        if (!(p.growth_factor > 1.0)) {
            weft_error_set(WEFT_ERR_VALUE, "The growth factor must be > 1.0, got %g",
                           p.growth_factor);
            return NULL;
        }
        if (!(p.backoff_factor < 1.0 && p.backoff_factor > 0.0)) {
            weft_error_set(WEFT_ERR_VALUE, "The backoff factor must be < 1.0 and > 0, got %g",
                           p.backoff_factor);
            return NULL;
        }
        if (p.growth_interval <= 0) {
            weft_error_set(WEFT_ERR_VALUE, "growth_interval must be a positive integer, got %d",
                           p.growth_interval);
            return NULL;
        }
        if (!(p.init_scale > 0.0) || !isfinite((float)p.init_scale)) {
            weft_error_set(WEFT_ERR_VALUE,
                           "init_scale must be a positive finite float32 value, got %g",
                           p.init_scale);
            return NULL;
        }
    }
    weft_grad_scaler *s = calloc(1, sizeof *s);
    if (!s) {
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory for a GradScaler");
        return NULL;
    }
    s->p = p;
    s->scale = (float)p.init_scale;
    return s;
}

void weft_grad_scaler_free(weft_grad_scaler *s)
{
    free(s);
}

weft_tensor *weft_grad_scaler_scale(weft_grad_scaler *s, weft_tensor *loss)
{
    if (!s || !loss)
        return NULL;
    if (!s->p.enabled)
        return weft_autorelease(weft_tensor_retain(loss));
    return weft_mul_scalar(loss, (double)s->scale);
}

/* Adds sum(g * 0) to *check: 0 when every element of g is finite, NaN otherwise (inf * 0
 * and NaN * 0 are NaN), so one read at the end answers for all gradients. */
static int add_check(weft_tensor **check, weft_tensor *g)
{
    weft_tensor *c = weft_sum(weft_mul_scalar(g, 0.0), 0, NULL, false);
    if (c && c->device.type != WEFT_DEVICE_CPU)
        c = weft_to_device(c, WEFT_CPU);
    c = c ? weft_to_dtype(c, WEFT_F64) : NULL;
    if (!c)
        return weft_error_code();
    *check = *check ? weft_add(*check, c) : c;
    return *check ? 0 : weft_error_code();
}

static int unscale_in_scope(weft_grad_scaler *s, weft_optimizer *opt)
{
    /* PyTorch: inv_scale = scale.double().reciprocal().float() */
    double inv = (double)(float)(1.0 / (double)s->scale);
    weft_tensor *check = NULL;
    int n = weft_optimizer_num_params(opt);
    for (int i = 0; i < n; i++) {
        weft_tensor *g = weft_grad(weft_optimizer_param(opt, i)); /* recorded in the scope */
        if (!g)
            continue;
        /* checked before the division, as _amp_foreach_non_finite_check_and_unscale_ */
        if (add_check(&check, g) != 0 || !weft_mul_scalar_(g, inv))
            return weft_error_code();
    }
    double v = 0;
    if (check && weft_tensor_item(check, &v) != 0)
        return weft_error_code();
    s->found_inf = !isfinite(v);
    s->checked = true;
    s->stage = UNSCALED;
    return 0;
}

int weft_grad_scaler_unscale_(weft_grad_scaler *s, weft_optimizer *opt)
{
    if (!s || !opt)
        return weft_error_set(WEFT_ERR_VALUE, "unscale_: expected a scaler and an optimizer");
    if (!s->p.enabled)
        return 0;
    if (s->stage == UNSCALED)
        return weft_error_set(WEFT_ERR_RUNTIME, "unscale_() has already been called on this "
                                                "optimizer since the last update().");
    if (s->stage == STEPPED)
        return weft_error_set(WEFT_ERR_RUNTIME, "unscale_() is being called after step().");
    bool prev = weft_no_grad_begin();
    weft_scope_push();
    int rc = unscale_in_scope(s, opt);
    weft_scope_pop();
    weft_grad_mode_restore(prev);
    return rc;
}

int weft_grad_scaler_step(weft_grad_scaler *s, weft_optimizer *opt)
{
    if (!s || !opt)
        return weft_error_set(WEFT_ERR_VALUE, "step: expected a scaler and an optimizer");
    if (!s->p.enabled)
        return weft_optimizer_step(opt);
    if (s->stage == STEPPED)
        return weft_error_set(WEFT_ERR_RUNTIME,
                              "step() has already been called since the last update().");
    if (s->stage == READY && weft_grad_scaler_unscale_(s, opt) != 0)
        return weft_error_code();
    s->skipped = s->found_inf;
    int rc = s->skipped ? 0 : weft_optimizer_step(opt);
    s->stage = STEPPED;
    return rc;
}

int weft_grad_scaler_update(weft_grad_scaler *s)
{
    if (!s)
        return weft_error_set(WEFT_ERR_VALUE, "update: expected a scaler");
    if (!s->p.enabled)
        return 0;
    if (!s->checked)
        return weft_error_set(WEFT_ERR_RUNTIME, "No inf checks were recorded prior to update.");
    if (s->found_inf) {
        s->scale = (float)((double)s->scale * s->p.backoff_factor);
        s->growth_tracker = 0;
    } else if (s->growth_tracker + 1 == s->p.growth_interval) {
        float grown = (float)((double)s->scale * s->p.growth_factor);
        if (isfinite(grown))
            s->scale = grown;
        s->growth_tracker = 0;
    } else {
        s->growth_tracker++;
    }
    s->stage = READY;
    s->checked = false;
    s->found_inf = false;
    return 0;
}

double weft_grad_scaler_get_scale(const weft_grad_scaler *s)
{
    return s && s->p.enabled ? (double)s->scale : 1.0;
}

int64_t weft_grad_scaler_growth_tracker(const weft_grad_scaler *s)
{
    return s ? s->growth_tracker : 0;
}

bool weft_grad_scaler_is_enabled(const weft_grad_scaler *s)
{
    return s && s->p.enabled;
}

bool weft_grad_scaler_step_skipped(const weft_grad_scaler *s)
{
    return s && s->skipped;
}

int weft_grad_scaler_state_export(const weft_grad_scaler *s, struct weft_metadata *m)
{
    if (!s || !m)
        return weft_error_set(WEFT_ERR_VALUE, "state_export: expected a scaler and metadata");
    char buf[32];
    snprintf(buf, sizeof buf, "%.9g", (double)s->scale); /* 9 digits: a float32 exactly */
    if (weft_metadata_set(m, "scaler.scale", buf) < 0 ||
        weft_metadata_set_int(m, "scaler.growth_tracker", s->growth_tracker) < 0)
        return weft_error_code();
    return 0;
}

int weft_grad_scaler_state_import(weft_grad_scaler *s, const struct weft_metadata *m)
{
    if (!s || !m)
        return weft_error_set(WEFT_ERR_VALUE, "state_import: expected a scaler and metadata");
    const char *text = weft_metadata_get(m, "scaler.scale");
    if (!text)
        return weft_error_set(WEFT_ERR_VALUE, "checkpoint metadata has no key 'scaler.scale'");
    char *end;
    double scale = strtod(text, &end);
    if (end == text || *end || !(scale > 0) || !isfinite((float)scale))
        return weft_error_set(WEFT_ERR_VALUE,
                              "checkpoint metadata 'scaler.scale' = '%s' is not a positive "
                              "finite number",
                              text);
    int64_t tracker;
    if (weft_metadata_get_int(m, "scaler.growth_tracker", &tracker) < 0)
        return weft_error_code();
    if (tracker < 0)
        return weft_error_set(WEFT_ERR_VALUE,
                              "checkpoint metadata 'scaler.growth_tracker' = %lld is negative",
                              (long long)tracker);
    s->scale = (float)scale;
    s->growth_tracker = tracker;
    s->stage = READY;
    s->checked = s->found_inf = s->skipped = false;
    return 0;
}
