/* plugins/sparse/spmm_cpu.c: placeholder, being written. */
typedef int sparse_spmm_cpu_placeholder_;
