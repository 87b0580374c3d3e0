/*
 * A blocking HTTP client for tests (libcurl's easy interface): one request,
 * the whole answer kept. Header-only, like the other test helpers.
 */
#ifndef PC_TESTS_CURL_CLIENT_H
#define PC_TESTS_CURL_CLIENT_H

#include <criterion/criterion.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "test_util.h"

typedef struct resp {
	CURLcode code;
	long status;
	char *body, *head;  /* NUL-terminated, "" when none came */
	size_t len, head_len;
	long http_version;  /* CURL_HTTP_VERSION_*; 0: curl's default (HTTP/1.1 for http://) */
	size_t abort_after; /* > 0: hang up once this many body bytes arrived */
	const char *mark;   /* body text whose arrival time is wanted */
	uint64_t t0;
	uint64_t t_mark;    /* ms after t0; 0: never seen */
	uint64_t t_end;
} resp_t;

static inline void resp_append(char **buf, size_t *len, const char *p, size_t n)
{
	char *b = realloc(*buf, *len + n + 1);
	cr_assert_not_null(b);
	memcpy(b + *len, p, n);
	*len += n;
	b[*len] = '\0';
	*buf = b;
}

static inline size_t resp_on_body(char *p, size_t sz, size_t n, void *user)
{
	resp_t *r = user;
	resp_append(&r->body, &r->len, p, sz * n);
	if (r->mark && !r->t_mark && strstr(r->body, r->mark))
		r->t_mark = now_ms() - r->t0 + 1; /* +1: 0 means never */
	if (r->abort_after && r->len >= r->abort_after)
		return 0; /* curl hangs up */
	return sz * n;
}

static inline size_t resp_on_head(char *p, size_t sz, size_t n, void *user)
{
	resp_t *r = user;
	resp_append(&r->head, &r->head_len, p, sz * n);
	return sz * n;
}

/* Sends `method` to 127.0.0.1:port`path`; `hdrs` are NULL-terminated
 * "Name: value" lines (may be NULL). What r asks for (http_version,
 * abort_after, mark) is set before the call; the rest is filled. */
static inline void curl_request(uint16_t port, const char *method, const char *path, const char *const *hdrs,
				const char *body, size_t body_len, long timeout_ms, resp_t *r)
{
	char url[256];
	snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", (unsigned)port, path);
	CURL *c = curl_easy_init();
	cr_assert_not_null(c);
	struct curl_slist *h = curl_slist_append(NULL, "Expect:");
	if (body)
		h = curl_slist_append(h, "Content-Type: application/json");
	for (size_t i = 0; hdrs && hdrs[i]; i++)
		h = curl_slist_append(h, hdrs[i]);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, resp_on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, resp_on_head);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (r->http_version)
		curl_easy_setopt(c, CURLOPT_HTTP_VERSION, r->http_version);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
	}
	r->t0 = now_ms();
	r->code = curl_easy_perform(c);
	r->t_end = now_ms() - r->t0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	if (!r->body)
		resp_append(&r->body, &r->len, "", 0);
	if (!r->head)
		resp_append(&r->head, &r->head_len, "", 0);
}

static inline void resp_free(resp_t *r)
{
	free(r->body);
	free(r->head);
	memset(r, 0, sizeof(*r));
}

#endif
