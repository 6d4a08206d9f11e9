/* tests/test_reduce.c: to be written. */
#include "testutil.h"
