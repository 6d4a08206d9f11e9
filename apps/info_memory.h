/* apps/info_memory.h: weft-info --memory CONFIG.ini (info_memory.c). */
#ifndef WEFT_APPS_INFO_MEMORY_H
#define WEFT_APPS_INFO_MEMORY_H

/* Prints the memory the model of the config at path takes; argv holds the options after
 * the path (--checkpoint N, --set section.key=value). 0, or negative with the error
 * printed. */
int info_memory_config(const char *path, int argc, char **argv);

#endif
