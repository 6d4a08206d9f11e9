/* weft/observer.h: the core's events for one observer above it, as PyTorch's global
 * RecordFunction callbacks serve its profiler.
 *
 * The core calls the observer at the dispatch funnel around every kernel call, after a
 * storage's memory is allocated and before it is freed, and around every backward node
 * the autograd engine runs. With no observer set each of those places tests one pointer,
 * a branch predicted untaken: that is all observing costs while nobody observes.
 *
 * Methods run on the thread of the event, on several threads at once, and may be called
 * shortly after weft_observer_set replaced them (a thread may have read the old pointer
 * first): keep the struct and what it points to alive for the program's life. Any method
 * may be NULL. libweft-ops' profiler (weft/profiler.h) is the observer weft ships.
 */
#ifndef WEFT_OBSERVER_H
#define WEFT_OBSERVER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct weft_op_call;
struct weft_storage;

struct weft_observer {
    size_t struct_size; /* sizeof(struct weft_observer) as its author compiled it */
    /* An op's kernel is about to run (its front end has allocated the outputs); what it
     * returns is handed to op_exit. */
    void *(*op_enter)(const struct weft_op_call *call);
    /* ... and has run, with status rc. */
    void (*op_exit)(void *token, const struct weft_op_call *call, int rc);
    /* A storage's memory was allocated from its device's backend, or is about to go back. */
    void (*storage_alloc)(const struct weft_storage *s);
    void (*storage_free)(const struct weft_storage *s);
    /* The engine runs a backward node's function (name: the node's, static); what
     * node_enter returns is handed to node_exit. */
    void *(*node_enter)(const char *name);
    void (*node_exit)(void *token);
};

/* Makes o the observer (NULL: none); the struct is not copied. One observer at a time:
 * setting another while one is set is refused ("weft_observer_set: an observer is already
 * set"); set NULL first. 0 or negative. */
int weft_observer_set(const struct weft_observer *o);
/* The observer set now, NULL when none. */
const struct weft_observer *weft_observer_get(void);

#ifdef __cplusplus
}
#endif
#endif
