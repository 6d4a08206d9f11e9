/* core/print.c: to be written. */
