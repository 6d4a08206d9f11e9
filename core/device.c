/* core/device.c: to be written. */
