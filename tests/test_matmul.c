/* tests/test_matmul.c: to be written. */
#include "testutil.h"
