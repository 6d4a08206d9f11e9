/* ops/autocast.c: autocast's policy by op name (weft/autocast_policy.h), for the ops of
 * the op table and those of the libraries above; the scope itself is the core's
 * (core/autocast.c, weft/autocast.h). The op layer's own front ends read their row's
 * policy at compile time (internal.h's OP_AUTOCAST_RETURN).
 *
 * The policies follow PyTorch 1.13's aten/src/ATen/autocast_mode.cpp: its CUDA lists
 * (lower_precision_fp, fp32 and fp32_set_opt_dtype) are used for every device type, so
 * that a bf16 run on the CPU keeps softmax, reductions, norms and losses in float32 as
 * a CUDA run does (PyTorch's own CPU list keeps only some losses in float32). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "weft/autocast_policy.h"

static const struct {
    const char *op;
    enum weft_autocast_policy policy;
} policy_table[] = {
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

#define POLICY_COUNT (sizeof policy_table / sizeof *policy_table)

/* Every autograd op asks for its policy on every call under autocast, most of them to
 * hear "promote" after a miss through the whole table. So the names are hashed once into
 * an open-addressing index (slots hold table index + 1, 0 is empty; at most a quarter
 * full, so a miss ends within a probe or two), and a lookup costs one hash of the name
 * and usually one strcmp. Keyed by the text, not the pointer: a name in a reused buffer
 * gets the same answer as before. */
#define POLICY_SLOTS 512

static uint8_t policy_index[POLICY_SLOTS];
static pthread_once_t policy_index_once = PTHREAD_ONCE_INIT;

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static void build_policy_index(void)
{
    _Static_assert(POLICY_COUNT * 4 <= POLICY_SLOTS && POLICY_COUNT < 255,
                   "autocast policy index: too many names for its slots");
    for (size_t i = 0; i < POLICY_COUNT; i++) {
        uint32_t h = name_hash(policy_table[i].op) % POLICY_SLOTS;
        while (policy_index[h] != 0)
            h = (h + 1) % POLICY_SLOTS;
        policy_index[h] = (uint8_t)(i + 1);
    }
}

enum weft_autocast_policy weft_autocast_policy(const char *op)
{
    if (!op)
        return WEFT_AUTOCAST_PROMOTE;
    pthread_once(&policy_index_once, build_policy_index);
    for (uint32_t h = name_hash(op) % POLICY_SLOTS; policy_index[h] != 0;
         h = (h + 1) % POLICY_SLOTS) {
        size_t i = policy_index[h] - 1u;
        if (strcmp(policy_table[i].op, op) == 0)
            return policy_table[i].policy;
    }
    return WEFT_AUTOCAST_PROMOTE;
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
