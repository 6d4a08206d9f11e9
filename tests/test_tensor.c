/* tests/test_tensor.c: to be written. */
#include "testutil.h"
