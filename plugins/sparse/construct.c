/* plugins/sparse/construct.c: placeholder, being written. */
typedef int sparse_construct_placeholder_;
