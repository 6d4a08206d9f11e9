/* plugins/sparse/convert.c: placeholder, being written. */
typedef int sparse_convert_placeholder_;
