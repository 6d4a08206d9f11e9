/* core/creation.c: to be written. */
