/* plugins/sparse/arith.c: placeholder, being written. */
typedef int sparse_arith_placeholder_;
