/* core/ops_reduce.c: to be written. */
