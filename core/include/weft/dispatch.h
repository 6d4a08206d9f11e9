/* weft/dispatch.h: how the core runs an op: ids, kernels keyed by (op, device type,
 * layout, dtype), the call a kernel receives, and the strided iterator kernels loop with.
 *
 * The core knows no op by name but the few it runs itself (copies, fills, the random
 * fills): their ids come first. The op layer (libweft-ops, weft/kernel.h) numbers its
 * built-in ops after them from its op table and names them when it loads; ops beyond the
 * built-in ones are named at run time (weft_op_register), from id WEFT_OP_FIRST_NAMED.
 * Ids, the call struct and its fields are ABI (weft/registry.h's WEFT_ABI_VERSION). */
#ifndef WEFT_DISPATCH_H
#define WEFT_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(ID, name): the ops the core runs (copy.c, creation.c, random.c), ids 0.. in order.
 *   COPY: out[0] <- in[0], same shape, dtypes may differ (convert), same device.
 *   FILL: out[0][:] = scalar[0] (cast), out[0] of any strides.
 *   RAND_UNIFORM / RAND_NORMAL / RANDINT: out[0] filled in row-major element order from
 *     Philox with key ints[0] (seed) and block counter ints[1] + ..., see philox.h.
 *     uniform: scalar[0] low, scalar[1] high; normal: scalar[0] mean, scalar[1] std;
 *     randint: ints[2] low, ints[3] high. */
#define WEFT_CORE_OPS(X)                                                                      \
    X(COPY, "copy") X(FILL, "fill") X(RAND_UNIFORM, "rand_uniform")                            \
    X(RAND_NORMAL, "rand_normal") X(RANDINT, "randint")

enum weft_core_op {
#define WEFT_CORE_OP_ENUM(id, name) WEFT_OP_##id,
    WEFT_CORE_OPS(WEFT_CORE_OP_ENUM)
#undef WEFT_CORE_OP_ENUM
    WEFT_OP_CORE_COUNT
};

/* Built-in ids (the core's, then the op table's) lie below this; named ops from it. */
#define WEFT_OP_FIRST_NAMED 256

#define WEFT_OP_MAX_INPUTS 4
#define WEFT_OP_MAX_OUTPUTS 2
#define WEFT_OP_MAX_SCALARS 4
#define WEFT_OP_MAX_INTS 16

struct weft_op_call {
    int op;
    int nin, nout;
    const weft_tensor *in[WEFT_OP_MAX_INPUTS];
    weft_tensor *out[WEFT_OP_MAX_OUTPUTS];
    double scalar[WEFT_OP_MAX_SCALARS];
    int64_t ints[WEFT_OP_MAX_INTS];
    /* ABI 2: a typed parameter block, for ops whose parameters do not fit the slots above
     * (a plugin's named op documents its struct: weft/optim.h's weft_adam_step_params). A
     * kernel checks params_size against the struct it expects. NULL and 0 for the
     * built-in ops. */
    const void *params;
    size_t params_size;
};

/* Returns 0, or a negative status with weft_error_set() called. */
typedef int (*weft_kernel_fn)(const struct weft_op_call *call);

/* Registers fn for (op, device type, layout) and the dtypes in dtype_mask
 * (WEFT_DTYPE_BIT...). A later registration for the same key replaces the earlier one
 * for the dtypes it names. */
int weft_kernel_register(int op, int device_type, int layout, uint32_t dtype_mask,
                         weft_kernel_fn fn);
/* One row of a backend's kernel table: the op (a built-in id, or named: name non-NULL,
 * resolved by weft_op_register), the dtypes the function takes, and the function. A row
 * with fn NULL ends a table. */
struct weft_kernel_entry {
    int op;
    const char *name;
    uint32_t dtypes;
    weft_kernel_fn fn;
};
/* Registers every row of a table for (device type, layout), in order; returns 0, or the
 * first failure's status with its error set (naming the op). A plugin keeps one table of
 * its kernel families and registers it once (Lua's luaL_Reg). */
int weft_kernel_register_table(int device_type, int layout, const struct weft_kernel_entry *table);
/* The kernel for a key and dtype, or NULL. */
weft_kernel_fn weft_kernel_lookup(int op, int device_type, int layout, enum weft_dtype dtype);
/* Dtypes registered for a key (0 when none). */
uint32_t weft_kernel_dtypes(int op, int device_type, int layout);

/* Finds and runs the kernel for call (device and layout from out[0], or in[0] when there
 * are no outputs). Missing kernels give NotImplemented errors naming op, device, layout
 * and dtype, e.g. "\"add\" not implemented for 'Bool' on cpu". */
int weft_dispatch(const struct weft_op_call *call);

/* weft_dispatch for a call whose operands the caller knows to be strided, with in[0] and
 * out[0] present: it skips the per-operand layout check, which is a third of a tiny op's
 * dispatch (the op layer's front ends). A missing kernel goes through weft_dispatch for
 * its error or an on-demand plugin load. */
int weft_dispatch_strided(const struct weft_op_call *call);

/* ---- op ids and names ---------------------------------------------------------------- */
/* Names the built-in ops first..first+n-1 (the op layer, as it loads): ids at or above
 * WEFT_OP_CORE_COUNT and below WEFT_OP_FIRST_NAMED, each either unnamed or already of that
 * name. Returns 0, or an error naming the id and both names. */
int weft_op_define(int first, int n, const char *const *names);
/* The id of a named op (a plugin's "adam_step"): the built-in op of that name, else one
 * assigned at the first registration; every caller gets the same id. */
int weft_op_register(const char *name);
int weft_op_lookup(const char *name); /* -1 when unknown */
const char *weft_op_name(int op);    /* "unknown" for an id with no name */
/* One past the highest id in use: loops over ops run to it, skipping ids with no name
 * (weft_op_name "unknown") and no kernels. */
int weft_op_count(void);

/* ---- the strided iterator ---------------------------------------------------------------
 * Walks up to WEFT_ITER_MAX_OPERANDS same-shaped tensors (all on one device, strides in
 * bytes) in the memory order of operand 0, after dropping size-1 dims and merging dims
 * that are contiguous in every operand. Kernels then write only their inner loop. */
#define WEFT_ITER_MAX_OPERANDS 4

struct weft_iter {
    int ndim;                 /* after coalescing; 0 means a single element */
    int nops;
    int64_t numel;
    int64_t shape[WEFT_MAX_DIMS];                               /* innermost last */
    int64_t strides[WEFT_ITER_MAX_OPERANDS][WEFT_MAX_DIMS];     /* bytes */
    char *data[WEFT_ITER_MAX_OPERANDS];                         /* element 0 */
};

/* Inner loop: n elements; data[i] advances by stride[i] bytes per element. */
typedef void (*weft_iter_loop_fn)(void *ctx, char **data, const int64_t *stride, int64_t n);

/* Sets up the walk. ops[i] may be NULL only past nops. All must share ops[0]'s shape. */
int weft_iter_init(struct weft_iter *it, int nops, const weft_tensor *const *ops);
/* Calls loop for linear elements [begin, end) (row-major over the coalesced shape), in
 * pieces that never cross an innermost line. Safe to call from several threads on
 * disjoint ranges. */
void weft_iter_run(const struct weft_iter *it, int64_t begin, int64_t end, weft_iter_loop_fn loop,
                   void *ctx);

#ifdef __cplusplus
}
#endif
#endif
