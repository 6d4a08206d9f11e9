/* plugins/cpu/kernels_random.c: to be written. */
#include "cpu.h"

int cpu_register_random_kernels(void)
{
    return 0;
}
