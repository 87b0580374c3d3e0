/*
 * `pincer load`'s synchronous GETs (load.h), from the command's thread
 * before the runtime starts and after it is gone: the target's /metrics
 * (load_metrics.c) and, for an http:// target given no --model, its
 * /models. libcurl's easy interface: the I/O layer's clients answer
 * actors, and there are none at those times.
 */
#include "load.h"

#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "io/io.h"

typedef struct sink {
	pc__buf_t *body;
	size_t max;
} sink_t;

static size_t on_data(char *data, size_t size, size_t n, void *user)
{
	sink_t *s = user;
	size_t len = size * n;
	if (s->body->len + len > s->max || pc__buf_append(s->body, data, len) != 0)
		return 0; /* curl fails the transfer */
	return len;
}

bool pc_load_get(const char *url, const char *header, uint64_t timeout_ms, size_t max, pc__buf_t *body, char *why,
		 size_t why_len)
{
	/* the first call does libcurl's global init, which is not thread-safe:
	 * here, before the run, the command's thread is the only one */
	CURL *c = curl_easy_init();
	struct curl_slist *h = header ? curl_slist_append(NULL, header) : NULL;
	if (!c || (header && !h)) {
		curl_easy_cleanup(c);
		curl_slist_free_all(h);
		snprintf(why, why_len, "out of memory");
		return false;
	}
	sink_t sink = {body, max};
	char err[CURL_ERROR_SIZE] = "";
	CURLcode rc = curl_easy_setopt(c, CURLOPT_URL, url);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	if (rc == CURLE_OK && h)
		rc = curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	if (rc == CURLE_OK)
		rc = curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
	if (rc == CURLE_OK)
		rc = curl_easy_perform(c);
	if (rc != CURLE_OK)
		snprintf(why, why_len, "%s", err[0] ? err : curl_easy_strerror(rc));
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	return rc == CURLE_OK;
}

/* A model list this long is not read. */
#define MODELS_MAX_BYTES (1u << 20)

void pc_load_pick_model(pc_load_opts_t *o)
{
	if (o->proto != PC_LOAD_HTTP || o->model)
		return;
	o->model = "mock";
	char url[sizeof(o->url) + 8], auth[300] = "", why[CURL_ERROR_SIZE + 32];
	size_t n = strlen(o->url) - strlen("/chat/completions");
	snprintf(url, sizeof(url), "%.*s/models", (int)n, o->url);
	if (o->token)
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", o->token);
	pc__buf_t body = {0};
	uint64_t timeout = o->connect_timeout_ms < 5000 ? o->connect_timeout_ms : 5000;
	if (pc_load_get(url, o->token ? auth : NULL, timeout, MODELS_MAX_BYTES, &body, why, sizeof(why))) {
		cJSON *j = cJSON_ParseWithLength(body.p ? body.p : "", body.len);
		const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0);
		const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(first, "id"));
		if (id && *id && strlen(id) < sizeof(o->model_found)) {
			snprintf(o->model_found, sizeof(o->model_found), "%s", id);
			o->model = o->model_found;
		}
		cJSON_Delete(j);
	}
	pc__buf_free(&body);
}
