/* weft/models.h: libweft-models, whole models built of libweft-nn's layers: nanoGPT's GPT
 * (weft/gpt.h). */
#ifndef WEFT_MODELS_H
#define WEFT_MODELS_H

#include "weft/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the library's module types ("gpt") in the registry; returns 0, or an error
 * code with the error set. Loading the library registers them too: a program that names
 * them only in an INI file calls this so that the library stays linked (a linker with
 * --as-needed drops a library none of whose symbols the program uses). Calling it again
 * does nothing. */
int weft_models_register(void);

#ifdef __cplusplus
}
#endif
#endif
