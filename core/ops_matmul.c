/* core/ops_matmul.c: to be written. */
