/* apps/weft-info.c: to be written. */ int main(void) { return 0; }
