/* plugins/sparse/print.c: placeholder, being written. */
#include <weft/error.h>

#include "sparse_impl.h"

char *sparse_repr(const weft_tensor *t)
{
    (void)t;
    weft_error_set(WEFT_ERR_NOT_IMPLEMENTED, "repr of sparse tensors: not written yet");
    return NULL;
}
