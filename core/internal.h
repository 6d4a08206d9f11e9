/* core/internal.h: helpers shared by the core's files; not installed, not ABI.
 *
 * How the core's files call each other. These call no file that calls them back: error,
 * dtype, small_alloc, options, version, accessors; elf, manifest and plugin_path (the
 * loader's reading of files and paths); device; autocast (a thread's state); iter. The
 * rest call each other in three circles, each on purpose:
 * - registry <-> plugin: a lookup of a name nobody has registered loads the plugin whose
 *   manifest provides it, and that plugin's entry point registers into the registry
 *   (lazy loading is this mutual recursion). The registry also lists the core's own
 *   kinds (backend.c's, layout.c's, plugin.c's) when it starts, by address.
 * - tensor <-> scope, storage, layout, autograd: a tensor's last release frees what it
 *   owns (its storage, a layout's data through the layout's vtable, its autograd
 *   metadata), and a scope owns the tensors made inside it.
 * - autograd <-> view, copy, creation: the primitives the core keeps record graph nodes
 *   when an input requires grad, and the engine computes with them (contiguous, clone
 *   and zeros of a gradient, copy_ into a CopySlices base). PyTorch's has the same
 *   circle through its dispatcher (an op's autograd kernel records the node, the engine
 *   calls ops). A table of function pointers would hide it, not remove it.
 * Nothing in core/ calls the op layer: the ops the engine needs beyond these primitives
 * (add, sum, scatter_add) come through the hook libweft-ops installs
 * (weft_autograd_set_ops), and no core file includes an ops/ header
 * (tests/layering-check.py). */
#ifndef WEFT_CORE_INTERNAL_H
#define WEFT_CORE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/autograd.h"
#include "weft/backend.h"
#include "weft/error.h"
#include "weft/dispatch.h"
#include "weft/options.h"
#include "weft/tensor.h"

#define WEFT_INTERNAL __attribute__((visibility("hidden")))

/* Small, hot thread-locals. Not initial-exec: that model flags libweft STATIC_TLS, and a
 * host that dlopen()s it (Python's ctypes, Lua, Julia) then fails with "cannot allocate
 * memory in static TLS block". libweft is built with TLS descriptors instead
 * (-mtls-dialect=gnu2, meson.build), whose access is a call that returns a constant
 * offset when the block sits in static TLS, as it does for a linked libweft. */
#define WEFT_FAST_TLS __thread

/* The thread's autocast state (autocast.c); front ends test .enabled before asking the
 * policy, so an op outside autocast pays one thread-local load. */
struct weft_autocast_state;
WEFT_INTERNAL extern WEFT_FAST_TLS struct weft_autocast_state weft_autocast_current;

/* Atomic refcount helpers. */
#define WEFT_ATOMIC_INC(p) __atomic_add_fetch((p), 1, __ATOMIC_RELAXED)
#define WEFT_ATOMIC_DEC(p) __atomic_sub_fetch((p), 1, __ATOMIC_ACQ_REL)
/* Drops a reference; true when it was the last. Holding the only one, no other thread
 * can take another, so a count of 1 needs no atomic decrement (a locked instruction
 * per release was a tenth of a tiny op). */
static inline bool weft_refcount_release(uint32_t *count)
{
    return __atomic_load_n(count, __ATOMIC_ACQUIRE) == 1 || WEFT_ATOMIC_DEC(count) == 0;
}

/* weft_contiguous_strides, inlined into the core's own allocations. */
static inline int64_t contiguous_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t n = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = n;
        if (__builtin_mul_overflow(n, shape[d] > 1 ? shape[d] : 1, &n))
            return -1;
    }
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0)
            return 0;
    return n;
}

/* Small core objects (headers, autograd nodes) from thread-local free lists
 * (small_alloc.c); the free must pass the size the block was asked with. */
WEFT_INTERNAL void *weft_small_alloc(size_t n);
WEFT_INTERNAL void *weft_small_calloc(size_t n);
WEFT_INTERNAL void weft_small_free(void *p, size_t n);

/* A tensor struct with refcount 1 and no storage; metadata zeroed. Autoreleased by the
 * caller through weft_tensor_finish(). */
WEFT_INTERNAL weft_tensor *weft_tensor_alloc_struct(void);
/* New tensor header over storage (retained), contiguous strides for shape. */
WEFT_INTERNAL weft_tensor *weft_tensor_make(struct weft_storage *storage, int ndim,
                                           const int64_t *shape, const int64_t *stride,
                                           int64_t offset, enum weft_dtype dtype);
/* t's elements in row-major order viewed with shape of the same numel: t itself when
 * contiguous, else a contiguous copy (view.c). */
WEFT_INTERNAL weft_tensor *weft_reshape_contiguous(weft_tensor *t, int ndim, const int64_t *shape);
/* Hands a freshly created tensor to the innermost scope; returns it. */
#define weft_tensor_finish(t) weft_autorelease(t)
/* Strides for empty_like(t, memory_format=preserve): t's own when t is non-overlapping
 * and dense (those of its size-1 dims too), else dense strides in the order of t's
 * (infer_dense_strides). Returns true when the tensor they describe is contiguous. */
WEFT_INTERNAL bool weft_preserve_strides(const weft_tensor *t, int64_t *strides);
/* Frees a non-strided tensor's layout_data through its layout's vtable (layout.c). */
WEFT_INTERNAL void weft_layout_data_free(weft_tensor *t);
/* a + b for two tensors of one non-strided layout through its vtable (autograd's
 * gradient sums); NULL with an error when the layouts differ or it has no add(). */
WEFT_INTERNAL weft_tensor *weft_layout_add(const weft_tensor *a, const weft_tensor *b);
/* Where PyTorch prints Tensor.type() ("torch.cuda.FloatTensor"): "float32 tensor" /
 * "float32 tensor on cuda" into buf. */
WEFT_INTERNAL const char *weft_torch_type_str(const weft_tensor *t, char *buf, size_t size);
/* "cpu" / "cuda:0" into a static thread-local buffer (for messages). */
WEFT_INTERNAL const char *weft_device_name_tl(weft_device dev);
/* ---- the registry's own kinds and the loader's hooks into it --------------------------- */
struct weft_kind;
struct weft_options;
WEFT_INTERNAL extern const struct weft_kind weft_plugin_kind;  /* plugin.c */
WEFT_INTERNAL extern const struct weft_kind weft_backend_kind; /* backend.c */
WEFT_INTERNAL extern const struct weft_kind weft_layout_kind;  /* layout.c */
/* The name of the plugin whose init() runs on this thread, or "" (plugin.c). */
WEFT_INTERNAL const char *weft_plugin_initialising(void);
/* Calls fn with each name of `kind` that a manifest on the search path provides (plugin.c;
 * the names live only during the call). */
WEFT_INTERNAL void weft_plugin_each_provided(const char *kind,
                                             void (*fn)(void *ctx, const char *name), void *ctx);
/* ---- the search path (plugin_path.c) ------------------------------------------------ */
/* ".../weft-cuda.so" -> "cuda"; false when the file is not named like a plugin. */
WEFT_INTERNAL bool weft_plugin_name_from_file(const char *path, char *name, size_t size);
/* The first weft-<name>.so on the search path, malloc'd; NULL with an error listing the
 * directories searched. */
WEFT_INTERNAL char *weft_plugin_path_find(const char *name);
/* Every plugin file on the search path, first of each name: a malloc'd array of n
 * malloc'd paths into *files; returns n, or negative with an error. */
WEFT_INTERNAL int weft_plugin_path_files(char ***files);
/* The manifest of the plugin file at path (cached per file version), NULL when none. */
WEFT_INTERNAL const char *weft_plugin_manifest_of(const char *path);
/* The first plugin file on the search path whose manifest provides kind:name, malloc'd;
 * NULL when none. */
WEFT_INTERNAL char *weft_plugin_provider_file(const char *kind, const char *name);

/* When no plugin provides kind:name because the file that would is shadowed (an earlier
 * file on the path has its file name, and only the first of a name is used): the earlier
 * file into *shadow and the provider into *provider (malloc'd), true. Else false. */
WEFT_INTERNAL bool weft_plugin_path_shadowed(const char *kind, const char *name, char **shadow,
                                             char **provider);
/* The next file on the search path with path's file name, after path (malloc'd); NULL
 * when there is none. */
WEFT_INTERNAL char *weft_plugin_path_later_copy(const char *path);
/* Appends to buf (size bytes) why kind:name could not be had from the search path: a
 * shadowing file that was rejected and why (plugin.c), or, for a provider at `failed`
 * that failed to load, the later copy that was not tried. Nothing when there is no such
 * thing to say. */
WEFT_INTERNAL void weft_plugin_explain_missing(const char *kind, const char *name,
                                               const char *failed, char *buf, size_t size);

/* Loads the first plugin on the search path whose manifest provides kind:name: 0 when it
 * loaded, 1 when no plugin provides it, negative (error set) when it failed to load. */
WEFT_INTERNAL int weft_plugin_autoload(const char *kind, const char *name);

/* ---- manifests (manifest.c) ------------------------------------------------------------ */
/* The .weft_manifest section of the plugin file at path, malloc'd; NULL when none
 * (elf.c). */
WEFT_INTERNAL char *weft_manifest_read(const char *path);
/* 0 unless path is an ELF file of ours whose loadable segments do not all lie inside it,
 * which dlopen() would die on (SIGBUS): then an error naming the file (elf.c). */
WEFT_INTERNAL int weft_elf_check_whole(const char *path);
/* 0 when every directive is well formed, else an error naming plugin and line. */
WEFT_INTERNAL int weft_manifest_check(const char *text, const char *plugin);
/* Calls fn for each kind:name of the provides lines; stops at (and returns) nonzero. */
WEFT_INTERNAL int weft_manifest_each_provided(const char *text,
                                              int (*fn)(void *ctx, const char *kind,
                                                        const char *name),
                                              void *ctx);
WEFT_INTERNAL bool weft_manifest_provides(const char *text, const char *kind, const char *name);
/* Applies the env lines with values from options (defaults where absent). */
WEFT_INTERNAL void weft_manifest_apply_env(const char *text, const struct weft_options *options);
/* Frees t's autograd metadata (autograd.c); called when t dies. */
WEFT_INTERNAL void weft_autograd_meta_free(weft_tensor *t);
/* The op layer's ops installed through weft_autograd_set_ops (autograd.c): each fails
 * naming itself while none are installed. */
WEFT_INTERNAL weft_tensor *weft_grad_add(weft_tensor *a, weft_tensor *b);
WEFT_INTERNAL weft_tensor *weft_grad_add_(weft_tensor *a, weft_tensor *b);
WEFT_INTERNAL weft_tensor *weft_grad_sum(weft_tensor *t, int ndims, const int *dims, bool keepdim);
WEFT_INTERNAL weft_tensor *weft_grad_scatter_add(weft_tensor *t, int dim, weft_tensor *index,
                                                 weft_tensor *src);
WEFT_INTERNAL uint64_t weft_grad_random_offset(void);
WEFT_INTERNAL void weft_grad_random_set_offset(uint64_t offset);
/* The gradient of a strided view (g's shape, stride, rel_offset counted from its base's
 * offset) for the base: g added into zeros laid out as the base (base_shape,
 * base_stride) at the positions the view read; elements of an overlapping view add up
 * (view.c). A new tensor in the current scope, or NULL. */
WEFT_INTERNAL weft_tensor *weft_view_grad_to_base(weft_tensor *g, const int64_t *stride,
                                                  int64_t rel_offset, int base_ndim,
                                                  const int64_t *base_shape,
                                                  const int64_t *base_stride);
/* expand without autograd (view.c): what the recorded weft_expand runs, and what the
 * core's own code calls. */
WEFT_INTERNAL weft_tensor *weft_fwd_expand(weft_tensor *t, int ndim, const int64_t *shape);
/* Activation checkpointing (checkpoint.c), as autograd.c's saved slots see it: the frame
 * whose forward is running on this thread (NULL when none); while it records, a save
 * becomes placeholder number weft_checkpoint_placeholder(f); while it reruns, each save is
 * also handed to weft_checkpoint_store. A placeholder is read through
 * weft_checkpoint_saved (rerunning the segment the first time) and let go through
 * weft_checkpoint_drop. */
struct weft_checkpoint_frame;
WEFT_INTERNAL struct weft_checkpoint_frame *weft_checkpoint_active(void);
/* Checkpointed forwards running now, on any thread: while none is, a save tests this
 * word and reads no thread-local. */
WEFT_INTERNAL extern int weft_checkpoint_running;
#define WEFT_CHECKPOINT_ACTIVE()                                                              \
    (__builtin_expect(__atomic_load_n(&weft_checkpoint_running, __ATOMIC_RELAXED) != 0, 0)    \
         ? weft_checkpoint_active()                                                           \
         : NULL)
WEFT_INTERNAL bool weft_checkpoint_recording(const struct weft_checkpoint_frame *f);
WEFT_INTERNAL int weft_checkpoint_placeholder(struct weft_checkpoint_frame *f);
WEFT_INTERNAL void weft_checkpoint_store(struct weft_checkpoint_frame *f, weft_tensor *alias);
WEFT_INTERNAL weft_tensor *weft_checkpoint_saved(struct weft_checkpoint_frame *f, int index);
WEFT_INTERNAL void weft_checkpoint_drop(struct weft_checkpoint_frame *f, int index);
/* The observer of the core's events (observer.c, weft/observer.h), NULL when none: each
 * place that reports to it loads it once and tests it, a branch predicted untaken. */
struct weft_observer;
WEFT_INTERNAL extern const struct weft_observer *weft_observer_now;
#define WEFT_OBSERVER() __atomic_load_n(&weft_observer_now, __ATOMIC_ACQUIRE)
WEFT_INTERNAL int weft_observe_dispatch(const struct weft_observer *o,
                                        const struct weft_op_call *call);
WEFT_INTERNAL int weft_dispatch_unobserved(const struct weft_op_call *call);
WEFT_INTERNAL void weft_observe_storage(const struct weft_observer *o,
                                        const struct weft_storage *s, bool alloc);
WEFT_INTERNAL void *weft_observe_node_enter(const struct weft_observer *o, const char *name);
WEFT_INTERNAL void weft_observe_node_exit(const struct weft_observer *o, void *token);
/* Says in the pending out-of-memory error (if that is the one) which op wanted what
 * tensor, and in which backward node (oom.c). */
WEFT_INTERNAL void weft_oom_context(int ndim, const int64_t *shape, enum weft_dtype dtype,
                                    weft_device dev);
/* The backward node running on this thread, NULL when none (autograd.c). */
WEFT_INTERNAL const char *weft_autograd_running_node(void);

#endif
