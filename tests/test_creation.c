/* tests/test_creation.c: to be written. */
#include "testutil.h"
