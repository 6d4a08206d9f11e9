/* plugins/sparse/print.c: placeholder, being written. */
typedef int sparse_print_placeholder_;
