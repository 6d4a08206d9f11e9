/* core/view.c: to be written. */
