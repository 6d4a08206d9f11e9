/* core/random.c: to be written. */
