/* core/version.c */
#include "weft/version.h"

const char *weft_version(void)
{
    return WEFT_VERSION_STRING;
}
