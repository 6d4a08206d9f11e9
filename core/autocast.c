/* core/autocast.c: the thread's autocast state (weft/autocast.h), a mode the op layer's
 * front ends read and the backward engine suspends, as grad mode. Which ops autocast
 * casts, and to what, is the op layer's table (ops/autocast.c). */
#include "internal.h"
#include "weft/autocast.h"
#include "weft/backend.h"

WEFT_FAST_TLS struct weft_autocast_state weft_autocast_current = {.dtype = WEFT_BF16};

/* The low-precision dtypes a scope on device_type may name: its backend's (PyTorch's
 * AutocastCPU takes bfloat16 only); both where no backend is registered or it does not
 * say. */
static uint32_t autocast_dtypes(int device_type)
{
    const struct weft_backend *b = weft_backend_find(device_type);
    if (b && WEFT_VTABLE_HAS(b, autocast_dtypes))
        return b->autocast_dtypes;
    return WEFT_DTYPE_BIT(WEFT_BF16) | WEFT_DTYPE_BIT(WEFT_F16);
}

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
    if (!(autocast_dtypes(device_type) & WEFT_DTYPE_BIT(dtype))) {
        const char *type = weft_device_type_name(device_type);
        char upper[32];
        size_t i = 0;
        for (; type[i] && i < sizeof upper - 1; i++)
            upper[i] = (char)(type[i] >= 'a' && type[i] <= 'z' ? type[i] - 'a' + 'A' : type[i]);
        upper[i] = '\0';
        /* PyTorch 1.13: "Currently, AutocastCPU only support Bfloat16 as the
         * autocast_cpu_dtype" */
        weft_error_set(WEFT_ERR_VALUE, "Currently, Autocast%s only support %s as the autocast_%s_dtype",
                       upper, dtype == WEFT_F16 ? "Bfloat16" : "Float16", type);
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
