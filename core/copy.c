/* core/copy.c: to be written. */
