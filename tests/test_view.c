/* tests/test_view.c: to be written. */
#include "testutil.h"
