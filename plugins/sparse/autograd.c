/* plugins/sparse/autograd.c: placeholder, being written. */
typedef int sparse_autograd_placeholder_;
