/* weft/config.h: INI configuration with typed getters and strict checking.
 *
 * Every getter records (section, key) as known, present or not; after reading,
 * weft_config_check_unknown() rejects any section or key that nobody asked for, with a
 * "did you mean" suggestion. Errors (WEFT_ERR_CONFIG) name the file, section and key,
 * the value found and what was expected.
 */
#ifndef WEFT_CONFIG_H
#define WEFT_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "weft/options.h"

#ifdef __cplusplus
extern "C" {
#endif

struct weft_config;

/* Parses an INI file; NULL with an error naming the file (and line) on failure. */
struct weft_config *weft_config_load(const char *path);
/* Parses INI text; `name` stands for the file name in messages. */
struct weft_config *weft_config_parse(const char *text, const char *name);
/* An empty config (all defaults). */
struct weft_config *weft_config_new(const char *name);
void weft_config_free(struct weft_config *cfg);

/* Applies "section.key=value" (the section is everything before the last '.' of the
 * left side, so "layer.fc1.out_features=10" works). Errors on malformed text. The value
 * remembers the assignment: an unknown key it adds is reported as "--set a.b=1: [a] unknown
 * key 'b'", and weft_config_explain_error() names it in errors about its value. */
int weft_config_set(struct weft_config *cfg, const char *assignment);
/* Sets one value directly (replaces an existing one). */
int weft_config_put(struct weft_config *cfg, const char *section, const char *key,
                    const char *value);

bool weft_config_has(const struct weft_config *cfg, const char *section, const char *key);
bool weft_config_has_section(const struct weft_config *cfg, const char *section);
/* Reads [old_name] as [name] (a section's former name, kept for old files): renames it
 * when the file has it and not [name], before anything reads either. Returns 1 when it
 * renamed (the caller warns), 0 when not, negative on failure. */
int weft_config_rename_section(struct weft_config *cfg, const char *old_name, const char *name);

/* The keys of [section] as options (weft/options.h), which is how readers, optimizers,
 * layer types and plugins read them; every key read through it counts as known. Owned by
 * cfg (valid while it lives); NULL only for a NULL cfg or section, or out of memory. */
const weft_options *weft_config_options(struct weft_config *cfg, const char *section);

/* Makes cfg the source of plugins' options (weft_plugin_set_options_source): a plugin
 * loaded from now on gets the section named after it, [cpu] for weft-cpu.so, until cfg
 * is freed or another config takes over. weft_runtime_init calls it. */
void weft_config_serve_plugins(struct weft_config *cfg);

/* Getters: the value, or `def` when absent. A present value that does not parse is an
 * error (returns negative; *out untouched). The string getter returns NULL only when
 * absent and def is NULL; the pointer lives as long as cfg. */
const char *weft_config_string(struct weft_config *cfg, const char *section, const char *key,
                               const char *def);
int weft_config_int(struct weft_config *cfg, const char *section, const char *key, int64_t def,
                    int64_t *out);
int weft_config_double(struct weft_config *cfg, const char *section, const char *key, double def,
                       double *out);
/* true/false, yes/no, on/off, 1/0 (case-insensitive). */
int weft_config_bool(struct weft_config *cfg, const char *section, const char *key, bool def,
                     bool *out);
/* One of `choices` (NULL-terminated); *out is its index. The error lists the choices. */
int weft_config_choice(struct weft_config *cfg, const char *section, const char *key,
                       const char *const *choices, int def, int *out);

/* Sections in file order (NULL-terminated array valid while cfg lives), e.g. to walk
 * [layer.*] sections. */
const char *const *weft_config_sections(const struct weft_config *cfg);
/* Keys of a section in file order (NULL-terminated). */
const char *const *weft_config_keys(const struct weft_config *cfg, const char *section);
/* Marks a key as known (key NULL: the whole section), for sections read by other means. */
void weft_config_mark_known(struct weft_config *cfg, const char *section, const char *key);

/* Error for the first section/key present but never asked for, with its line:
 * "config.ini: line 4: [runtime] unknown key 'thread' (did you mean 'threads'?)". */
int weft_config_check_unknown(const struct weft_config *cfg);
/* For a program whose setup failed with rc before it could call the check above: when the
 * pending error is a config error and a section or key present but never asked for is a
 * near miss of one asked for and absent ([dta] beside a missing [data], 'reder' beside a
 * missing 'reader'), the typo is the cause: the error becomes "config.ini: unknown
 * section [dta] (did you mean [data]?)" and its code is returned. Otherwise, when the
 * error (a config, value, plugin or device error) is "config.ini: [section] key ..." (also
 * after a prefix: "epoch 1, batch 6: config.ini: ...") about a value weft_config_set gave
 * (or about a section whose values it changed, naming no key of the file, or naming a key
 * of the file and mentioning one weft_config_set gave), it becomes "--set section.key=v
 * (set on the command line, over config.ini): [section] key ...". Otherwise rc, error
 * untouched. */
int weft_config_explain_error(const struct weft_config *cfg, int rc);
const char *weft_config_name(const struct weft_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
