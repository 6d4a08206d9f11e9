/* tests/test_iter.c: to be written. */
#include "testutil.h"
