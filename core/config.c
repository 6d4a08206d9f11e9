/* core/config.c: to be written. */
