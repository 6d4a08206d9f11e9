/* core/runtime.c: to be written. */
