/* tests/test_dtype.c: to be written. */
#include "testutil.h"
