/*
 * JSON printing with cheap integers.
 *
 * cJSON 1.7.15 prints every number with "%1.15g" and then reads it back
 * with sscanf to check the round trip: about a quarter of a microsecond a
 * number, and a run prints dozens (token counts, sizes, durations, ids).
 * pc_json_print prints integer-valued numbers as plain digits and leaves
 * everything else to cJSON, so the output is what cJSON would print.
 */
#ifndef PINCER_IO_JSON_PRINT_H
#define PINCER_IO_JSON_PRINT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cJSON_PrintUnformatted(item), faster. The tree is changed while it is
 * printed and restored before the call returns, so it must not be read by
 * another thread meanwhile; what it only references (reference items'
 * children) is not touched. Free the result with cJSON_free; NULL when out
 * of memory (or item is NULL). */
char *pc_json_print(cJSON *item);

/* An item that prints `json` (JSON text) as it is, without copying it:
 * keep the text alive and unchanged while the item is in a tree.
 * cJSON_Delete leaves the text alone. NULL when out of memory. */
cJSON *pc_json_raw_ref(const char *json);

/* The same, owning `json`: text from cJSON_malloc, freed with the item.
 * NULL when out of memory (json is then freed). */
cJSON *pc_json_raw_take(char *json);

/* Writes s[0..n) as a JSON string, quotes included, escaped as cJSON
 * escapes it (", \ and control characters; UTF-8 passes as it is), in
 * pieces through `put` (for a writer that builds JSON text by hand). */
typedef void (*pc_json_put_fn)(void *arg, const char *p, size_t n);
void pc_json_escape(const char *s, size_t n, pc_json_put_fn put, void *arg);

#ifdef __cplusplus
}
#endif

#endif
