/* tests/test_copy.c: to be written. */
#include "testutil.h"
