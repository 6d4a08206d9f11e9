/* apps/app_version.h: `--version` of weft's programs: "weft-train 0.1.0", with the
 * library's version beside it when the program runs against another libweft. */
#ifndef WEFT_APP_VERSION_H
#define WEFT_APP_VERSION_H

#include <stdio.h>
#include <string.h>

#include <weft/version.h>

static inline void app_print_version(FILE *f, const char *program)
{
    const char *lib = weft_version();
    fprintf(f, "%s %s", program, WEFT_VERSION_STRING);
    if (strcmp(lib, WEFT_VERSION_STRING) != 0)
        fprintf(f, " (libweft %s)", lib);
    fputc('\n', f);
}

#endif
