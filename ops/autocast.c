/* ops/autocast.c: autocast's policies by op name (weft/autocast_policy.h), one table per
 * kind of device as PyTorch keeps one per dispatch key, for the ops of the op table and
 * those of the libraries above; a backend names its table (weft/backend.h's
 * autocast_policy). The scope itself is the core's (core/autocast.c, weft/autocast.h).
 *
 * "cuda": PyTorch 1.13's CUDA lists (aten/src/ATen/autocast_mode.cpp's lower_precision_fp,
 * fp32 and fp32_set_opt_dtype): the op table's AUTOCAST column and the names below; the
 * op layer's front ends read their row's column at compile time (internal.h's
 * OP_AUTOCAST_RETURN), to skip asking for the rows that run as given everywhere.
 * "cpu": its AutocastCPU lists, with each entry checked against PyTorch 1.13 under
 * torch.autocast("cpu") op by op: GEMMs and convolutions in bfloat16; prod, cdist, the
 * losses, the 3-d pools, the paddings, transposed convolutions... in float32; softmax,
 * sums, exp, log, pow and the norms run in what they are given. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "weft/autocast_policy.h"
#include "weft/backend.h"

struct policy_entry {
    const char *op;
    enum weft_autocast_policy policy;
};

static const struct policy_entry cuda_entries[] = {
    /* the op table's rows (weft/op_table.h's AUTOCAST column) */
#define POLICY_ROW(ID, name, DTYPES, AUTOCAST, ...) {#name, WEFT_AUTOCAST_##AUTOCAST},
    WEFT_OP_TABLE(POLICY_ROW) WEFT_OPS_COMPOSITE(POLICY_ROW)
#undef POLICY_ROW
    /* the ops of the libraries above (nn), which ask by these names: PyTorch's
     * lower_precision_fp and fp32 lists */
    {"linear", WEFT_AUTOCAST_LOWER},
    {"conv2d", WEFT_AUTOCAST_LOWER},
    {"scaled_dot_product_attention", WEFT_AUTOCAST_LOWER},
    {"layer_norm", WEFT_AUTOCAST_FP32},
    {"group_norm", WEFT_AUTOCAST_FP32},
    {"batch_norm", WEFT_AUTOCAST_FP32},
    {"norm", WEFT_AUTOCAST_FP32},
    {"cdist", WEFT_AUTOCAST_FP32},
    {"cross_entropy", WEFT_AUTOCAST_FP32},
    {"nll_loss", WEFT_AUTOCAST_FP32},
    {"mse_loss", WEFT_AUTOCAST_FP32},
    {"l1_loss", WEFT_AUTOCAST_FP32},
    {"smooth_l1_loss", WEFT_AUTOCAST_FP32},
    {"huber_loss", WEFT_AUTOCAST_FP32},
    {"kl_div", WEFT_AUTOCAST_FP32},
    {"binary_cross_entropy", WEFT_AUTOCAST_FP32},
    {"binary_cross_entropy_with_logits", WEFT_AUTOCAST_FP32},
};

/* PyTorch 1.13's AutocastCPU: what is not listed runs as given (softmax, log_softmax, sum,
 * exp, log, pow, layer_norm, batch_norm, group_norm, norm, cumsum, logsumexp among them). */
static const struct policy_entry cpu_entries[] = {
    /* lower_precision_fp */
    {"conv1d", WEFT_AUTOCAST_LOWER},
    {"conv2d", WEFT_AUTOCAST_LOWER},
    {"conv3d", WEFT_AUTOCAST_LOWER},
    {"bmm", WEFT_AUTOCAST_LOWER},
    {"mm", WEFT_AUTOCAST_LOWER},
    {"baddbmm", WEFT_AUTOCAST_LOWER},
    {"addmm", WEFT_AUTOCAST_LOWER},
    {"addbmm", WEFT_AUTOCAST_LOWER},
    {"linear", WEFT_AUTOCAST_LOWER},
    {"matmul", WEFT_AUTOCAST_LOWER},
    {"conv_tbc", WEFT_AUTOCAST_LOWER},
    /* 1.13 has no such op: its attention is made of bmm's, so it runs in bfloat16 */
    {"scaled_dot_product_attention", WEFT_AUTOCAST_LOWER},
    /* fp32 */
    {"conv_transpose1d", WEFT_AUTOCAST_FP32},
    {"conv_transpose2d", WEFT_AUTOCAST_FP32},
    {"conv_transpose3d", WEFT_AUTOCAST_FP32},
    {"avg_pool3d", WEFT_AUTOCAST_FP32},
    {"max_pool3d", WEFT_AUTOCAST_FP32},
    {"adaptive_avg_pool3d", WEFT_AUTOCAST_FP32},
    {"max_unpool2d", WEFT_AUTOCAST_FP32},
    {"max_unpool3d", WEFT_AUTOCAST_FP32},
    {"reflection_pad1d", WEFT_AUTOCAST_FP32},
    {"reflection_pad2d", WEFT_AUTOCAST_FP32},
    {"replication_pad1d", WEFT_AUTOCAST_FP32},
    {"replication_pad2d", WEFT_AUTOCAST_FP32},
    {"replication_pad3d", WEFT_AUTOCAST_FP32},
    {"grid_sampler", WEFT_AUTOCAST_FP32},
    {"prod", WEFT_AUTOCAST_FP32},
    {"quantile", WEFT_AUTOCAST_FP32},
    {"nanquantile", WEFT_AUTOCAST_FP32},
    {"cdist", WEFT_AUTOCAST_FP32},
    {"trace", WEFT_AUTOCAST_FP32},
    {"pinverse", WEFT_AUTOCAST_FP32},
    {"cross_entropy", WEFT_AUTOCAST_FP32},
    {"nll_loss", WEFT_AUTOCAST_FP32},
    {"mse_loss", WEFT_AUTOCAST_FP32},
    {"l1_loss", WEFT_AUTOCAST_FP32},
    {"smooth_l1_loss", WEFT_AUTOCAST_FP32},
    {"huber_loss", WEFT_AUTOCAST_FP32},
    {"kl_div", WEFT_AUTOCAST_FP32},
    {"binary_cross_entropy", WEFT_AUTOCAST_FP32},
    {"binary_cross_entropy_with_logits", WEFT_AUTOCAST_FP32},
    {"cosine_embedding_loss", WEFT_AUTOCAST_FP32},
    {"hinge_embedding_loss", WEFT_AUTOCAST_FP32},
    {"poisson_nll_loss", WEFT_AUTOCAST_FP32},
    {"margin_ranking_loss", WEFT_AUTOCAST_FP32},
    {"soft_margin_loss", WEFT_AUTOCAST_FP32},
    {"triplet_margin_loss", WEFT_AUTOCAST_FP32},
    {"multi_margin_loss", WEFT_AUTOCAST_FP32},
    {"multilabel_margin_loss", WEFT_AUTOCAST_FP32},
};

/* Every autograd op asks for its policy on every call under autocast, most of them to
 * hear "promote" after a miss through the whole table. So each table's names are hashed
 * once into an open-addressing index (slots hold entry index + 1, 0 is empty; at most a
 * quarter full, so a miss ends within a probe or two), and a lookup costs one hash of the
 * name and usually one strcmp. Keyed by the text, not the pointer: a name in a reused
 * buffer gets the same answer as before. */
#define POLICY_SLOTS 512

struct policy_table {
    const struct policy_entry *entries;
    size_t count;
    uint8_t index[POLICY_SLOTS];
};

#define POLICY_COUNT(e) (sizeof(e) / sizeof *(e))
_Static_assert(POLICY_COUNT(cuda_entries) * 4 <= POLICY_SLOTS && POLICY_COUNT(cuda_entries) < 255,
               "autocast policy index: too many names for its slots");
_Static_assert(POLICY_COUNT(cpu_entries) * 4 <= POLICY_SLOTS && POLICY_COUNT(cpu_entries) < 255,
               "autocast policy index: too many names for its slots");

static struct policy_table cuda_table = {cuda_entries, POLICY_COUNT(cuda_entries), {0}};
static struct policy_table cpu_table = {cpu_entries, POLICY_COUNT(cpu_entries), {0}};
static pthread_once_t policy_index_once = PTHREAD_ONCE_INIT;

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static void index_table(struct policy_table *t)
{
    for (size_t i = 0; i < t->count; i++) {
        uint32_t h = name_hash(t->entries[i].op) % POLICY_SLOTS;
        while (t->index[h] != 0)
            h = (h + 1) % POLICY_SLOTS;
        t->index[h] = (uint8_t)(i + 1);
    }
}

static void build_policy_index(void)
{
    index_table(&cuda_table);
    index_table(&cpu_table);
}

static enum weft_autocast_policy table_lookup(const struct policy_table *t, const char *op)
{
    for (uint32_t h = name_hash(op) % POLICY_SLOTS; t->index[h] != 0; h = (h + 1) % POLICY_SLOTS) {
        size_t i = t->index[h] - 1u;
        if (strcmp(t->entries[i].op, op) == 0)
            return t->entries[i].policy;
    }
    return WEFT_AUTOCAST_PROMOTE;
}

/* The table a device type's backend names (weft/backend.h): CUDA's unless it says "cpu". */
static const struct policy_table *device_table(int device_type)
{
    const struct weft_backend *b = weft_backend_find(device_type);
    if (b && WEFT_VTABLE_HAS(b, autocast_policy) && strcmp(b->autocast_policy, "cpu") == 0)
        return &cpu_table;
    return &cuda_table;
}

enum weft_autocast_policy weft_autocast_policy_on(int device_type, const char *op)
{
    if (!op)
        return WEFT_AUTOCAST_PROMOTE;
    pthread_once(&policy_index_once, build_policy_index);
    return table_lookup(device_table(device_type), op);
}

enum weft_autocast_policy weft_autocast_policy(const char *op)
{
    return weft_autocast_policy_on(weft_autocast_get().device_type, op);
}

/* The dtype t runs in under policy, or t's own dtype when it is not cast. */
static enum weft_dtype target_dtype(const weft_tensor *t, enum weft_autocast_policy policy)
{
    /* PyTorch's is_eligible: floating, not double, on the autocast device type. */
    if (t->device.type != weft_autocast_get().device_type || !weft_dtype_is_floating(t->dtype) ||
        t->dtype == WEFT_F64)
        return t->dtype;
    if (policy == WEFT_AUTOCAST_LOWER)
        return weft_autocast_dtype();
    if (policy == WEFT_AUTOCAST_FP32)
        return WEFT_F32;
    return t->dtype;
}

int weft_autocast_cast_inputs(const char *op, int n, weft_tensor **inputs)
{
    if (!weft_autocast_enabled())
        return 0;
    enum weft_autocast_policy policy = weft_autocast_policy(op);
    if (policy == WEFT_AUTOCAST_PROMOTE)
        return 0;
    for (int i = 0; i < n; i++) {
        weft_tensor *t = inputs[i];
        if (!t)
            continue;
        enum weft_dtype dt = target_dtype(t, policy);
        if (dt == t->dtype)
            continue;
        weft_tensor *cast = weft_to_dtype(t, dt);
        if (!cast)
            return weft_error_code();
        inputs[i] = cast;
    }
    return 0;
}
