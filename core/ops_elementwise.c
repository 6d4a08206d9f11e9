/* core/ops_elementwise.c: to be written. */
