/* core/random.c: the process-wide Philox stream (seed + offset). A random op (ops/random.c)
 * reserves a run of Philox blocks by advancing the offset atomically, then fills its
 * output from those blocks with the element mapping of weft/philox.h. Values depend only
 * on (seed, offset, element index): not on threads, strides or device. */
#include "internal.h"

/* PyTorch's default_rng_seed_val. */
#define DEFAULT_SEED 67280421310721ull

static uint64_t rng_seed = DEFAULT_SEED;
static uint64_t rng_offset;

void weft_manual_seed(uint64_t seed)
{
    __atomic_store_n(&rng_seed, seed, __ATOMIC_RELAXED);
    __atomic_store_n(&rng_offset, 0, __ATOMIC_RELAXED);
}

uint64_t weft_random_seed(void)
{
    return __atomic_load_n(&rng_seed, __ATOMIC_RELAXED);
}

uint64_t weft_random_offset(void)
{
    return __atomic_load_n(&rng_offset, __ATOMIC_RELAXED);
}

void weft_random_set_offset(uint64_t offset)
{
    __atomic_store_n(&rng_offset, offset, __ATOMIC_RELAXED);
}

uint64_t weft_random_reserve(uint64_t blocks)
{
    return __atomic_fetch_add(&rng_offset, blocks, __ATOMIC_RELAXED);
}
