/* tests/test_index.c: to be written. */
#include "testutil.h"
