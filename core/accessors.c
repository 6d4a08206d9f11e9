/* Tensor accessors (weft/tensor.h, "properties"): user code reads a tensor's metadata
 * through these, so the struct's fields can stay an ABI detail for plugins. */
#include "weft/tensor.h"

int weft_tensor_ndim(const weft_tensor *t)
{
    return t ? t->ndim : -1;
}

const int64_t *weft_tensor_shape(const weft_tensor *t)
{
    return t ? t->shape : NULL;
}

const int64_t *weft_tensor_strides(const weft_tensor *t)
{
    return t ? t->stride : NULL;
}

int64_t weft_tensor_storage_offset(const weft_tensor *t)
{
    return t ? t->offset : -1;
}

enum weft_dtype weft_tensor_dtype(const weft_tensor *t)
{
    return t ? t->dtype : WEFT_DTYPE_COUNT;
}

weft_device weft_tensor_device(const weft_tensor *t)
{
    return t ? t->device : (weft_device){-1, -1};
}
