/* tests/test_sparse.c: being written. */
#include "testutil.h"
TestSuite(sparse, .init = tu_setup, .fini = tu_teardown);
Test(sparse, placeholder) {}
