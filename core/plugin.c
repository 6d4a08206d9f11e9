/* core/plugin.c: to be written. */
