/* Secrets masked in text (redact.h). One pass, no allocation but the
 * output's. */
#include "redact.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/io.h"

#define MASK "***"

static bool is_word(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* How many bytes from `s` are of `ok` (a predicate as a string of extra
 * characters besides letters and digits). */
static size_t span_of(const char *s, const char *extra)
{
	size_t n = 0;
	while (s[n] && (is_word(s[n]) ? s[n] != '-' || strchr(extra, '-') : strchr(extra, s[n]) != NULL))
		n++;
	return n;
}

/* A key-like token at `s`: its length to mask past the prefix, or 0. */
static size_t key_at(const char *s, size_t *keep)
{
	if (!strncmp(s, "sk-", 3)) {
		size_t n = span_of(s + 3, "-_*");
		*keep = 3;
		return n >= 8 ? n : 0;
	}
	if (!strncmp(s, "AIza", 4)) {
		size_t n = span_of(s + 4, "-_");
		*keep = 4;
		return n >= 20 ? n : 0;
	}
	return 0;
}

/* "Bearer <token>" / "Basic <token>" at `s`: the length to mask after
 * the scheme and its blanks (in *keep), or 0. */
static size_t scheme_at(const char *s, size_t *keep)
{
	static const char *const schemes[] = {"bearer", "basic"};
	for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
		size_t n = strlen(schemes[i]);
		if (strncasecmp(s, schemes[i], n) || (s[n] != ' ' && s[n] != '\t'))
			continue;
		while (s[n] == ' ' || s[n] == '\t')
			n++;
		size_t v = span_of(s + n, "-_.~+/=*");
		while (v > 0 && s[n + v - 1] == '.') /* a sentence's full stop */
			v--;
		*keep = n;
		return v;
	}
	return 0;
}

/* "<name>[\"'] [:=] [\"']<value>" at `s` for a secret's name: the length
 * to mask (in *keep what comes before the value), or 0. */
static size_t named_at(const char *s, size_t *keep)
{
	static const char *const names[] = {"authorization", "x-api-key",     "api_key", "api-key",
					    "apikey",	     "access_token",  "refresh_token", "client_secret",
					    "password",	     "secret",	      "token"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		size_t n = strlen(names[i]);
		if (strncasecmp(s, names[i], n) || is_word(s[n]))
			continue;
		size_t p = n;
		while (s[p] == '"' || s[p] == '\'' || s[p] == ' ' || s[p] == '\t')
			p++;
		if (s[p] != ':' && s[p] != '=')
			return 0;
		p++;
		while (s[p] == '"' || s[p] == '\'' || s[p] == ' ' || s[p] == '\t')
			p++;
		/* an Authorization value is a scheme and a token: mask it whole */
		const char *stop = i == 0 ? "\"'\r\n,;)]}" : "\"' \t\r\n,;&)]}";
		size_t v = strcspn(s + p, stop);
		*keep = p;
		return v;
	}
	return 0;
}

char *pc_redact(const char *in)
{
	if (!in)
		return NULL;
	pc__buf_t out = {0};
	pc__buf_append(&out, "", 0);
	const char *s = in;
	while (*s) {
		size_t keep = 0, mask = 0;
		/* a match starts a word: "task-..." holds no key */
		bool start = s == in || !is_word(s[-1]);
		if (start && !(mask = key_at(s, &keep)) && !(mask = scheme_at(s, &keep)))
			mask = named_at(s, &keep);
		if (mask) {
			pc__buf_append(&out, s, keep);
			pc__buf_append(&out, MASK, sizeof(MASK) - 1);
			s += keep + mask;
		} else {
			pc__buf_append(&out, s, 1);
			s++;
		}
	}
	return pc__buf_take(&out);
}
