/* core/autocast.c: the thread's autocast state (weft/autocast.h), a mode the op layer's
 * front ends read and the backward engine suspends, as grad mode. Which dtypes a scope
 * may name on a device, and which ops autocast casts to what, are the op layer's policies
 * (ops/autocast.c, which opens a scope: weft_autocast_begin). */
#include "internal.h"
#include "weft/autocast.h"

WEFT_FAST_TLS struct weft_autocast_state weft_autocast_current = {.dtype = WEFT_BF16};

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
