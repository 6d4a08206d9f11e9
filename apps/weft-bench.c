/* apps/weft-bench.c: to be written. */ int main(void) { return 0; }
