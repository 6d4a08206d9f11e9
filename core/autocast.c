/* core/autocast.c: the thread's autocast state (weft/autocast.h), a mode the op layer's
 * front ends read and the backward engine suspends, as grad mode. Which ops autocast
 * casts, and to what, is the op layer's table (ops/autocast.c). */
#include "internal.h"
#include "weft/autocast.h"

WEFT_FAST_TLS struct weft_autocast_state weft_autocast_current = {.dtype = WEFT_BF16};

weft_autocast_state weft_autocast_begin(int device_type, enum weft_dtype dtype)
{
    weft_autocast_state prev = weft_autocast_current;
    if (dtype != WEFT_BF16 && dtype != WEFT_F16) {
        weft_error_set(WEFT_ERR_VALUE,
                       "In autocast, but the target dtype is not supported: expected "
                       "torch.bfloat16 or torch.float16, got torch.%s",
                       weft_dtype_valid(dtype) ? weft_dtype_name(dtype) : "(invalid)");
        return prev;
    }
    if (device_type < 0 || device_type >= WEFT_MAX_DEVICE_TYPES) {
        weft_error_set(WEFT_ERR_VALUE,
                       "User specified an unsupported autocast device_type '%d': expected a "
                       "device type id below %d",
                       device_type, WEFT_MAX_DEVICE_TYPES);
        return prev;
    }
    weft_autocast_current = (weft_autocast_state){true, (int16_t)device_type, dtype};
    return prev;
}

weft_autocast_state weft_autocast_suspend(void)
{
    weft_autocast_state prev = weft_autocast_current;
    weft_autocast_current.enabled = false;
    return prev;
}

void weft_autocast_end(weft_autocast_state previous)
{
    weft_autocast_current = previous;
}

weft_autocast_state weft_autocast_get(void)
{
    return weft_autocast_current;
}

bool weft_autocast_enabled(void)
{
    return weft_autocast_current.enabled;
}

enum weft_dtype weft_autocast_dtype(void)
{
    return weft_autocast_current.dtype;
}
