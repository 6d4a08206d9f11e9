/* plugins/sparse/mm.c: placeholder, being written. */
typedef int sparse_mm_placeholder_;
