/* tests/test_elementwise.c: to be written. */
#include "testutil.h"
