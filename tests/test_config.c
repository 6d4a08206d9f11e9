/* tests/test_config.c: to be written. */
#include "testutil.h"
