/* plugins/cpu/kernels_binary.c: to be written. */
#include "cpu.h"

int cpu_register_binary_kernels(void)
{
    return 0;
}
