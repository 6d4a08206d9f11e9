/* core/ops_index.c: to be written. */
