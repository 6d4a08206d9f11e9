/* plugins/cpu/dtype.c: dtype-generic scalar access for the slow paths. */
#include "cpu.h"

double cpu_load_as_double(enum weft_dtype dt, const void *p)
{
    switch (dt) {
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        return (double)cpu_load_##name(p);
        CPU_FOR_ALL_DTYPES(CASE)
#undef CASE
    default:
        return 0;
    }
}

void cpu_store_from_double(enum weft_dtype dt, void *p, double v)
{
    switch (dt) {
    case WEFT_BOOL:
        cpu_store_bool(p, v != 0);
        return;
#define CASE(name, id, T, C)                                                                  \
    case id:                                                                                  \
        cpu_store_##name(p, (C)v);                                                            \
        return;
        CPU_FOR_INTEGRAL_DTYPES(CASE)
        CPU_FOR_FLOATING_DTYPES(CASE)
#undef CASE
    default:
        return;
    }
}
