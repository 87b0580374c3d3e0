/*
 * ECMA-262 regular expressions (JSON Schema's `pattern` and
 * `patternProperties`) on PCRE2: a pre-pass rewrites what PCRE2 reads
 * differently from ECMA-262 with the u flag and refuses what ECMA-262 does
 * not have, then PCRE2 compiles the result once; matches run under the
 * limits set here (docs/tools.md).
 */
#include "schema_regex.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "runtime/error.h"

/*
 * Patterns are compiled once by PCRE2 (UTF mode, no UCP), after a pre-pass
 * that rewrites what PCRE2 reads differently from ECMA-262 with the u flag
 * and refuses what ECMA-262 does not have (docs/tools.md lists what is
 * left). Without UCP, PCRE2's \d, \w and \b are ASCII-only, as ECMA's are;
 * \s and \S, `.` and \v are rewritten; surrogate pairs \uD83D\uDE00 become
 * one \u{1F600}; long General_Category names (\p{Letter}, \p{gc=Lu},
 * \p{digit}) become the short ones PCRE2 10.42 knows.
 */
#define RX_OPTIONS                                                                                 \
	(PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_NEVER_UCP | PCRE2_NEVER_BACKSLASH_C |         \
	 PCRE2_ALT_BSUX | PCRE2_DOLLAR_ENDONLY | PCRE2_ALLOW_EMPTY_CLASS | PCRE2_MATCH_UNSET_BACKREF)


/* ECMA's white space beyond the ASCII \s of PCRE2 (\t \n \v \f \r and the
 * space): the Zs characters, U+2028, U+2029 and U+FEFF. */
#define RX_SPACES "\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
/* Everything else, as ranges (for \S inside [...]). */
#define RX_NONSPACES                                                                               \
	"\\x00-\\x08\\x0e-\\x1f\\x21-\\x9f\\xa1-\\u167f\\u1681-\\u1fff\\u200b-\\u2027\\u202a-\\u202e"  \
	"\\u2030-\\u205e\\u2060-\\u2fff\\u3001-\\ufefe\\uff00-\\u{10ffff}"

/* General_Category values (long names and aliases) -> PCRE2's short ones. */
static const char *const gc_names[][2] = {
	{"Other", "C"}, {"Control", "Cc"}, {"cntrl", "Cc"}, {"Format", "Cf"}, {"Unassigned", "Cn"},
	{"Private_Use", "Co"}, {"Surrogate", "Cs"}, {"Letter", "L"}, {"Cased_Letter", "L&"}, {"LC", "L&"},
	{"Lowercase_Letter", "Ll"}, {"Modifier_Letter", "Lm"}, {"Other_Letter", "Lo"},
	{"Titlecase_Letter", "Lt"}, {"Uppercase_Letter", "Lu"}, {"Mark", "M"}, {"Combining_Mark", "M"},
	{"Spacing_Mark", "Mc"}, {"Enclosing_Mark", "Me"}, {"Nonspacing_Mark", "Mn"}, {"Number", "N"},
	{"Decimal_Number", "Nd"}, {"digit", "Nd"}, {"Letter_Number", "Nl"}, {"Other_Number", "No"},
	{"Punctuation", "P"}, {"punct", "P"}, {"Connector_Punctuation", "Pc"}, {"Dash_Punctuation", "Pd"},
	{"Close_Punctuation", "Pe"}, {"Final_Punctuation", "Pf"}, {"Initial_Punctuation", "Pi"},
	{"Other_Punctuation", "Po"}, {"Open_Punctuation", "Ps"}, {"Symbol", "S"}, {"Currency_Symbol", "Sc"},
	{"Modifier_Symbol", "Sk"}, {"Math_Symbol", "Sm"}, {"Other_Symbol", "So"}, {"Separator", "Z"},
	{"Line_Separator", "Zl"}, {"Paragraph_Separator", "Zp"}, {"Space_Separator", "Zs"},
	{"C", "C"}, {"Cc", "Cc"}, {"Cf", "Cf"}, {"Cn", "Cn"}, {"Co", "Co"}, {"Cs", "Cs"}, {"L", "L"},
	{"Ll", "Ll"}, {"Lm", "Lm"}, {"Lo", "Lo"}, {"Lt", "Lt"}, {"Lu", "Lu"}, {"M", "M"}, {"Mc", "Mc"},
	{"Me", "Me"}, {"Mn", "Mn"}, {"N", "N"}, {"Nd", "Nd"}, {"Nl", "Nl"}, {"No", "No"}, {"P", "P"},
	{"Pc", "Pc"}, {"Pd", "Pd"}, {"Pe", "Pe"}, {"Pf", "Pf"}, {"Pi", "Pi"}, {"Po", "Po"}, {"Ps", "Ps"},
	{"S", "S"}, {"Sc", "Sc"}, {"Sk", "Sk"}, {"Sm", "Sm"}, {"So", "So"}, {"Z", "Z"}, {"Zl", "Zl"},
	{"Zp", "Zp"}, {"Zs", "Zs"},
};

static const char *gc_short(const char *name, size_t n)
{
	for (size_t i = 0; i < sizeof(gc_names) / sizeof(gc_names[0]); i++)
		if (strlen(gc_names[i][0]) == n && memcmp(gc_names[i][0], name, n) == 0)
			return gc_names[i][1];
	return NULL;
}

/* The rewritten pattern, and for each of its bytes the source offset it
 * came from (PCRE2's error offsets are reported in the source). */
typedef struct rxout {
	pc__buf_t text;
	size_t *from;
	size_t cap;
	bool oom;
} rxout_t;

/* Appends n bytes that stand for the source at src_at; copy: they are the
 * source's own bytes from there, offset by offset. */
static void rx_put(rxout_t *o, const char *s, size_t n, size_t src_at, bool copy)
{
	if (o->oom)
		return;
	if (PC__GROW(o->from, o->cap, o->text.len + n, 16)) {
		o->oom = true;
		return;
	}
	for (size_t i = 0; i < n; i++)
		o->from[o->text.len + i] = copy ? src_at + i : src_at;
	if (pc__buf_append(&o->text, s, n) != 0)
		o->oom = true;
}

static void rx_puts(rxout_t *o, const char *s, size_t src_at)
{
	rx_put(o, s, strlen(s), src_at, false);
}

/* Copies n bytes of the source from offset at. */
static void rx_copy(rxout_t *o, const char *src, size_t at, size_t n)
{
	rx_put(o, src + at, n, at, true);
}

static bool is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* n hex digits at s, or -1. */
long pc__schema_hex_n(const char *s, size_t n)
{
	long v = 0;
	for (size_t i = 0; i < n; i++) {
		if (!is_hex(s[i]))
			return -1;
		v = v * 16 + (is_digit(s[i]) ? s[i] - '0' : (s[i] | 0x20) - 'a' + 10);
	}
	return v;
}

typedef struct rxscan {
	const char *src;
	size_t i;
	rxout_t *o;
	const char *why; /* set: refused at offset at */
	size_t at;
} rxscan_t;

static bool rx_refuse(rxscan_t *r, size_t at, const char *why)
{
	r->why = why;
	r->at = at;
	return false;
}

/* \p{...} / \P{...}; r->i is on the '{'. */
static bool rx_property(rxscan_t *r, char p, size_t at)
{
	const char *name = r->src + r->i + 1;
	const char *end = r->src[r->i] == '{' ? strchr(name, '}') : NULL;
	if (!end)
		return rx_refuse(r, at, "\\p and \\P need a property name in braces");
	size_t n = (size_t)(end - name);
	const char *eq = memchr(name, '=', n);
	const char *gc = NULL;
	if (eq) {
		size_t kn = (size_t)(eq - name);
		if ((kn == 2 && memcmp(name, "gc", 2) == 0) ||
		    (kn == 16 && memcmp(name, "General_Category", 16) == 0)) {
			gc = gc_short(eq + 1, n - kn - 1);
			if (!gc)
				return rx_refuse(r, at, "an unknown General_Category value");
		}
	} else {
		gc = gc_short(name, n);
	}
	char head[4] = {'\\', p, '{', '\0'};
	rx_puts(r->o, head, at);
	if (gc)
		rx_puts(r->o, gc, at);
	else
		rx_copy(r->o, r->src, (size_t)(name - r->src), n);
	rx_puts(r->o, "}", at);
	r->i += n + 2;
	return true;
}

/* One escape; r->i is on the backslash. */
static bool rx_escape(rxscan_t *r, bool in_class)
{
	const char *s = r->src;
	size_t at = r->i;
	char e = s[at + 1];
	r->i += 2;
	switch (e) {
	case '\0': /* PCRE2 says it: "\ at end of pattern" */
		r->i = at + 1;
		rx_puts(r->o, "\\", at);
		return true;
	case 's':
		rx_puts(r->o, in_class ? "\\s" RX_SPACES "\\s" : "[\\s" RX_SPACES "]", at);
		return true;
	case 'S':
		/* the \d at both ends makes a range ending here an error, as
		 * [\d-z] is, rather than a range from the last code point */
		rx_puts(r->o, in_class ? "\\d" RX_NONSPACES "\\d" : "[^\\s" RX_SPACES "]", at);
		return true;
	case 'v':
		rx_puts(r->o, "\\x0b", at); /* PCRE2's \v is every vertical space */
		return true;
	case 'd': case 'D': case 'w': case 'W': case 'b': case 'B':
	case 't': case 'n': case 'f': case 'r':
		rx_copy(r->o, s, at, 2);
		return true;
	case 'c':
		if (!((s[at + 2] | 0x20) >= 'a' && (s[at + 2] | 0x20) <= 'z'))
			return rx_refuse(r, at, "\\c must be followed by a letter");
		rx_copy(r->o, s, at, 3);
		r->i++;
		return true;
	case 'x':
		if (pc__schema_hex_n(s + at + 2, 2) < 0)
			return rx_refuse(r, at, "\\x must be followed by two hex digits");
		rx_copy(r->o, s, at, 4);
		r->i += 2;
		return true;
	case 'u': {
		if (s[at + 2] == '{') {
			size_t k = at + 3;
			while (is_hex(s[k]))
				k++;
			if (k == at + 3 || s[k] != '}')
				return rx_refuse(r, at, "\\u{...} must hold hex digits");
			rx_copy(r->o, s, at, k + 1 - at);
			r->i = k + 1;
			return true;
		}
		long hi = pc__schema_hex_n(s + at + 2, 4);
		if (hi < 0)
			return rx_refuse(r, at, "\\u must be followed by four hex digits or {hex digits}");
		r->i += 4;
		bool high = hi >= 0xD800 && hi <= 0xDBFF;
		long lo = high && s[at + 6] == '\\' && s[at + 7] == 'u' ? pc__schema_hex_n(s + at + 8, 4) : -1;
		if (lo >= 0xDC00 && lo <= 0xDFFF) {
			char pair[24];
			snprintf(pair, sizeof(pair), "\\u{%lx}", 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
			rx_puts(r->o, pair, at);
			r->i += 6;
			return true;
		}
		rx_copy(r->o, s, at, 6); /* a lone surrogate: PCRE2 refuses it */
		return true;
	}
	case 'p': case 'P':
		return rx_property(r, e, at);
	case 'k':
		if (in_class || s[at + 2] != '<')
			return rx_refuse(r, at, "\\k must be followed by <name> (outside [...])");
		rx_copy(r->o, s, at, 2);
		return true;
	case '0':
		if (is_digit(s[at + 2]))
			return rx_refuse(r, at, "\\0 followed by a digit (octal escapes are not ECMA-262)");
		rx_puts(r->o, "\\x00", at);
		return true;
	default:
		break;
	}
	if (is_digit(e)) {
		if (in_class)
			return rx_refuse(r, at, "a back-reference inside [...]");
		/* \g{N}: a group that does not exist is an error, never octal */
		size_t k = at + 1;
		while (is_digit(s[k]))
			k++;
		rx_puts(r->o, "\\g{", at);
		rx_copy(r->o, s, at + 1, k - at - 1);
		rx_puts(r->o, "}", at);
		r->i = k;
		return true;
	}
	if ((e | 0x20) >= 'a' && (e | 0x20) <= 'z')
		return rx_refuse(r, at, "an escape that ECMA-262 does not have");
	rx_copy(r->o, s, at, 2); /* \. \\ \/ \- ...: the character itself */
	return true;
}

/* {n}, {n,} or {n,m} at s: its length, or 0. */
static size_t rx_braces(const char *s)
{
	size_t k = 1;
	if (!is_digit(s[k]))
		return 0;
	while (is_digit(s[k]))
		k++;
	if (s[k] == ',')
		while (is_digit(s[++k]))
			;
	return s[k] == '}' ? k + 1 : 0;
}

/* Rewrites src for PCRE2; false with r->why when it is refused. */
static bool rx_prepare(rxscan_t *r)
{
	const char *s = r->src;
	bool in_class = false;
	bool quantified = false; /* the last thing copied is a quantifier */
	while (s[r->i]) {
		size_t at = r->i;
		char ch = s[at];
		if (ch == '\\') {
			if (!rx_escape(r, in_class))
				return false;
			quantified = false;
			continue;
		}
		r->i++;
		if (in_class) {
			if (ch == ']')
				in_class = false;
			/* [ is a member, never the start of PCRE2's [:alpha:] */
			rx_puts(r->o, ch == '[' ? "\\[" : (char[]){ch, '\0'}, at);
			continue;
		}
		bool was_quantified = quantified;
		quantified = false;
		switch (ch) {
		case '[':
			in_class = true;
			rx_puts(r->o, "[", at);
			if (s[r->i] == '^')
				rx_puts(r->o, "^", r->i++);
			if (s[r->i] == ':' || s[r->i] == '.' || s[r->i] == '=') {
				rx_puts(r->o, "\\", r->i);
				rx_copy(r->o, s, r->i, 1);
				r->i++;
			}
			break;
		case '.':
			rx_puts(r->o, "[^\\n\\r\\u2028\\u2029]", at);
			break;
		case '(':
			if (s[r->i] == '*')
				return rx_refuse(r, at, "(* is not ECMA-262");
			if (s[r->i] == '?') {
				char g = s[r->i + 1];
				bool ok = g == ':' || g == '=' || g == '!' ||
					  (g == '<' && s[r->i + 2] != '\0' && strchr("=!", s[r->i + 2]) != NULL) ||
					  (g == '<' && (((s[r->i + 2] | 0x20) >= 'a' && (s[r->i + 2] | 0x20) <= 'z') ||
							s[r->i + 2] == '_' || s[r->i + 2] == '$'));
				if (!ok)
					return rx_refuse(r, at, "a group syntax that ECMA-262 does not have");
			}
			rx_puts(r->o, "(", at);
			break;
		case '*': case '+': case '?':
			if (was_quantified && ch == '+')
				return rx_refuse(r, at, "a possessive quantifier (ECMA-262 has none)");
			quantified = !(was_quantified && ch == '?');
			rx_copy(r->o, s, at, 1);
			break;
		case '{': {
			size_t n = rx_braces(s + at);
			if (n) {
				rx_copy(r->o, s, at, n);
				r->i = at + n;
				quantified = true;
			} else {
				rx_puts(r->o, "{", at);
			}
			break;
		}
		default:
			rx_copy(r->o, s, at, 1);
			break;
		}
	}
	return true;
}

pcre2_match_context *pc__schema_rx_limits(void)
{
	pcre2_match_context *m = pcre2_match_context_create(NULL);
	if (m) {
		pcre2_set_match_limit(m, PC__SCHEMA_RX_MATCH_LIMIT);
		pcre2_set_depth_limit(m, PC__SCHEMA_RX_DEPTH_LIMIT);
		pcre2_set_heap_limit(m, PC__SCHEMA_RX_HEAP_LIMIT_KIB);
	}
	return m;
}

pcre2_code *pc__schema_rx_compile(const char *src, int *rc, char *why, size_t cap)
{
	rxout_t o = {0};
	rxscan_t r = {.src = src, .o = &o};
	pcre2_code *re = NULL;
	*rc = PC_EINVAL;
	if (!rx_prepare(&r) || o.oom) {
		if (o.oom)
			*rc = PC_ENOMEM;
		else
			snprintf(why, cap, "invalid regex \"%s\": %s at offset %zu", src, r.why, r.at);
		goto out;
	}
	pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
	if (!cc) {
		*rc = PC_ENOMEM;
		goto out;
	}
	pcre2_set_compile_extra_options(cc, PCRE2_EXTRA_ALT_BSUX);
	int code = 0;
	PCRE2_SIZE off = 0;
	re = pcre2_compile((PCRE2_SPTR)(o.text.p ? o.text.p : ""), o.text.len, RX_OPTIONS, &code, &off, cc);
	pcre2_compile_context_free(cc);
	if (re) {
		*rc = 0;
	} else if (code == PCRE2_ERROR_HEAP_FAILED) {
		*rc = PC_ENOMEM;
	} else {
		PCRE2_UCHAR msg[256];
		if (pcre2_get_error_message(code, msg, sizeof(msg)) < 0)
			snprintf((char *)msg, sizeof(msg), "PCRE2 error %d", code);
		size_t at = off < o.text.len ? o.from[off] : strlen(src);
		snprintf(why, cap, "invalid regex \"%s\": %s at offset %zu", src, (const char *)msg, at);
	}
out:
	free(o.text.p);
	free(o.from);
	return re;
}
