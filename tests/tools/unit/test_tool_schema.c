/*
 * The tool-argument validator (agents/tools/schema.h): every keyword and
 * its message, compile errors, the regex dialect, hostile inputs (deep
 * nesting, reference cycles, exponential schemas, huge numbers, NaN,
 * hand-built cJSON trees), concurrent validation, and the official
 * draft-7 JSON-Schema test suite as Debian ships it.
 *
 * Tables write JSON with single quotes for readability; J() turns them
 * into double quotes (a literal apostrophe is written \u0027).
 */
#include <criterion/criterion.h>

#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agents/tools/schema.h"

/* ---- helpers ---------------------------------------------------------------- */

/* The JSON text with ' read as ". Caller frees. */
static char *J(const char *s)
{
	char *t = strdup(s);
	cr_assert_not_null(t);
	for (char *p = t; *p; p++)
		if (*p == '\'')
			*p = '"';
	return t;
}

static cJSON *parse(const char *text)
{
	char *t = J(text);
	cJSON *v = cJSON_Parse(t);
	cr_assert_not_null(v, "not JSON: %s", t);
	free(t);
	return v;
}

static pc_schema_t *compile(const char *schema)
{
	cJSON *doc = parse(schema);
	pc_schema_t *s = NULL;
	char err[512];
	int rc = pc_schema_compile(doc, &s, err, sizeof(err));
	cr_assert_eq(rc, 0, "schema %s: %s", schema, err);
	cJSON_Delete(doc);
	return s;
}

/* The message of validating `instance`, or "" when it is valid. */
static void check(const char *schema, const char *instance, const char *want)
{
	pc_schema_t *s = compile(schema);
	cJSON *x = parse(instance);
	char err[512];
	int rc = pc_schema_validate(s, x, err, sizeof(err));
	if (!want) {
		cr_expect_eq(rc, 0, "%s against %s: %s", instance, schema, err);
		cr_expect_str_eq(err, "", "%s against %s", instance, schema);
	} else {
		cr_expect_eq(rc, PC_EINVAL, "%s against %s should fail", instance, schema);
		cr_expect_str_eq(err, want, "%s against %s: got [%s], want [%s]", instance, schema, err, want);
	}
	cJSON_Delete(x);
	pc_schema_free(s);
}

typedef struct vcase {
	const char *schema;
	const char *instance;
	const char *error; /* NULL: valid */
} vcase_t;

static void run_cases(const vcase_t *cases, size_t n)
{
	for (size_t i = 0; i < n; i++)
		check(cases[i].schema, cases[i].instance, cases[i].error);
}

#define RUN(cases) run_cases(cases, sizeof(cases) / sizeof(cases[0]))

/* The compile error of `schema` (text in J() form). */
static void compile_fails(const char *schema, const char *want)
{
	char *t = J(schema);
	pc_schema_t *s = NULL;
	char err[512];
	int rc = pc_schema_compile_text(t, &s, err, sizeof(err));
	cr_expect_eq(rc, PC_EINVAL, "%s should not compile", t);
	cr_expect_null(s);
	cr_expect_str_eq(err, want, "%s: got [%s], want [%s]", t, err, want);
	free(t);
}

/* ---- keywords and messages ------------------------------------------------------- */

Test(schema_keywords, type)
{
	static const vcase_t cases[] = {
		{"{'type':'string'}", "'a'", NULL},
		{"{'type':'string'}", "5", "/: expected string, got number"},
		{"{'type':'integer'}", "1.0", NULL},
		{"{'type':'integer'}", "-7", NULL},
		{"{'type':'integer'}", "1.5", "/: expected integer, got number"},
		{"{'type':'integer'}", "'1'", "/: expected integer, got string"},
		{"{'type':'number'}", "1", NULL},
		{"{'type':'number'}", "true", "/: expected number, got boolean"},
		{"{'type':'boolean'}", "false", NULL},
		{"{'type':'null'}", "null", NULL},
		{"{'type':'null'}", "0", "/: expected null, got number"},
		{"{'type':'object'}", "[]", "/: expected object, got array"},
		{"{'type':'array'}", "{}", "/: expected array, got object"},
		{"{'type':['string','null']}", "null", NULL},
		{"{'type':['null','string']}", "5", "/: expected string or null, got number"},
		{"{'type':['integer','number']}", "'x'", "/: expected number, got string"},
		{"{'type':['string','integer','boolean']}", "{}", "/: expected string, integer or boolean, got object"},
		{"{'properties':{'path':{'type':'string'}}}", "{'path':5}", "/path: expected string, got number"},
		{"{'items':{'type':'string'}}", "['a',2]", "/1: expected string, got number"},
		{"{'properties':{'a/b':{'properties':{'c~d':{'type':'string'}}}}}", "{'a/b':{'c~d':1}}",
		 "/a~1b/c~0d: expected string, got number"},
		/* type constrains only its own instance, other keywords only theirs */
		{"{'minLength':3}", "5", NULL},
		{"{'minimum':3}", "'a'", NULL},
	};
	RUN(cases);
}

Test(schema_keywords, enum_const)
{
	static const vcase_t cases[] = {
		{"{'enum':['a','b']}", "'a'", NULL},
		{"{'enum':['a','b']}", "'c'", "/: must be one of \"a\", \"b\""},
		{"{'properties':{'mode':{'enum':['a','b']}}}", "{'mode':'c'}", "/mode: must be one of \"a\", \"b\""},
		{"{'enum':[1,null,{'x':[1]}]}", "1.0", NULL},
		{"{'enum':[1,null,{'x':[1]}]}", "{'x':[1.0]}", NULL},
		{"{'enum':[1,null,{'x':[1]}]}", "true", "/: must be one of 1, null, {\"x\":[1]}"},
		{"{'enum':[]}", "1", "/: no value is allowed (the enum is empty)"},
		{"{'enum':[false]}", "0", "/: must be one of false"},
		{"{'const':{'a':[1,2]}}", "{'a':[1,2.0]}", NULL},
		{"{'const':{'a':[1,2]}}", "{'a':[1]}", "/: must be equal to {\"a\":[1,2]}"},
		{"{'const':{'a':1,'b':2}}", "{'b':2,'a':1}", NULL},
		{"{'const':{'a':1,'b':2}}", "{'b':2,'a':1,'c':3}", "/: must be equal to {\"a\":1,\"b\":2}"},
		{"{'const':1}", "true", "/: must be equal to 1"},
		{"{'const':null}", "null", NULL},
		{"{'const':'x'}", "'y'", "/: must be equal to \"x\""},
	};
	RUN(cases);
}

Test(schema_keywords, numbers)
{
	static const vcase_t cases[] = {
		{"{'minimum':5}", "5", NULL},
		{"{'minimum':5}", "3", "/: must be >= 5, got 3"},
		{"{'exclusiveMinimum':5}", "5", "/: must be > 5, got 5"},
		{"{'exclusiveMinimum':5}", "5.5", NULL},
		{"{'maximum':2.5}", "2.5", NULL},
		{"{'maximum':2.5}", "3", "/: must be <= 2.5, got 3"},
		{"{'exclusiveMaximum':0}", "0", "/: must be < 0, got 0"},
		{"{'exclusiveMaximum':0}", "-1e-300", NULL},
		{"{'multipleOf':2}", "10", NULL},
		{"{'multipleOf':2}", "7", "/: must be a multiple of 2, got 7"},
		{"{'multipleOf':0.5}", "1.2", "/: must be a multiple of 0.5, got 1.2"},
		{"{'multipleOf':0.0001}", "0.0075", NULL},
		{"{'multipleOf':0.01}", "19.99", NULL},
		{"{'multipleOf':0.0001}", "0.00751", "/: must be a multiple of 0.0001, got 0.00751"},
		{"{'multipleOf':1.5}", "-4.5", NULL},
		{"{'minimum':1,'maximum':3,'type':'integer'}", "2", NULL},
		{"{'properties':{'n':{'minimum':1}}}", "{'n':0}", "/n: must be >= 1, got 0"},
	};
	RUN(cases);
}

Test(schema_keywords, strings)
{
	static const vcase_t cases[] = {
		{"{'minLength':2}", "'ab'", NULL},
		{"{'minLength':2}", "'a'", "/: expected at least 2 characters, got 1"},
		{"{'minLength':1}", "''", "/: expected at least 1 character, got 0"},
		/* code points, not bytes: é is two bytes, 😀 four */
		{"{'minLength':2}", "'\\u00e9'", "/: expected at least 2 characters, got 1"},
		{"{'maxLength':2}", "'\\u00e9\\u00e9'", NULL},
		{"{'maxLength':2}", "'\\ud83d\\ude00\\ud83d\\ude00'", NULL},
		{"{'maxLength':2}", "'\\ud83d\\ude00\\ud83d\\ude00\\ud83d\\ude00'",
		 "/: expected at most 2 characters, got 3"},
		{"{'maxLength':1}", "'ab'", "/: expected at most 1 character, got 2"},
		{"{'pattern':'^[a-z]+$'}", "'abc'", NULL},
		{"{'pattern':'^[a-z]+$'}", "'aBc'", "/: must match the pattern \"^[a-z]+$\""},
		{"{'properties':{'id':{'pattern':'^\\\\d{3}$'}}}", "{'id':'12a'}",
		 "/id: must match the pattern \"^\\\\d{3}$\""},
	};
	RUN(cases);
}

Test(schema_keywords, arrays)
{
	static const vcase_t cases[] = {
		{"{'minItems':2}", "[1,2]", NULL},
		{"{'minItems':2}", "[1]", "/: expected at least 2 items, got 1"},
		{"{'maxItems':1}", "[1,2]", "/: expected at most 1 item, got 2"},
		{"{'uniqueItems':true}", "[1,'1',true,null,[1],{'a':1}]", NULL},
		{"{'uniqueItems':true}", "[1,2,1.0]", "/: items 0 and 2 are equal; items must be unique"},
		{"{'uniqueItems':true}", "[{'a':1,'b':2},{'b':2,'a':1}]",
		 "/: items 0 and 1 are equal; items must be unique"},
		{"{'uniqueItems':true}", "[0,false]", NULL},
		{"{'uniqueItems':false}", "[1,1]", NULL},
		{"{'items':{'type':'integer'}}", "[1,2,'3']", "/2: expected integer, got string"},
		{"{'items':[{'type':'string'},{'type':'integer'}]}", "['a',1,{}]", NULL},
		{"{'items':[{'type':'string'},{'type':'integer'}]}", "['a','b']", "/1: expected integer, got string"},
		{"{'items':[{'type':'string'},{'type':'integer'}],'additionalItems':false}", "['a',1,2]",
		 "/: unexpected item at index 2 (at most 2 items are allowed)"},
		{"{'items':[{}],'additionalItems':false}", "[1,2]",
		 "/: unexpected item at index 1 (at most 1 item is allowed)"},
		{"{'items':[{}],'additionalItems':{'type':'string'}}", "[1,'a',2]", "/2: expected string, got number"},
		{"{'items':{},'additionalItems':false}", "[1,2,3]", NULL},
		{"{'items':[],'additionalItems':false}", "[]", NULL},
		{"{'items':[],'additionalItems':false}", "[1]",
		 "/: unexpected item at index 0 (at most 0 items are allowed)"},
		{"{'contains':{'type':'integer'}}", "['a',1]", NULL},
		{"{'contains':{'type':'integer'}}", "['a']",
		 "/: must contain at least one item that matches the \"contains\" schema"},
		{"{'items':{'items':{'type':'null'}}}", "[[null],[null,0]]", "/1/1: expected null, got number"},
	};
	RUN(cases);
}

Test(schema_keywords, objects)
{
	static const vcase_t cases[] = {
		{"{'required':['path']}", "{'path':1}", NULL},
		{"{'required':['path']}", "{}", "/: missing required property \"path\""},
		{"{'required':['path']}", "[]", NULL},
		{"{'required':['a\\\"b']}", "{}", "/: missing required property \"a\\\"b\""},
		{"{'properties':{'a':{'required':['b']}}}", "{'a':{}}", "/a: missing required property \"b\""},
		{"{'properties':{'path':{},'mode':{}},'additionalProperties':false}", "{'path':1,'foo':2}",
		 "/: unexpected property \"foo\"; allowed properties are \"path\", \"mode\""},
		{"{'properties':{'path':{}},'additionalProperties':false}", "{'foo':2}",
		 "/: unexpected property \"foo\"; the allowed property is \"path\""},
		{"{'type':'object','properties':{},'additionalProperties':false}", "{'x':1}",
		 "/: unexpected property \"x\"; no properties are allowed"},
		{"{'type':'object','properties':{},'additionalProperties':false}", "{}", NULL},
		{"{'additionalProperties':{'type':'integer'}}", "{'x':'a'}", "/x: expected integer, got string"},
		{"{'patternProperties':{'^x-':{'type':'string'}},'additionalProperties':false}", "{'x-a':'s','y':1}",
		 "/: unexpected property \"y\""},
		{"{'patternProperties':{'^x-':{'type':'string'}}}", "{'x-a':1}", "/x-a: expected string, got number"},
		{"{'properties':{'a':{'type':'string'}},'patternProperties':{'a':{'minLength':2}}}", "{'a':'x'}",
		 "/a: expected at least 2 characters, got 1"},
		{"{'minProperties':1}", "{}", "/: expected at least 1 property, got 0"},
		{"{'maxProperties':1}", "{'a':1,'b':2}", "/: expected at most 1 property, got 2"},
		{"{'propertyNames':{'maxLength':3}}", "{'abc':1}", NULL},
		{"{'propertyNames':{'maxLength':3}}", "{'abcd':1}",
		 "/: property name \"abcd\" does not match the \"propertyNames\" schema"},
		{"{'dependencies':{'a':['b']}}", "{'a':1}", "/: property \"a\" requires property \"b\""},
		{"{'dependencies':{'a':['b']}}", "{'b':1}", NULL},
		{"{'dependencies':{'a':{'required':['c']}}}", "{'a':1}", "/: missing required property \"c\""},
		{"{'properties':{'$ref':{'type':'string'}}}", "{'$ref':1}", "/$ref: expected string, got number"},
	};
	RUN(cases);
}

#define IF_THEN_ELSE                                                                                       \
	"{'if':{'properties':{'kind':{'const':'file'}}},'then':{'required':['path']},'else':{'required':['url']}}"

Test(schema_keywords, combinators)
{
	static const vcase_t cases[] = {
		{"{'properties':{'x':{'anyOf':[{'type':'string'},{'type':'null'}]}}}", "{'x':null}", NULL},
		{"{'properties':{'x':{'anyOf':[{'type':'string'},{'type':'null'}]}}}", "{'x':5}",
		 "/x: expected string or null, got number"},
		/* the alternative that got furthest into the instance speaks */
		{"{'anyOf':[{'type':'object','required':['a']},"
		 "{'properties':{'b':{'type':'integer'}},'required':['b']}]}",
		 "{'b':'x'}", "/b: expected integer, got string"},
		/* a branch of the right type beats one of the wrong type */
		{"{'anyOf':[{'type':'null'},{'type':'string','minLength':3}]}", "'ab'",
		 "/: expected at least 3 characters, got 2"},
		{"{'oneOf':[{'type':'integer'},{'minimum':0}]}", "-1", NULL},
		{"{'oneOf':[{'type':'integer'},{'minimum':0}]}", "5",
		 "/: must match exactly one oneOf alternative, but matches alternatives 0 and 1"},
		{"{'oneOf':[{'type':'string'},{'type':'boolean'}]}", "5", "/: expected string or boolean, got number"},
		{"{'allOf':[{'type':'object'},{'required':['a']}]}", "{}", "/: missing required property \"a\""},
		{"{'allOf':[{'type':'object'},{'required':['a']}]}", "{'a':1}", NULL},
		{"{'not':{'type':'string'}}", "1", NULL},
		{"{'not':{'type':'string'}}", "'x'", "/: must not match the \"not\" schema"},
		{"{'not':{'not':{'type':'string'}}}", "1", "/: must not match the \"not\" schema"},
		{IF_THEN_ELSE, "{'kind':'file'}", "/: missing required property \"path\""},
		{IF_THEN_ELSE, "{'kind':'web'}", "/: missing required property \"url\""},
		{"{'then':{'required':['path']}}", "{}", NULL},
		{"true", "{'anything':[1]}", NULL},
		{"false", "null", "/: no value is allowed here"},
		{"{'properties':{'foo':false}}", "{'foo':1}", "/foo: no value is allowed here"},
		{"{'properties':{'foo':false}}", "{'bar':1}", NULL},
	};
	RUN(cases);
}

Test(schema_keywords, refs)
{
	static const vcase_t cases[] = {
		{"{'definitions':{'pos':{'type':'integer','minimum':1}},"
		 "'properties':{'n':{'$ref':'#/definitions/pos'}}}",
		 "{'n':0}", "/n: must be >= 1, got 0"},
		{"{'$defs':{'s':{'type':'string'}},'items':{'$ref':'#/$defs/s'}}", "[1]",
		 "/0: expected string, got number"},
		{"{'$defs':{'a b':{'type':'string'}},'$ref':'#/$defs/a%20b'}", "1", "/: expected string, got number"},
		{"{'$defs':{'a/b':{'type':'string'},'c~d':{'type':'null'}},'anyOf':[{'$ref':'#/$defs/a~1b'},"
		 "{'$ref':'#/$defs/c~0d'}]}", "1", "/: expected string or null, got number"},
		{"{'items':[{'type':'integer'},{'$ref':'#/items/0'}]}", "[1,'x']", "/1: expected integer, got string"},
		/* a recursive tree */
		{"{'type':'object','properties':{'child':{'$ref':'#'},'v':{'type':'integer'}}}",
		 "{'child':{'child':{'v':'x'}}}", "/child/child/v: expected integer, got string"},
		{"{'type':'object','properties':{'child':{'$ref':'#'},'v':{'type':'integer'}}}",
		 "{'child':{'child':{'v':1}}}", NULL},
		/* draft 7: a $ref's siblings are ignored */
		{"{'definitions':{'a':{'type':'array'}},'properties':{'x':{'$ref':'#/definitions/a','maxItems':1}}}",
		 "{'x':[1,2,3]}", NULL},
		/* a chain of refs */
		{"{'definitions':{'a':{'type':'integer'},'b':{'$ref':'#/definitions/a'}},'$ref':'#/definitions/b'}",
		 "'x'",
		 "/: expected integer, got string"},
		{"{'$ref':'#/definitions/f','definitions':{'f':false}}", "1", "/: no value is allowed here"},
	};
	RUN(cases);
}

/* Unknown keywords and annotations change nothing. */
Test(schema_keywords, ignored)
{
	static const vcase_t cases[] = {
		{"{'title':'t','description':'d','default':5,'examples':[1],'format':'email','$comment':'c',"
		 "'x-custom':{'type':'nonsense'},'readOnly':true,'$schema':'http://json-schema.org/draft-07/schema#',"
		 "'$id':'http://example.com/s'}",
		 "'not an email'", NULL},
		{"{'type':'string','format':'date-time'}", "'yesterday'", NULL},
	};
	RUN(cases);
}

Test(schema_keywords, error_buffer)
{
	pc_schema_t *s = compile("{'required':['a_rather_long_property_name']}");
	cJSON *x = parse("{}");
	char small[16];
	memset(small, 'x', sizeof(small));
	cr_assert_eq(pc_schema_validate(s, x, small, sizeof(small)), PC_EINVAL);
	cr_assert_str_eq(small, "/: missing requ");
	cr_assert_eq(pc_schema_validate(s, x, NULL, 0), PC_EINVAL);
	cr_assert_eq(pc_schema_validate(s, x, small, 0), PC_EINVAL);
	char one[1] = {'x'};
	cr_assert_eq(pc_schema_validate(s, x, one, 1), PC_EINVAL);
	cr_assert_eq(one[0], '\0');
	/* a truncated message never ends inside a UTF-8 sequence */
	cJSON_Delete(x);
	pc_schema_free(s);
	s = compile("{'required':['\\u00e9\\u00e9']}");
	x = parse("{}");
	char cut[37]; /* "/: missing required property \"" is 31 bytes, then é é */
	cr_assert_eq(pc_schema_validate(s, x, cut, 33), PC_EINVAL);
	cr_assert_str_eq(cut, "/: missing required property \"\xc3\xa9");
	cr_assert_eq(pc_schema_validate(s, x, cut, 34), PC_EINVAL);
	cr_assert_str_eq(cut, "/: missing required property \"\xc3\xa9");
	cJSON_Delete(x);
	pc_schema_free(s);
	char err[64];
	cr_assert_eq(pc_schema_validate(NULL, NULL, err, sizeof(err)), PC_EINVAL);
	cr_assert_str_eq(err, "/: no schema or no value to validate");
}

/* ---- compile errors ---------------------------------------------------------------- */

Test(schema_compile, errors)
{
	static const struct {
		const char *schema, *error;
	} cases[] = {
		{"'x'", "/: a schema must be an object or a boolean, got string"},
		{"{'type':'strin'}", "/type: unknown type \"strin\""},
		{"{'properties':{'x':{'type':'strin'}}}", "/properties/x/type: unknown type \"strin\""},
		{"{'type':[]}", "/type: must not be an empty array"},
		{"{'type':5}", "/type: must be a type name or an array of type names"},
		{"{'type':['string',5]}", "/type: must be a type name or an array of type names"},
		{"{'type':'string','type':'number'}", "/type: the keyword appears twice"},
		{"{'enum':5}", "/enum: must be an array"},
		{"{'required':'a'}", "/required: must be an array of strings"},
		{"{'required':[1]}", "/required: must be an array of strings"},
		{"{'minLength':-1}", "/minLength: must be a non-negative integer"},
		{"{'maxItems':1.5}", "/maxItems: must be a non-negative integer"},
		{"{'minProperties':'1'}", "/minProperties: must be a non-negative integer"},
		{"{'minimum':'1'}", "/minimum: must be a number"},
		{"{'multipleOf':0}", "/multipleOf: must be a number greater than 0"},
		{"{'multipleOf':-2}", "/multipleOf: must be a number greater than 0"},
		{"{'exclusiveMinimum':true}",
		 "/exclusiveMinimum: must be a number (draft 7); the boolean form is draft 4"},
		{"{'uniqueItems':1}", "/uniqueItems: must be a boolean"},
		{"{'items':5}", "/items: must be a schema (an object or a boolean), got number"},
		{"{'items':[{},3]}", "/items/1: must be a schema (an object or a boolean), got number"},
		{"{'additionalProperties':'no'}",
		 "/additionalProperties: must be a schema (an object or a boolean), got string"},
		{"{'anyOf':[]}", "/anyOf: must be a non-empty array of schemas"},
		{"{'oneOf':{}}", "/oneOf: must be a non-empty array of schemas"},
		{"{'allOf':[{},3]}", "/allOf/1: must be a schema (an object or a boolean), got number"},
		{"{'properties':{'a':3}}", "/properties/a: must be a schema (an object or a boolean), got number"},
		{"{'properties':[]}", "/properties: must be an object of schemas"},
		{"{'dependencies':{'a':3}}", "/dependencies/a: must be an array of property names or a schema"},
		{"{'definitions':{'a':{'minimum':'x'}}}", "/definitions/a/minimum: must be a number"},
		{"{'patternProperties':{'(':{}}}",
		 "/patternProperties/(: invalid regex \"(\": missing closing parenthesis at offset 1"},
		{"{'pattern':5}", "/pattern: must be a string"},
		{"{'$ref':5}", "/$ref: must be a string"},
		{"{'$ref':'#/definitions/missing'}",
		 "/$ref: unresolvable $ref \"#/definitions/missing\": no such location in the schema"},
		{"{'$ref':'http://example.com/s.json'}",
		 "/$ref: unsupported remote $ref \"http://example.com/s.json\" (only local references such as "
		 "\"#/definitions/name\" are supported)"},
		{"{'properties':{'a':{'$ref':'other.json#/x'}}}",
		 "/properties/a/$ref: unsupported remote $ref \"other.json#/x\" (only local references such as "
		 "\"#/definitions/name\" are supported)"},
		{"{'$ref':'#foo'}", "/$ref: unresolvable $ref \"#foo\": only JSON pointers are supported, not anchors"},
		{"{'$ref':'#/a%2'}", "/$ref: unresolvable $ref \"#/a%2\": a malformed percent-encoding"},
		{"{'$ref':'#/a~2'}", "/$ref: unresolvable $ref \"#/a~2\": a '~' that is not ~0 or ~1"},
		{"{'items':[{}],'$defs':{'x':{'$ref':'#/items/01'}},'$ref':'#/$defs/x'}",
		 "/$defs/x/$ref: unresolvable $ref \"#/items/01\": no such location in the schema"},
		{"{'$ref':'#/definitions/x','definitions':{'x':5}}",
		 "/definitions/x: the target of $ref \"#/definitions/x\" is not a schema"},
		/* cycles that never descend into the instance */
		{"{'$ref':'#'}", "/: a $ref cycle that never descends into the instance"},
		{"{'definitions':{'a':{'$ref':'#/definitions/b'},'b':{'allOf':[{'$ref':'#/definitions/a'}]}}}",
		 "/definitions/a: a $ref cycle that never descends into the instance"},
		{"{'anyOf':[true,{'not':{'$ref':'#'}}]}", "/: a $ref cycle that never descends into the instance"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		compile_fails(cases[i].schema, cases[i].error);
}

Test(schema_compile, bad_calls)
{
	char err[64];
	pc_schema_t *s = (pc_schema_t *)&err; /* must be cleared */
	cr_assert_eq(pc_schema_compile(NULL, &s, err, sizeof(err)), PC_EINVAL);
	cr_assert_null(s);
	cr_assert_str_eq(err, "/: no schema");
	cJSON *doc = cJSON_CreateObject();
	cr_assert_eq(pc_schema_compile(doc, NULL, NULL, 0), PC_EINVAL);
	cJSON_Delete(doc);
	cr_assert_eq(pc_schema_compile_text("{", &s, err, sizeof(err)), PC_EINVAL);
	cr_assert_str_eq(err, "/: not valid JSON");
	cr_assert_eq(pc_schema_compile_text(NULL, &s, NULL, 0), PC_EINVAL);
	pc_schema_free(NULL);
}

/* The compiled schema is a copy: the caller's document may go. */
Test(schema_compile, owns_a_copy)
{
	cJSON *doc = parse("{'properties':{'a':{'enum':['x','y']}},'required':['a']}");
	pc_schema_t *s = NULL;
	cr_assert_eq(pc_schema_compile(doc, &s, NULL, 0), 0);
	cJSON_Delete(doc);
	cJSON *x = parse("{'a':'z'}");
	char err[128];
	cr_assert_eq(pc_schema_validate(s, x, err, sizeof(err)), PC_EINVAL);
	cr_assert_str_eq(err, "/a: must be one of \"x\", \"y\"");
	cJSON_Delete(x);
	pc_schema_free(s);
}

/* ---- regular expressions -------------------------------------------------------- */

static bool matches(const char *pattern, const char *text)
{
	cJSON *schema = cJSON_CreateObject();
	cr_assert_not_null(cJSON_AddStringToObject(schema, "pattern", pattern));
	pc_schema_t *s = NULL;
	char err[256];
	cr_assert_eq(pc_schema_compile(schema, &s, err, sizeof(err)), 0, "pattern %s: %s", pattern, err);
	cJSON *x = cJSON_CreateString(text);
	int rc = pc_schema_validate(s, x, NULL, 0);
	cJSON_Delete(x);
	cJSON_Delete(schema);
	pc_schema_free(s);
	return rc == 0;
}

static const struct {
	const char *pattern, *text;
	bool match;
} regex_cases[] = {
	{"^a*$", "", true},
	{"^a*$", "aa", true},
	{"^a*$", "ab", false},
	{"a+", "xxaxx", true}, /* not anchored */
	{"A", "a", false},     /* case-sensitive */
	{"", "anything", true},
	{"a|", "x", true},
	{"()", "x", true},
	{"^a|b$", "xb", true},
	{"^(?:ab)+$", "abab", true},
	{"^(?:ab)+$", "aba", false},
	{"^a{2,3}$", "aaa", true},
	{"^a{2,3}$", "aaaa", false},
	{"^a{2}$", "aa", true},
	{"^a{2,}$", "aaaaa", true},
	{"^a+?$", "aaa", true}, /* lazy */
	{"^a*?b??$", "aa", true},
	/* "." and classes consume one code point, never a byte of one */
	{"^.$", "\xc3\xa9", true},
	{"^.$", "\xf0\x9f\x98\x80", true},
	{"^..$", "\xc3\xa9", false},
	{"^.$", "\n", false},
	{"^.$", "\r", false},
	{"^.$", "\xe2\x80\xa8", false}, /* U+2028 */
	{"^.$", "\xe2\x80\xa7", true},
	{"^[^a]$", "\xc3\xa9", true},
	{"^[^a]$", "a", false},
	{"^[^a]$", "b", true},
	{"[^]", "\n", true},
	{"[]", "a", false},
	{"^[a-c]+$", "abc", true},
	{"^[a-c]+$", "abd", false},
	{"^[\\d.]+$", "1.2", true},
	{"^[\\d.]+$", "1a", false},
	{"^[\\]\\-^]+$", "]-^", true},
	{"^[-^]$", "^", true},
	{"^[-^]$", "-", true},
	{"^[-^]$", "a", false},
	{"^[\\^]$", "^", true},
	{"^[[.]$", ".", true},
	{"^[[.]$", "[", true},
	{"^[\\\\]$", "\\", true},
	{"^\\d+$", "123", true},
	{"^\\d+$", "\xd9\xa1", false}, /* ECMA's \d is ASCII only */
	{"^\\D$", "\xd9\xa1", true},
	{"^\\D$", "5", false},
	{"^\\w+$", "a_Z9", true},
	{"^\\w$", "\xc3\xa9", false},
	{"^\\W$", "\xc3\xa9", true},
	{"^\\s$", " ", true},
	{"^\\s$", "\t", true},
	{"^\\s$", "\xc2\xa0", true},     /* U+00A0 */
	{"^\\s$", "\xe2\x80\x83", true}, /* U+2003 */
	{"^\\s$", "\xef\xbb\xbf", true}, /* U+FEFF */
	{"^\\s$", "x", false},
	{"^\\S$", "\xc2\xa0", false},
	{"^\\S$", "\xc3\xa9", true},
	{"^\\S$", "\xe3\x80\x81", true},
	{"^[\\s\\d]+$", "1 \xe3\x80\x80" "2", true},
	{"^[^\\s]$", "\xe3\x80\x80", false},
	{"^[^\\s]$", "\xe3\x80\x81", true},
	{"^[^\\S]$", " ", true},
	{"^[\\S\\s]$", "\xf0\x9f\x98\x80", true},
	{"^caf\\u00e9$", "caf\xc3\xa9", true},
	{"^\\x41$", "A", true},
	{"^\\uD83D\\uDE00$", "\xf0\x9f\x98\x80", true},
	{"^\xf0\x9f\x98\x80{2}$", "\xf0\x9f\x98\x80\xf0\x9f\x98\x80", true},
	{"^\xf0\x9f\x98\x80{2}$", "\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xf0\x9f\x98\x80", false},
	{"^\\bfoo\\b", "foo bar", true},
	{"^foo\\b", "foobar", false},
	{"\\$", "a$b", true},
	{"\\.", "ab", false},
	{"\\.", "a.b", true},
	{"\\/", "/", true},
	{"^\\t\\n$", "\t\n", true},
	{"}", "a}", true},
	{"]", "a]", true},
	{"^[a-z0-9_-]{1,64}$", "my-tool_1", true},
	{"^[a-z0-9_-]{1,64}$", "My Tool", false},
	{"^\\+?[0-9 ()-]{7,}$", "+1 (555) 010-0199", true},
};

static void run_regex_table(void)
{
	for (size_t i = 0; i < sizeof(regex_cases) / sizeof(regex_cases[0]); i++)
		cr_expect_eq(matches(regex_cases[i].pattern, regex_cases[i].text), regex_cases[i].match,
			     "pattern %s on \"%s\" should %s", regex_cases[i].pattern, regex_cases[i].text,
			     regex_cases[i].match ? "match" : "not match");
}

Test(schema_regex, dialect)
{
	run_regex_table();
}

/* The answers do not depend on the process locale. */
Test(schema_regex, utf8_locale)
{
	if (!setlocale(LC_ALL, "C.UTF-8"))
		cr_skip_test("no C.UTF-8 locale here");
	run_regex_table();
	setlocale(LC_ALL, "C");
}

/* ECMA's ^ and $ (no m flag) hold only at the ends of the string, also
 * when the pattern goes on to consume a newline. */
Test(schema_regex, anchors_ignore_newlines)
{
	cr_expect(!matches("a$\\n", "a\n"));
	cr_expect(!matches("^[a-z]+$\\s*", "abc\n"));
	cr_expect(matches("^[a-z]+$\\s*", "abc"));
	cr_expect(!matches("a$\\n?", "a\n"));
	cr_expect(matches("a$\\n?", "a"));
	cr_expect(!matches("\\n^b", "a\nb"));
	cr_expect(!matches("\\s^b", "a\nb"));
	cr_expect(matches("(^|\\n)b", "a\nb")); /* the newline itself still matches */
	cr_expect(matches("^\\bfoo\\b", "foo bar"));
}

/* Word boundaries in a repeated group made glibc's regcomp take minutes;
 * PCRE2 compiles them at once and they mean what they say. */
Test(schema_regex, boundary_assertions_in_loops)
{
	static const char *const patterns[] = {
		"(?:(?:\\B\\b){1,3})*",
		"(?:\\b\\B\\b\\B\\b\\B\\b\\B\\b\\B)*",
		"(?:\\ba?\\Ba?\\ba?\\Ba?\\ba?\\Ba?\\ba?\\B)*",
		"(?:\\ba?\\ba?\\ba?\\ba?\\ba?)*",
	};
	for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++)
		cr_expect(matches(patterns[i], "some words here"), "%s", patterns[i]);
	cr_expect(matches("^(?:\\w+\\b\\s?)+$", "two words"));
	cr_expect(!matches("^(?:a|\\ba)+$", "b"));
}

/* What the old POSIX translation refused: lookaround, back-references,
 * named groups, \p{...}, \0, non-ASCII class members. */
Test(schema_regex, ecma_features)
{
	static const struct {
		const char *pattern, *text;
		bool match;
	} cases[] = {
		{"^(?=.*\\d)(?=.*[a-z]).{8,}$", "passw0rdx", true},
		{"^(?=.*\\d)(?=.*[a-z]).{8,}$", "password", false},
		{"^(?!tmp/)[a-z/]+$", "tmp/x", false},
		{"^(?!tmp/)[a-z/]+$", "src/x", true},
		{"(?<=\\$)\\d+", "cost $42", true},
		{"(?<=\\$)\\d+", "cost 42", false},
		{"(?<!-)\\b\\d+$", "-42", false},
		{"^(['\"]).*\\1$", "'quoted'", true},
		{"^(['\"]).*\\1$", "'mixed\"", false},
		{"^(?<q>['\"]).*\\k<q>$", "\"named\"", true},
		{"^(?<q>['\"]).*\\k<q>$", "\"named'", false},
		{"^(a)|b\\1$", "b", true},  /* a group that did not match: \1 is empty */
		{"^\\1(a)$", "a", true},    /* a forward reference too */
		{"^(?:(a)|b)\\1$", "b", true},
		{"^\\p{Lu}\\p{Ll}+$", "\xc3\x89t\xc3\xa9", true},
		{"^\\p{Lu}\\p{Ll}+$", "\xc3\xa9t\xc3\xa9", false},
		{"^\\P{L}+$", "123", true},
		{"^\\p{Letter}+$", "\xcf\x80", true},
		{"^\\p{gc=Lu}$", "A", true},
		{"^\\p{Cased_Letter}\\p{LC}$", "aB", true},
		{"^\\p{LC}$", "1", false},
		{"^\\p{punct}\\p{Other}$", "!\x01", true},
		{"^\\p{General_Category=Decimal_Number}+$", "\xe0\xa7\xaa" "2", true},
		{"^\\p{digit}$", "x", false},
		{"^\\p{Script=Greek}+$", "\xce\xb1\xce\xb2", true},
		{"^\\p{sc=Greek}+$", "ab", false},
		{"^[\\p{L}\\d]+$", "a1\xc3\xa9", true},
		{"^\\u{1F600}$", "\xf0\x9f\x98\x80", true},
		{"^[\\u{1F600}-\\u{1F64F}]$", "\xf0\x9f\x98\x8a", true},
		{"^[\\uD83D\\uDE00-\\uD83D\\uDE4F]$", "\xf0\x9f\x98\x8a", true},
		{"^a\\0b$", "a", false},
		{"^[\xc3\xa9\xc3\xa8]+$", "\xc3\xa9\xc3\xa8", true},
		{"^[\xc3\xa0-\xc3\xbf]$", "\xc3\xa9", true},
		{"^[\xc3\xa0-\xc3\xbf]$", "e", false},
		{"^\\cJ$", "\n", true},
		{"^\\v$", "\v", true},
		{"^\\v$", "\n", false}, /* ECMA's \v is one character, PCRE2's a class */
		{"^[\\v]$", "\v", true},
		{"^\\S+$", "\xc2\x85", true}, /* U+0085 is not ECMA white space */
		{"^\\s$", "\xe1\xa0\x8e", false}, /* nor is U+180E */
		{"^[\\S]$", "\xef\xbb\xbf", false},
		{"^[\\S]$", "\xf4\x8f\xbf\xbf", true},
		{"^[^\\S]$", "\xe2\x80\xa9", true},
		{"^[[:alpha:]]$", "[:", false}, /* no POSIX classes: [[:alph] then "]" */
		{"^[[:alpha:]]$", "a]", true},
		{"^[:a]$", ":", true},
		{"^x{,2}$", "x{,2}", true}, /* not a quantifier: the characters */
		{"^a{2}?$", "aa", true},
		{"^.+$", "a\xe2\x80\xa8" "b", false},
		{"^.+$", "a\xc2\x85" "b", true},
		{"^[^]+$", "a\nb", true},
		{"^\\u0041\\x42$", "AB", true},
		{"^[\\s-]+$", "- -", true}, /* a - next to \s at either end is the character */
		{"^[-\\S]+$", "a-b", true},
		{"^[^\\s-]+$", "ab", true},
		{"^[^\\s-]+$", "a-b", false},
		{"^\\-\\_\\@$", "-_@", true},
		{"^\\\xc3\xa9$", "\xc3\xa9", true},
		{"^(?:a|b)+?c$", "abc", true},
		{"^a{1,2}?b$", "aab", true},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_expect_eq(matches(cases[i].pattern, cases[i].text), cases[i].match, "pattern %s on \"%s\" should %s",
			     cases[i].pattern, cases[i].text, cases[i].match ? "match" : "not match");
}

/* Refused at compile time: PCRE2's own message and offset, or the
 * pre-pass's for what ECMA-262 does not have (PCRE2 would accept it with
 * another meaning). Offsets are in the pattern as written. */
Test(schema_regex, invalid)
{
	static const struct {
		const char *pattern, *why;
	} cases[] = {
		{"(a", "missing closing parenthesis at offset 2"},
		{"a)", "unmatched closing parenthesis at offset 1"},
		{"[a", "missing terminating ] for character class at offset 2"},
		{"[z-a]", "range out of order in character class at offset 3"},
		{"[\\d-z]", "invalid range in character class at offset 3"},
		{"[\\s-z]", "invalid range in character class at offset 3"},
		{"[a-\\s]", "invalid range in character class at offset 3"},
		{"[\\S-\\u{10ffff}]", "invalid range in character class at offset 3"},
		{"a{3,2}", "numbers out of order in {} quantifier at offset 5"},
		{"*a", "quantifier does not follow a repeatable item at offset 0"},
		{"a**", "quantifier does not follow a repeatable item at offset 2"},
		{"\\b+", "quantifier does not follow a repeatable item at offset 2"},
		{"a\\", "\\ at end of pattern at offset 2"},
		{"(a)\\2", "reference to non-existent subpattern at offset 3"},
		{"\\12", "reference to non-existent subpattern at offset 0"},
		{"\\k<n>", "reference to non-existent subpattern at offset 3"},
		{"\\uD800", "disallowed Unicode code point (>= 0xd800 && <= 0xdfff) at offset 6"},
		{"(?<=a+)b", "lookbehind assertion is not fixed length at offset 0"},
		{"\\p{Nope}", "unknown property after \\P or \\p at offset 8"},
		{"\xff", "UTF-8 error: illegal byte (0xfe or 0xff) at offset 0"},
		{"\\p{gc=Nope}", "an unknown General_Category value at offset 0"},
		{"\\pL", "\\p and \\P need a property name in braces at offset 0"},
		{"a\\h", "an escape that ECMA-262 does not have at offset 1"},
		{"\\A", "an escape that ECMA-262 does not have at offset 0"},
		{"\\Qa\\E", "an escape that ECMA-262 does not have at offset 0"},
		{"\\x4", "\\x must be followed by two hex digits at offset 0"},
		{"\\u12", "\\u must be followed by four hex digits or {hex digits} at offset 0"},
		{"\\u{}", "\\u{...} must hold hex digits at offset 0"},
		{"\\c1", "\\c must be followed by a letter at offset 0"},
		{"\\01", "\\0 followed by a digit (octal escapes are not ECMA-262) at offset 0"},
		{"[\\1]", "a back-reference inside [...] at offset 1"},
		{"\\k", "\\k must be followed by <name> (outside [...]) at offset 0"},
		{"a++", "a possessive quantifier (ECMA-262 has none) at offset 2"},
		{"a{2}+", "a possessive quantifier (ECMA-262 has none) at offset 4"},
		{"(?i)a", "a group syntax that ECMA-262 does not have at offset 0"},
		{"(?>a)", "a group syntax that ECMA-262 does not have at offset 0"},
		{"(*UCP)\\w", "(* is not ECMA-262 at offset 0"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cJSON *schema = cJSON_CreateObject();
		cr_assert_not_null(cJSON_AddStringToObject(schema, "pattern", cases[i].pattern));
		pc_schema_t *s = NULL;
		char err[256], want[256];
		snprintf(want, sizeof(want), "/pattern: invalid regex \"%s\": %s", cases[i].pattern, cases[i].why);
		cr_expect_eq(pc_schema_compile(schema, &s, err, sizeof(err)), PC_EINVAL, "%s", cases[i].pattern);
		cr_expect_str_eq(err, want, "got [%s], want [%s]", err, want);
		pc_schema_free(s);
		cJSON_Delete(schema);
	}
	/* a patternProperties key is compiled the same way */
	pc_schema_t *s = NULL;
	char err[256];
	const char *text = "{\"patternProperties\":{\"a\\\\h\":{}}}";
	cr_expect_eq(pc_schema_compile_text(text, &s, err, sizeof(err)), PC_EINVAL);
	cr_expect_str_eq(err, "/patternProperties/a\\h: invalid regex \"a\\h\": an escape that ECMA-262 does not have "
			      "at offset 1");
	cr_expect_null(s);
}

/* Every prefix of patterns that end mid-escape or mid-group compiles or is
 * refused, and the pre-pass never reads past the end (ASan watches: the
 * schema's copy of each string is its own allocation). */
Test(schema_regex, truncated_patterns)
{
	static const char *const patterns[] = {
		"\\u{1F600}\\uD83D\\uDE00\\u0041\\x41\\cA\\0",
		"\\p{gc=Lu}\\P{General_Category=Letter}\\p{Script=Greek}",
		"(?<n>a)\\k<n>(?<=b)(?<!c)(?=d)(?!e)(?:f)",
		"[^\\s\\S\\d\\v[:.=]-]a{1,2}?b{3}c{4,}.",
		"\\12\\1\\",
	};
	for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) {
		size_t n = strlen(patterns[i]);
		for (size_t k = 0; k <= n; k++) {
			char *prefix = strndup(patterns[i], k);
			cr_assert_not_null(prefix);
			cJSON *schema = cJSON_CreateObject();
			cr_assert_not_null(cJSON_AddStringToObject(schema, "pattern", prefix));
			pc_schema_t *s = NULL;
			char err[512];
			int rc = pc_schema_compile(schema, &s, err, sizeof(err));
			cr_expect(rc == 0 || (rc == PC_EINVAL && strstr(err, "/pattern: invalid regex")), "%s: %d %s",
				  prefix, rc, err);
			pc_schema_free(s);
			cJSON_Delete(schema);
			free(prefix);
		}
	}
}

/* A string of n copies of `unit` followed by `tail`. Caller frees. */
static char *repeat(const char *unit, size_t n, const char *tail)
{
	size_t u = strlen(unit), t = strlen(tail);
	char *s = malloc(u * n + t + 1);
	cr_assert_not_null(s);
	for (size_t i = 0; i < n; i++)
		memcpy(s + i * u, unit, u);
	memcpy(s + u * n, tail, t + 1);
	return s;
}

/* This thread's CPU time: what a validation costs, not how long a busy
 * machine kept the thread waiting. */
static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The match outcome and message for pattern on text, with the CPU time
 * taken. */
static int limit_case(const char *schema_json, const char *text, char *err, size_t errlen, double *secs)
{
	cJSON *doc = cJSON_Parse(schema_json);
	cr_assert_not_null(doc, "%s", schema_json);
	pc_schema_t *s = NULL;
	cr_assert_eq(pc_schema_compile(doc, &s, err, errlen), 0, "%s: %s", schema_json, err);
	cJSON *x = cJSON_CreateString(text);
	double t0 = now_s();
	int rc = pc_schema_validate(s, x, err, errlen);
	*secs = now_s() - t0;
	cJSON_Delete(x);
	pc_schema_free(s);
	cJSON_Delete(doc);
	return rc;
}

/* Catastrophic backtracking ends at the match limit with a clear error,
 * quickly, and the error is final: `not` does not turn it into a pass. */
Test(schema_regex, match_limit)
{
	static const char *const schemas[] = {
		"{\"pattern\":\"^(a+)+$\"}",
		"{\"not\":{\"pattern\":\"^(a+)+$\"}}",
		"{\"anyOf\":[{\"pattern\":\"^(a+)+$\"},{\"type\":\"string\"}]}",
		"{\"pattern\":\"^(a|a)*$\"}",
	};
	char *text = repeat("a", 5000, "!");
	for (size_t i = 0; i < sizeof(schemas) / sizeof(schemas[0]); i++) {
		char err[256];
		double secs = 0;
		cr_expect_eq(limit_case(schemas[i], text, err, sizeof(err), &secs), PC_EINVAL, "%s", schemas[i]);
		cr_expect(strstr(err, "needs more than 1000000 backtracking steps on this value: "
				      "too complex to validate"),
			  "%s: %s", schemas[i], err);
		cr_expect_lt(secs, 2.0, "%s took %.2f s", schemas[i], secs);
	}
	char err[256];
	double secs = 0;
	cr_expect_eq(limit_case(schemas[0], text, err, sizeof(err), &secs), PC_EINVAL);
	cr_expect_str_eq(err, "/: the pattern \"^(a+)+$\" needs more than 1000000 backtracking steps on this value: "
			      "too complex to validate");
	/* the same pattern on a string it can decide quickly */
	cr_expect_eq(limit_case(schemas[0], "aaaa", err, sizeof(err), &secs), 0);
	free(text);
	/* a patternProperties key hits it too */
	char *key = repeat("a", 40, "!");
	cJSON *inst = cJSON_CreateObject();
	cr_assert_not_null(cJSON_AddNullToObject(inst, key));
	pc_schema_t *s = NULL;
	cr_assert_eq(pc_schema_compile_text("{\"patternProperties\":{\"^(a+)+$\":false}}", &s, err, sizeof(err)), 0);
	cr_expect_eq(pc_schema_validate(s, inst, err, sizeof(err)), PC_EINVAL);
	cr_expect(strstr(err, "too complex to validate"), "%s", err);
	pc_schema_free(s);
	cJSON_Delete(inst);
	free(key);
}

/* A repeated group over a long string ends at the depth limit (or, with
 * many captures per iteration, the heap limit), with a clear error. */
Test(schema_regex, depth_and_heap_limits)
{
	char err[4096];
	double secs = 0;
	char *ok = repeat("ab", 20000, "");
	cr_expect_eq(limit_case("{\"pattern\":\"^(?:a|b)*$\"}", ok, err, sizeof(err), &secs), 0, "%s", err);
	free(ok);
	char *deep = repeat("ab", 60000, "");
	cr_expect_eq(limit_case("{\"pattern\":\"^(?:a|b)*$\"}", deep, err, sizeof(err), &secs), PC_EINVAL);
	cr_expect_str_eq(err, "/: the pattern \"^(?:a|b)*$\" needs more than 100000 nested backtracking points on "
			      "this value: too complex to validate");
	cr_expect_lt(secs, 2.0);
	free(deep);
	/* 300 empty captures make every backtracking point about 5 KB */
	char schema[1024] = "{\"pattern\":\"^(?:";
	for (int i = 0; i < 300; i++)
		strcat(schema, "()");
	strcat(schema, "(?:a|b))*$\"}");
	char *wide = repeat("a", 20000, "");
	cr_expect_eq(limit_case(schema, wide, err, sizeof(err), &secs), PC_EINVAL);
	cr_expect(strstr(err, "needs more than 32768 KiB of backtracking memory on this value: "
			      "too complex to validate"),
		  "%s", err);
	cr_expect_lt(secs, 2.0);
	free(wide);
}

/* ---- hostile inputs ------------------------------------------------------------ */

/* depth nested arrays [[[...]]], freed with free_nested (cJSON_Delete recurses). */
static cJSON **nested_arrays(size_t depth)
{
	cJSON **levels = calloc(depth, sizeof(*levels));
	cr_assert_not_null(levels);
	for (size_t i = 0; i < depth; i++) {
		levels[i] = cJSON_CreateArray();
		cr_assert_not_null(levels[i]);
		if (i > 0)
			cr_assert(cJSON_AddItemToArray(levels[i - 1], levels[i]));
	}
	return levels;
}

static void free_nested(cJSON **levels, size_t depth)
{
	for (size_t i = depth; i-- > 1;)
		cJSON_Delete(cJSON_DetachItemFromArray(levels[i - 1], 0));
	cJSON_Delete(levels[0]);
	free(levels);
}

static int validate_text(const char *schema, const cJSON *x, char *err, size_t n)
{
	pc_schema_t *s = compile(schema);
	int rc = pc_schema_validate(s, x, err, n);
	pc_schema_free(s);
	return rc;
}

static bool ends_with(const char *s, const char *tail)
{
	size_t a = strlen(s), b = strlen(tail);
	return a >= b && strcmp(s + a - b, tail) == 0;
}

Test(schema_hostile, deep_instance)
{
	const size_t depth = 10000;
	cJSON **levels = nested_arrays(depth);
	char err[4096];
	/* keywords that do not descend never look at the depth */
	cr_assert_eq(validate_text("{'type':'array','minItems':1}", levels[0], err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(validate_text("{'items':{'type':'array'}}", levels[0], err, sizeof(err)), 0, "%s", err);
	/* a recursive schema descends until the frame cap */
	cr_assert_eq(validate_text("{'items':{'$ref':'#'}}", levels[0], err, sizeof(err)), PC_EINVAL);
	cr_assert(ends_with(err, ": nested too deeply to validate"), "%s", err);
	cr_assert(strncmp(err, "/0/0/0/0/", 9) == 0, "%s", err);
	/* comparisons are bounded too */
	cJSON *pair = cJSON_CreateArray();
	cJSON **other = nested_arrays(depth);
	cr_assert(cJSON_AddItemReferenceToArray(pair, levels[0]));
	cr_assert(cJSON_AddItemReferenceToArray(pair, other[0]));
	cr_assert_eq(validate_text("{'uniqueItems':true}", pair, err, sizeof(err)), PC_EINVAL);
	cr_assert_str_eq(err, "/: nested too deeply to validate");
	cr_assert_eq(validate_text("{'enum':[[[[1]]]]}", levels[0], err, sizeof(err)), PC_EINVAL);
	cr_assert_eq(validate_text("{'const':[[[[[]]]]]}", levels[0], err, sizeof(err)), PC_EINVAL);
	cJSON_Delete(pair);
	free_nested(other, depth);
	free_nested(levels, depth);
}

Test(schema_hostile, deep_schema)
{
	/* {"items":{"items":...}} 10000 levels: refused, not recursed into */
	const size_t depth = 10000;
	cJSON **levels = calloc(depth, sizeof(*levels));
	cr_assert_not_null(levels);
	for (size_t i = 0; i < depth; i++) {
		levels[i] = cJSON_CreateObject();
		cr_assert_not_null(levels[i]);
		if (i > 0)
			cr_assert(cJSON_AddItemToObject(levels[i - 1], "items", levels[i]));
	}
	pc_schema_t *s = NULL;
	char err[256];
	cr_assert_eq(pc_schema_compile(levels[0], &s, err, sizeof(err)), PC_EINVAL);
	cr_assert_null(s);
	cr_assert_str_eq(err, "/: the schema is nested deeper than 256 levels");
	/* 256 levels compile */
	cr_assert_eq(pc_schema_compile(levels[depth - 256], &s, err, sizeof(err)), 0, "%s", err);
	pc_schema_free(s);
	for (size_t i = depth; i-- > 1;)
		cJSON_Delete(cJSON_DetachItemFromObject(levels[i - 1], "items"));
	cJSON_Delete(levels[0]);
	free(levels);
}

/* A schema that doubles its work at each level (2^40 applications):
 * stopped by the step cap. */
Test(schema_hostile, exponential_schema)
{
	cJSON *defs = cJSON_CreateObject();
	for (int i = 0; i < 40; i++) {
		char name[16], ref[40];
		snprintf(name, sizeof(name), "d%d", i);
		snprintf(ref, sizeof(ref), "#/definitions/d%d", i + 1);
		cJSON *d = cJSON_CreateObject(), *any = cJSON_AddArrayToObject(d, "anyOf");
		for (int k = 0; k < 2; k++) {
			cJSON *alt = cJSON_CreateObject();
			cr_assert(cJSON_AddStringToObject(alt, "$ref", ref) && cJSON_AddItemToArray(any, alt));
		}
		cr_assert(cJSON_AddItemToObject(defs, name, d));
	}
	cr_assert(cJSON_AddItemToObject(defs, "d40", cJSON_CreateFalse()));
	cJSON *schema = cJSON_CreateObject();
	cr_assert(cJSON_AddItemToObject(schema, "definitions", defs));
	cr_assert(cJSON_AddStringToObject(schema, "$ref", "#/definitions/d0"));
	pc_schema_t *s = NULL;
	char err[256];
	cr_assert_eq(pc_schema_compile(schema, &s, err, sizeof(err)), 0, "%s", err);
	cJSON *x = cJSON_CreateNumber(1);
	cr_assert_eq(pc_schema_validate(s, x, err, sizeof(err)), PC_EINVAL);
	cr_assert_str_eq(err, "/: the arguments are too large to validate");
	cJSON_Delete(x);
	cJSON_Delete(schema);
	pc_schema_free(s);
}

Test(schema_hostile, huge_numbers)
{
	static const vcase_t cases[] = {
		{"{'type':'integer'}", "1e400", NULL},
		{"{'type':'integer'}", "1e308", NULL},
		{"{'type':'integer'}", "-1e400", NULL},
		{"{'type':'integer'}", "12345678910111213141516171819202122232425262728293031", NULL},
		{"{'maximum':1e308}", "1e400", "/: must be <= 1e+308, got Infinity"},
		{"{'minimum':-1e308}", "-1e400", "/: must be >= -1e+308, got -Infinity"},
		{"{'maximum':1e400}", "1e308", NULL},
		{"{'multipleOf':0.123456789}", "1e308", "/: must be a multiple of 0.123456789, got 1e+308"},
		{"{'multipleOf':0.5}", "1e400", "/: must be a multiple of 0.5, got Infinity"},
		{"{'multipleOf':1e-300}", "1e300", "/: must be a multiple of 1e-300, got 1e+300"},
		{"{'multipleOf':1e-300}", "3e-300", NULL},
		{"{'maxLength':1e400}", "'abc'", NULL},
		{"{'minimum':5e-324}", "0", "/: must be >= 5e-324, got 0"},
		{"{'enum':[1e400]}", "1e401", NULL},
	};
	RUN(cases);
}

/* Trees a parser never makes: NaN, a NULL string, a member without a
 * name, a value of no JSON type. */
Test(schema_hostile, hand_built_values)
{
	char err[256];
	cJSON *nan = cJSON_CreateNumber(0);
	nan->valuedouble = NAN;
	cr_assert_eq(validate_text("{'minimum':0}", nan, err, sizeof(err)), PC_EINVAL);
	cr_assert_str_eq(err, "/: NaN is not a number");
	cr_assert_eq(validate_text("{'type':'integer'}", nan, err, sizeof(err)), PC_EINVAL);
	cr_assert_str_eq(err, "/: expected integer, got number");
	cr_assert_eq(validate_text("{'enum':[0,1]}", nan, err, sizeof(err)), PC_EINVAL);
	cr_assert_eq(validate_text("{'type':'number'}", nan, err, sizeof(err)), 0);
	cJSON *arr = cJSON_CreateArray();
	cr_assert(cJSON_AddItemReferenceToArray(arr, nan));
	cr_assert(cJSON_AddItemReferenceToArray(arr, nan));
	cr_assert_eq(validate_text("{'uniqueItems':true}", arr, err, sizeof(err)), 0, "NaN != NaN");
	cJSON_Delete(arr);
	cJSON_Delete(nan);

	cJSON nulls = {.type = cJSON_String, .valuestring = NULL};
	cr_assert_eq(validate_text("{'minLength':1}", &nulls, err, sizeof(err)), PC_EINVAL);
	cr_assert_str_eq(err, "/: expected at least 1 character, got 0");
	cr_assert_eq(validate_text("{'pattern':'^$'}", &nulls, err, sizeof(err)), 0);

	cJSON unnamed = {.type = cJSON_Number, .valuedouble = 1, .string = NULL};
	cJSON obj = {.type = cJSON_Object, .child = &unnamed};
	unnamed.prev = &unnamed;
	cr_assert_eq(validate_text("{'properties':{'':{'type':'string'}}}", &obj, err, sizeof(err)), PC_EINVAL);
	cr_assert_str_eq(err, "/: expected string, got number");
	cr_assert_eq(validate_text("{'additionalProperties':false}", &obj, err, sizeof(err)), PC_EINVAL);
	cr_assert_str_eq(err, "/: unexpected property \"\"; no properties are allowed");

	cJSON invalid = {.type = cJSON_Invalid};
	cr_assert_eq(validate_text("{'type':['string','null']}", &invalid, err, sizeof(err)), PC_EINVAL);
	cr_assert_str_eq(err, "/: expected string or null, got a value that is not JSON");
	cr_assert_eq(validate_text("{'minimum':1,'minLength':1,'required':['a']}", &invalid, err, sizeof(err)), 0);
	cJSON raw = {.type = cJSON_Raw, .valuestring = NULL};
	cr_assert_eq(validate_text("{'const':'x'}", &raw, err, sizeof(err)), PC_EINVAL);
}

/* ---- threads ------------------------------------------------------------------ */

typedef struct worker {
	const pc_schema_t *s;
	cJSON *good, *bad;
	unsigned wrong;
} worker_t;

static void *validate_loop(void *arg)
{
	worker_t *w = arg;
	char err[256];
	for (int i = 0; i < 2000; i++) {
		if (pc_schema_validate(w->s, w->good, err, sizeof(err)) != 0 || err[0])
			w->wrong++;
		if (pc_schema_validate(w->s, w->bad, err, sizeof(err)) != PC_EINVAL ||
		    strcmp(err, "/files/1/name: must match the pattern \"^[a-z]+\\\\.txt$\"") != 0)
			w->wrong++;
	}
	return NULL;
}

Test(schema_threads, concurrent_validate)
{
	pc_schema_t *s = compile("{'definitions':{'f':{'type':'object','properties':{'name':{'type':'string',"
				 "'pattern':'^[a-z]+\\\\.txt$'}},'required':['name']}},'properties':{'files':{"
				 "'type':'array','items':{'$ref':'#/definitions/f'},'uniqueItems':true}},"
				 "'additionalProperties':false}");
	worker_t w[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		w[i] = (worker_t){s, parse("{'files':[{'name':'a.txt'},{'name':'b.txt'}]}"),
				  parse("{'files':[{'name':'a.txt'},{'name':'B.txt'}]}"), 0};
		cr_assert_eq(pthread_create(&t[i], NULL, validate_loop, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(pthread_join(t[i], NULL), 0);
		cr_expect_eq(w[i].wrong, 0u, "worker %d", i);
		cJSON_Delete(w[i].good);
		cJSON_Delete(w[i].bad);
	}
	pc_schema_free(s);
}

/* ---- the official draft-7 suite ----------------------------------------------------- */

#define SUITE_DIR "/usr/share/json-schema-test-suite/tests/draft7"
/* Every case of the files below but the skipped groups, as Debian's 2.0.0
 * package has them; a newer suite only adds cases. */
#define SUITE_FLOOR 412u

static const char *const suite_files[] = {
	"type.json",          "properties.json",    "required.json",         "additionalProperties.json",
	"enum.json",          "const.json",         "items.json",            "additionalItems.json",
	"minItems.json",      "maxItems.json",      "uniqueItems.json",      "minLength.json",
	"maxLength.json",     "minimum.json",       "maximum.json",          "exclusiveMinimum.json",
	"exclusiveMaximum.json", "multipleOf.json", "minProperties.json",    "maxProperties.json",
	"anyOf.json",         "oneOf.json",         "allOf.json",            "not.json",
	"boolean_schema.json", "ref.json",          "definitions.json",      "default.json",
	"patternProperties.json", "pattern.json",   "contains.json",         "if-then-else.json",
	"dependencies.json",  "propertyNames.json", "optional/bignum.json",  "optional/zeroTerminatedFloats.json",
};

/* Groups that need what the validator does not do, on purpose. */
static const struct {
	const char *file, *group, *why;
} suite_skips[] = {
	{"ref.json", "remote ref, containing refs itself", "refers to the draft-07 meta-schema by URL (a remote $ref)"},
	{"ref.json", "Recursive references between schemas", "resolves \"node\" and \"tree\" through $id"},
	{"definitions.json", "valid definition", "validates against the draft-07 meta-schema by URL (a remote $ref)"},
	{"definitions.json", "invalid definition", "validates against the draft-07 meta-schema by URL (a remote $ref)"},
};

static const char *skip_reason(const char *file, const char *group)
{
	for (size_t i = 0; i < sizeof(suite_skips) / sizeof(suite_skips[0]); i++)
		if (strcmp(suite_skips[i].file, file) == 0 && strcmp(suite_skips[i].group, group) == 0)
			return suite_skips[i].why;
	return NULL;
}

static cJSON *load_suite_file(const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", SUITE_DIR, name);
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "cannot open %s", path);
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	long len = ftell(f);
	cr_assert_gt(len, 0L);
	rewind(f);
	char *text = malloc((size_t)len + 1);
	cr_assert_not_null(text);
	cr_assert_eq(fread(text, 1, (size_t)len, f), (size_t)len);
	text[len] = '\0';
	fclose(f);
	cJSON *doc = cJSON_Parse(text);
	free(text);
	cr_assert(cJSON_IsArray(doc), "%s is not a JSON array", path);
	return doc;
}

typedef struct tally {
	unsigned run, passed, skipped;
} tally_t;

static void run_group(const char *file, const cJSON *group, tally_t *t)
{
	const char *desc = cJSON_GetStringValue(cJSON_GetObjectItem(group, "description"));
	const cJSON *tests = cJSON_GetObjectItem(group, "tests");
	cr_assert(desc && cJSON_IsArray(tests), "%s: a malformed group", file);
	if (skip_reason(file, desc)) {
		t->skipped += (unsigned)cJSON_GetArraySize(tests);
		return;
	}
	pc_schema_t *s = NULL;
	char err[512];
	int rc = pc_schema_compile(cJSON_GetObjectItem(group, "schema"), &s, err, sizeof(err));
	cr_expect_eq(rc, 0, "%s / %s: the schema does not compile: %s", file, desc, err);
	const cJSON *c;
	cJSON_ArrayForEach(c, tests)
	{
		const char *what = cJSON_GetStringValue(cJSON_GetObjectItem(c, "description"));
		bool want = cJSON_IsTrue(cJSON_GetObjectItem(c, "valid"));
		t->run++;
		if (!s)
			continue;
		rc = pc_schema_validate(s, cJSON_GetObjectItem(c, "data"), err, sizeof(err));
		if ((rc == 0) == want) {
			t->passed++;
			if (!want)
				cr_expect_neq(err[0], '\0', "%s / %s / %s: no message", file, desc, what);
		} else {
			cr_expect_fail("%s / %s / %s: expected %s, got rc %d (%s)", file, desc, what ? what : "?",
				       want ? "valid" : "invalid", rc, err);
		}
	}
	pc_schema_free(s);
}

Test(schema_suite, draft7)
{
	cr_assert_eq(access(SUITE_DIR, R_OK), 0,
		     "the JSON-Schema test suite is missing: %s (install the Debian package json-schema-test-suite, "
		     "as scripts/deps does)", SUITE_DIR);
	tally_t t = {0};
	for (size_t i = 0; i < sizeof(suite_files) / sizeof(suite_files[0]); i++) {
		cJSON *doc = load_suite_file(suite_files[i]);
		const cJSON *group;
		cJSON_ArrayForEach(group, doc)
			run_group(suite_files[i], group, &t);
		cJSON_Delete(doc);
	}
	printf("draft-7 suite: %u cases run, %u passed, %u skipped\n", t.run, t.passed, t.skipped);
	cr_assert_eq(t.passed, t.run, "%u of %u cases failed", t.run - t.passed, t.run);
	cr_assert_geq(t.run, SUITE_FLOOR, "only %u cases ran", t.run);
}

/* Every remote reference of the suite is refused, clearly. */
Test(schema_suite, remote_refs_refused)
{
	cr_assert_eq(access(SUITE_DIR, R_OK), 0, "the JSON-Schema test suite is missing: %s", SUITE_DIR);
	cJSON *doc = load_suite_file("refRemote.json");
	const cJSON *group;
	unsigned groups = 0;
	cJSON_ArrayForEach(group, doc)
	{
		pc_schema_t *s = NULL;
		char err[512];
		cr_expect_eq(pc_schema_compile(cJSON_GetObjectItem(group, "schema"), &s, err, sizeof(err)), PC_EINVAL);
		cr_expect_not_null(strstr(err, "unsupported remote $ref"), "%s", err);
		cr_expect_null(s);
		groups++;
	}
	cr_assert_gt(groups, 0u);
	cJSON_Delete(doc);
}
