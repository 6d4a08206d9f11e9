/* core/observer.c: the one observer of the core's events (weft/observer.h) and the calls
 * the dispatch funnel, storage and the autograd engine make to it once they have found
 * one set (internal.h: WEFT_OBSERVER). */
#include "internal.h"
#include "weft/dispatch.h"
#include "weft/observer.h"

const struct weft_observer *weft_observer_now;

/* Whether o, as its author compiled it, has method m, and m is set. */
#define HAS(o, m) ((o)->struct_size >= offsetof(struct weft_observer, m) + sizeof((o)->m) && (o)->m)

int weft_observer_set(const struct weft_observer *o)
{
    if (o && o->struct_size < offsetof(struct weft_observer, op_enter) + sizeof o->op_enter)
        return weft_error_set(WEFT_ERR_VALUE, "weft_observer_set: struct_size %zu is too small",
                              o->struct_size);
    const struct weft_observer *expected = NULL;
    if (!o) {
        __atomic_store_n(&weft_observer_now, NULL, __ATOMIC_RELEASE);
        return 0;
    }
    if (!__atomic_compare_exchange_n(&weft_observer_now, &expected, o, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE) &&
        expected != o)
        return weft_error_set(WEFT_ERR_RUNTIME, "weft_observer_set: an observer is already set");
    return 0;
}

const struct weft_observer *weft_observer_get(void)
{
    return __atomic_load_n(&weft_observer_now, __ATOMIC_ACQUIRE);
}

int weft_observe_dispatch(const struct weft_observer *o, const struct weft_op_call *call)
{
    void *token = HAS(o, op_enter) ? o->op_enter(call) : NULL;
    int rc = weft_dispatch_unobserved(call);
    if (HAS(o, op_exit))
        o->op_exit(token, call, rc);
    return rc;
}

void weft_observe_storage(const struct weft_observer *o, const struct weft_storage *s, bool alloc)
{
    if (alloc ? HAS(o, storage_alloc) : HAS(o, storage_free))
        (alloc ? o->storage_alloc : o->storage_free)(s);
}

void *weft_observe_node_enter(const struct weft_observer *o, const char *name)
{
    return HAS(o, node_enter) ? o->node_enter(name) : NULL;
}

void weft_observe_node_exit(const struct weft_observer *o, void *token)
{
    if (HAS(o, node_exit))
        o->node_exit(token);
}
