/* core/backend.c: to be written. */
