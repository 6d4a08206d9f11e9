/* tests/test_io_sparse.c: being written. */
#include "testutil.h"
TestSuite(io_sparse, .init = tu_setup, .fini = tu_teardown);
Test(io_sparse, placeholder) {}
