/* plugins/cpu/dtype.c: dtype-generic scalar access for the slow paths. */
#include "cpu.h"

double cpu_load_as_double(enum weft_dtype dt, const void *p)
{
    switch (dt) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        return (double)weft_load_##name(p);
        WEFT_FOR_ALL_DTYPES(CASE)
#undef CASE
    default:
        return 0;
    }
}

void cpu_store_from_double(enum weft_dtype dt, void *p, double v)
{
    switch (dt) {
    case WEFT_BOOL:
        weft_store_bool(p, v != 0);
        return;
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        weft_store_##name(p, (C)v);                                                            \
        return;
        WEFT_FOR_INTEGRAL_DTYPES(CASE)
        WEFT_FOR_FLOATING_DTYPES(CASE)
#undef CASE
    default:
        return;
    }
}
