/* tests/test_sparse_mm.c: being written. */
#include "testutil.h"
TestSuite(sparse_mm, .init = tu_setup, .fini = tu_teardown);
Test(sparse_mm, placeholder) {}
