/* tests/test_print.c: to be written. */
#include "testutil.h"
