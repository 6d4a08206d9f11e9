/* tests/test_random.c: to be written. */
#include "testutil.h"
