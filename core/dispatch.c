/* core/dispatch.c: op ids and names, and the kernel table keyed by (op, device type,
 * layout, dtype) (weft/dispatch.h).
 *
 * Registration happens while plugins start (under the plugin loader's lock); lookups are
 * lock-free reads of tables that are only ever filled in, never moved. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "weft/layout.h"

#define MAX_OPS 1024

struct op_kernels {
    weft_kernel_fn fn[WEFT_MAX_DEVICE_TYPES][WEFT_MAX_LAYOUTS][WEFT_DTYPE_COUNT];
};

/* Names by id: the core's ops from the start, the op layer's built-in ones once it
 * defines them, named ops from WEFT_OP_FIRST_NAMED. Entries are only ever filled in. */
static const char *names[MAX_OPS] = {
#define WEFT_OP_NAME(id, name) [WEFT_OP_##id] = name,
    WEFT_CORE_OPS(WEFT_OP_NAME)
#undef WEFT_OP_NAME
};
static int next_named = WEFT_OP_FIRST_NAMED;
static struct op_kernels *kernels[MAX_OPS];
static pthread_mutex_t dispatch_lock = PTHREAD_MUTEX_INITIALIZER;

const char *weft_op_name(int op)
{
    const char *name = op >= 0 && op < MAX_OPS ? __atomic_load_n(&names[op], __ATOMIC_ACQUIRE) : NULL;
    return name ? name : "unknown";
}

int weft_op_count(void)
{
    return __atomic_load_n(&next_named, __ATOMIC_ACQUIRE);
}

int weft_op_lookup(const char *name)
{
    int total = weft_op_count();
    for (int op = 0; op < total; op++) {
        const char *n = __atomic_load_n(&names[op], __ATOMIC_ACQUIRE);
        if (n && strcmp(n, name) == 0)
            return op;
    }
    return -1;
}

int weft_op_define(int first, int n, const char *const *defined)
{
    if (first < WEFT_OP_CORE_COUNT || n < 0 || first + n > WEFT_OP_FIRST_NAMED)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_op_define: ids %d..%d are not the op layer's (%d..%d)", first,
                              first + n - 1, WEFT_OP_CORE_COUNT, WEFT_OP_FIRST_NAMED - 1);
    pthread_mutex_lock(&dispatch_lock);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const char *old = names[first + i];
        if (!old)
            __atomic_store_n(&names[first + i], defined[i], __ATOMIC_RELEASE);
        else if (strcmp(old, defined[i]) != 0)
            rc = weft_error_set(WEFT_ERR_RUNTIME, "op id %d is already '%s', not '%s'", first + i,
                                old, defined[i]);
    }
    pthread_mutex_unlock(&dispatch_lock);
    return rc;
}

int weft_op_register(const char *name)
{
    if (!name || !*name)
        return weft_error_set(WEFT_ERR_VALUE, "weft_op_register: empty op name");
    pthread_mutex_lock(&dispatch_lock);
    int op = weft_op_lookup(name);
    if (op < 0) {
        if (next_named >= MAX_OPS) {
            pthread_mutex_unlock(&dispatch_lock);
            return weft_error_set(WEFT_ERR_RUNTIME, "too many ops registered (at most %d named)",
                                  MAX_OPS - WEFT_OP_FIRST_NAMED);
        }
        char *copy = strdup(name);
        if (!copy) {
            pthread_mutex_unlock(&dispatch_lock);
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory registering op %s", name);
        }
        op = next_named;
        __atomic_store_n(&names[op], copy, __ATOMIC_RELEASE);
        __atomic_store_n(&next_named, op + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&dispatch_lock);
    return op;
}

/* Any built-in id may get kernels before the op layer names it (a backend can load first);
 * named ids only once registered. */
static bool key_valid(int op, int device_type, int layout)
{
    return op >= 0 && op < weft_op_count() && device_type >= 0 &&
           device_type < WEFT_MAX_DEVICE_TYPES && layout >= 0 && layout < WEFT_MAX_LAYOUTS;
}

int weft_kernel_register(int op, int device_type, int layout, uint32_t dtype_mask,
                         weft_kernel_fn fn)
{
    if (!key_valid(op, device_type, layout) || !fn)
        return weft_error_set(WEFT_ERR_VALUE,
                              "weft_kernel_register: invalid key (op %d, device type %d, layout %d)",
                              op, device_type, layout);
    pthread_mutex_lock(&dispatch_lock);
    struct op_kernels *k = kernels[op];
    if (!k) {
        k = calloc(1, sizeof *k);
        if (!k) {
            pthread_mutex_unlock(&dispatch_lock);
            return weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of memory registering a kernel");
        }
        __atomic_store_n(&kernels[op], k, __ATOMIC_RELEASE);
    }
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++)
        if (dtype_mask & WEFT_DTYPE_BIT(dt))
            __atomic_store_n(&k->fn[device_type][layout][dt], fn, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&dispatch_lock);
    return 0;
}

int weft_kernel_register_table(int device_type, int layout, const struct weft_kernel_entry *table)
{
    for (const struct weft_kernel_entry *e = table; e && e->fn; e++) {
        int op = e->name ? weft_op_register(e->name) : e->op;
        int rc = op < 0 ? op : weft_kernel_register(op, device_type, layout, e->dtypes, e->fn);
        if (rc != 0) {
            weft_error_prefix("kernel table entry '%s'", e->name ? e->name : weft_op_name(e->op));
            return rc;
        }
    }
    return 0;
}

weft_kernel_fn weft_kernel_lookup(int op, int device_type, int layout, enum weft_dtype dtype)
{
    if (!key_valid(op, device_type, layout) || !weft_dtype_valid(dtype))
        return NULL;
    struct op_kernels *k = __atomic_load_n(&kernels[op], __ATOMIC_ACQUIRE);
    return k ? __atomic_load_n(&k->fn[device_type][layout][dtype], __ATOMIC_ACQUIRE) : NULL;
}

uint32_t weft_kernel_dtypes(int op, int device_type, int layout)
{
    uint32_t mask = 0;
    for (int dt = 0; dt < WEFT_DTYPE_COUNT; dt++)
        if (weft_kernel_lookup(op, device_type, layout, (enum weft_dtype)dt))
            mask |= WEFT_DTYPE_BIT(dt);
    return mask;
}

/* weft_kernel_lookup for a dispatch: the table's bounds are the only checks needed, as
 * no op id past the registered ones has kernels. */
static inline weft_kernel_fn dispatch_lookup(int op, int device_type, int layout,
                                             enum weft_dtype dtype)
{
    if ((unsigned)op >= MAX_OPS || (unsigned)device_type >= WEFT_MAX_DEVICE_TYPES ||
        (unsigned)layout >= WEFT_MAX_LAYOUTS || (unsigned)dtype >= WEFT_DTYPE_COUNT)
        return NULL;
    struct op_kernels *k = __atomic_load_n(&kernels[op], __ATOMIC_ACQUIRE);
    return k ? __atomic_load_n(&k->fn[device_type][layout][dtype], __ATOMIC_ACQUIRE) : NULL;
}

/* Both entries test for an observer first: one predictable branch while there is none
 * (observer.c reports the call around weft_dispatch_unobserved while there is). */
int weft_dispatch_strided(const struct weft_op_call *call)
{
    const struct weft_observer *o = WEFT_OBSERVER();
    if (__builtin_expect(o != NULL, 0))
        return weft_observe_dispatch(o, call);
    weft_kernel_fn fn = dispatch_lookup(call->op, call->out[0]->device.type, WEFT_LAYOUT_STRIDED,
                                        call->in[0]->dtype);
    return fn ? fn(call) : weft_dispatch_unobserved(call);
}

int weft_dispatch(const struct weft_op_call *call)
{
    const struct weft_observer *o = WEFT_OBSERVER();
    if (__builtin_expect(o != NULL, 0))
        return weft_observe_dispatch(o, call);
    return weft_dispatch_unobserved(call);
}

int weft_dispatch_unobserved(const struct weft_op_call *call)
{
    const weft_tensor *key = call->nin > 0 && call->in[0] ? call->in[0] : call->out[0];
    const weft_tensor *where = call->nout > 0 ? call->out[0] : key;
    int device_type = where->device.type;
    int layout = key->layout;
    /* A strided kernel would read a sparse operand's (absent) storage: refuse it here,
     * once for every op. Kernels of other layouts check their own operands. */
    if (layout == WEFT_LAYOUT_STRIDED) {
        for (int i = 0; i < call->nin + call->nout; i++) {
            const weft_tensor *t = i < call->nin ? call->in[i] : call->out[i - call->nin];
            if (t && t->layout != WEFT_LAYOUT_STRIDED)
                return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                                      "no kernel for op '%s' on device '%s' with a %s operand "
                                      "(operand %d; the first operand is strided)",
                                      weft_op_name(call->op), weft_device_type_name(device_type),
                                      weft_layout_name(t->layout), i);
        }
    }
    weft_kernel_fn fn = dispatch_lookup(call->op, device_type, layout, key->dtype);
    if (fn)
        return fn(call);
    if (!weft_backend_find(device_type) && !weft_backend_get(device_type))
        return weft_error_code();
    /* Reload after an on-demand plugin load. */
    fn = weft_kernel_lookup(call->op, device_type, layout, key->dtype);
    if (fn)
        return fn(call);
    if (weft_kernel_dtypes(call->op, device_type, layout) == 0)
        return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED,
                              "no kernel for op '%s' on device '%s' with layout '%s'",
                              weft_op_name(call->op), weft_device_type_name(device_type),
                              weft_layout_name(layout));
    return weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "\"%s\" not implemented for '%s' on %s",
                          weft_op_name(call->op), weft_dtype_torch_name(key->dtype),
                          weft_device_type_name(device_type));
}
