/*
 * A JSON-Schema validator for tool arguments: the draft-7 subset that tool
 * schemas use, compiled once into a tree of nodes so that validation never
 * compares keyword names, and checked against the official draft-7 test
 * suite (tests/tools/unit/test_tool_schema.c).
 *
 * Keywords (draft-7 semantics):
 *   type (a name or an array of names; "integer" is any number with an
 *   integral value, so 1.0 is an integer), enum, const (deep equality,
 *   numbers compared by value), properties, required, additionalProperties,
 *   patternProperties, propertyNames, dependencies, min/maxProperties,
 *   items (one schema or a tuple) with additionalItems, contains,
 *   min/maxItems, uniqueItems, min/maxLength (counted in Unicode code
 *   points), pattern, minimum, maximum, exclusiveMinimum, exclusiveMaximum
 *   (numbers, the draft-7 form), multipleOf, allOf, anyOf, oneOf, not,
 *   if/then/else, definitions, boolean schemas, and local $ref.
 *   Annotations (title, description, default, examples, format, $comment,
 *   readOnly, ...) and unknown keywords are ignored; "format" is an
 *   annotation only, as draft 7 says by default.
 *
 * $ref: "#" followed by a JSON pointer into the root document ("#",
 * "#/definitions/x", "#/$defs/x", "#/properties/a/items/0", ...), with
 * ~0 / ~1 escapes and percent-decoding. As in draft 7, a $ref replaces
 * its sibling keywords. $id is not used to resolve references: every ref
 * points into the root document. A ref that is not a local pointer (a
 * URL, a relative file name, an "#anchor") is a compile error
 * ("unsupported remote $ref ..."). A chain of references that loops back
 * without descending into the instance ({"$ref": "#"}, or a cycle through
 * allOf / anyOf / oneOf / not / if / dependencies) is a compile error too,
 * since validating against it would never end.
 *
 * Regular expressions (pattern, patternProperties) are ECMA-262 in JSON
 * Schema, read as with the u flag and no other. They are compiled once, at
 * compile time, by PCRE2 (UTF mode) after a small pre-pass that keeps
 * ECMA's meaning where PCRE2's differs: \d, \w and \b are ASCII-only, \s
 * is ECMA's Unicode white space, `.` excludes only \n, \r, U+2028 and
 * U+2029, `$` holds only at the very end, a back-reference to a group that
 * did not match matches the empty string, [] matches nothing and [^]
 * anything; \uHHHH (surrogate pairs joined), \u{H...}, \xHH, \cX,
 * \p{...} / \P{...} (General_Category long names too), lookahead,
 * lookbehind (each alternative of fixed length: a PCRE2 10.42 limit),
 * back-references and named groups work. Escapes and group syntax that
 * ECMA-262 does not have (\h, \A, \Q, (?i), (?>...), possessive
 * quantifiers, ...) are refused, as is any pattern PCRE2 cannot compile:
 * the message is PCRE2's own (or the pre-pass's) with the offset in the
 * pattern as written:
 *   "/pattern: invalid regex \"(a\": missing closing parenthesis at offset 2"
 * Each match is bounded (a match limit, a depth limit and a heap limit,
 * schema.c's RX_* and docs/tools.md): a pattern that reaches one on a value
 * fails the validation with "... too complex to validate", never a hang.
 * docs/tools.md lists the remaining differences from ECMA-262.
 *
 * Limits: a schema document nested deeper than PC_SCHEMA_MAX_DEPTH levels
 * is refused at compile time. Validation descends at most
 * PC_SCHEMA_MAX_FRAMES schema applications deep and does at most
 * PC_SCHEMA_MAX_STEPS units of work (schema applications, pairwise item
 * comparisons, value comparisons); an instance that needs more is
 * rejected with a message saying so, never a crash or a hang.
 *
 * Numbers are cJSON doubles: integers beyond 2^53 lose precision, a
 * literal too large for a double (1e400) is an infinity (a number, and an
 * integer), and NaN (only possible in a cJSON tree built by hand) is of
 * type number but fails every numeric keyword. multipleOf allows for the
 * rounding of decimal fractions (0.0075 is a multiple of 0.0001); a
 * quotient too large for a double (1e308 / 0.1) is not a multiple. Object members with duplicate names (a cJSON
 * tree may hold them) are each validated against the property's schema;
 * lookups by name (required, dependencies, equality) see the first one.
 *
 * Errors: compile errors name the schema location as a JSON pointer and
 * the rule ("/properties/x/type: unknown type \"strin\""). A validation
 * error is ONE message for the model, naming the instance location as a
 * JSON pointer ("/" for the whole instance) and the rule:
 *   "/path: expected string, got number"
 *   "/: missing required property \"path\""
 *   "/mode: must be one of \"a\", \"b\""
 *   "/: unexpected property \"foo\"; allowed properties are \"path\", \"mode\""
 * When anyOf / oneOf alternatives all fail, the message is the one of the
 * alternative that got furthest, or "expected string or null, got number"
 * when every alternative wants another type.
 *
 * Threads: compile and free on any thread, once. A compiled schema is
 * read-only: any number of threads may validate against it at the same
 * time.
 */
#ifndef PINCER_AGENTS_TOOLS_SCHEMA_H
#define PINCER_AGENTS_TOOLS_SCHEMA_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Nesting of the schema document (objects and arrays) accepted by compile. */
#define PC_SCHEMA_MAX_DEPTH 256u
/* Nested schema applications one validation may go through. */
#define PC_SCHEMA_MAX_FRAMES 512u
/* Units of work one validation may do. */
#define PC_SCHEMA_MAX_STEPS 10000000u

typedef struct pc_schema pc_schema_t;

/*
 * Compiles `schema` (a JSON object or boolean; it is copied, the caller
 * keeps it). PC_EINVAL with a message in err for a malformed schema, an
 * unresolvable or remote $ref, a $ref cycle that never descends, an
 * invalid regex, or nesting beyond PC_SCHEMA_MAX_DEPTH; PC_ENOMEM
 * when memory runs out. On success the caller owns *out (pc_schema_free).
 * err may be NULL or errlen 0 when no message is wanted.
 */
int pc_schema_compile(const cJSON *schema, pc_schema_t **out, char *err, size_t errlen);

/* The same, from JSON text (e.g. a tool definition's "parameters"). A
 * text that is not JSON is PC_EINVAL ("/: not valid JSON"). */
int pc_schema_compile_text(const char *text, pc_schema_t **out, char *err, size_t errlen);

/* Frees a compiled schema. NULL is ignored. */
void pc_schema_free(pc_schema_t *s);

/*
 * 0 when `instance` is valid; PC_EINVAL when it is not (or when s or
 * instance is NULL, or a limit above was reached), with one message in
 * err (see the header comment). err may be NULL or errlen 0.
 */
int pc_schema_validate(const pc_schema_t *s, const cJSON *instance, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
