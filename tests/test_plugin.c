/* tests/test_plugin.c: to be written. */
#include "testutil.h"
