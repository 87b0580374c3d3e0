/*
 * Secrets masked in text (agents/obs/redact.h): provider keys, bearer and
 * basic credentials, named secrets; everything else kept as it was.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "agents/obs/redact.h"

TestSuite(redact, .timeout = 10);

static void expect(const char *in, const char *want)
{
	char *out = pc_redact(in);
	cr_assert_not_null(out);
	cr_assert_str_eq(out, want, "in: %s", in);
	free(out);
}

Test(redact, provider_keys_are_masked)
{
	expect("Incorrect API key provided: sk-proj-AbCdEf0123456789xyz. You can find your key.",
	       "Incorrect API key provided: sk-***. You can find your key.");
	expect("Incorrect API key provided: sk-abc12345**********wxyz", "Incorrect API key provided: sk-***");
	expect("key sk-ant-api03-Zz_9-aa-bbbbbbbb rejected", "key sk-*** rejected");
	expect("google AIzaSyA1234567890abcdefghijklmnop0 bad", "google AIza*** bad");
	/* too short to be a key, or inside a word: kept */
	expect("sk-short and task-sk-12345678abc", "sk-short and task-sk-12345678abc");
}

Test(redact, credentials_and_named_secrets_are_masked)
{
	expect("got Authorization: Bearer abc.def-ghi", "got Authorization: ***");
	expect("{\"authorization\":\"Basic dXNlcjpwYXNz\",\"x\":1}", "{\"authorization\":\"***\",\"x\":1}");
	expect("sent bearer eyJhbGciOi.payload.sig here", "sent bearer *** here");
	expect("api_key=abc123&model=m1", "api_key=***&model=m1");
	expect("x-api-key: k-999 next", "x-api-key: *** next");
	expect("{\"api-key\": \"secret-value\", \"password\":\"hunter2\"}",
	       "{\"api-key\": \"***\", \"password\":\"***\"}");
	expect("access_token=aaa; refresh_token=bbb", "access_token=***; refresh_token=***");
}

Test(redact, other_text_is_kept_byte_for_byte)
{
	const char *keep[] = {"",
			      "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 30000.",
			      "Your credit balance is too low to access the Anthropic API.",
			      "max_tokens: 4096 is too large; the token limit is 8192",
			      "Bearer", "password reset required", "caf\xc3\xa9 \xe2\x9c\x93 sk-"};
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
		expect(keep[i], keep[i]);
	cr_assert_null(pc_redact(NULL));
}

/* Any bytes (a provider's body is the network's): no crash, no read past
 * the end (ASan), an answer no longer than a mask per three bytes. */
Test(redact, random_bytes_are_safe)
{
	srand(7);
	char in[256];
	for (int round = 0; round < 2000; round++) {
		size_t n = (size_t)(rand() % 255);
		for (size_t i = 0; i < n; i++)
			in[i] = (char)(1 + rand() % 255);
		in[n] = '\0';
		char *out = pc_redact(in);
		cr_assert_not_null(out);
		cr_assert_leq(strlen(out), n + 3 * (n / 3 + 1));
		free(out);
	}
}
