/*
 * Nothing a client was told is lost or contradicted, across SIGKILLs: a
 * real `pincer gateway` (token auth, loopback, the embedded mock with
 * plain, tool-calling and slow streamed answers) on one state directory
 * is started, loaded for a random 100-800 ms by WebSocket clients
 * (`agent` and `chat.send` to a few shared sessions, queue mode
 * followup, idempotency keys, some sent again, across rounds too) and
 * HTTP clients (/v1/chat/completions, plain and streamed, some with an
 * Idempotency-Key), and SIGKILLed at that point, round after round.
 * After a restart, once the gateway has had time to recover (agent.wait
 * on every acknowledged run), the store is read through its C API (about
 * one restart in four is loaded and killed again at once instead, while
 * it may still be running what the crash left queued; the next check
 * covers it):
 *
 *  a. every acknowledged message is in its session's transcript exactly
 *     once as a user message, or agent.wait says its run failed, why;
 *  b. no run a client was told had finished reads back as unfinished,
 *     or as ended otherwise than told;
 *  c. transcripts are well-formed: runs do not interleave, tool calls are
 *     answered once each (a run the crash cut short may leave its last
 *     calls unanswered);
 *  d. PRAGMA integrity_check says ok;
 *  e. an idempotent retry names the first run (WebSocket always; HTTP
 *     when the gateway honours Idempotency-Key, which is probed).
 *
 * PINCER_TEST_SEED replays a seed, PINCER_CRASH_ROUNDS sets the rounds
 * (20, or 6 under a sanitizer), PINCER_TEST_BIN runs another pincer.
 * Every wait is bounded; only this test's children are signalled, by pid.
 */
#include "gateway_load.h"

#define WS_CLIENTS 3
#define HTTP_CLIENTS 2

/* Drives the load on `g` for `ms`, then SIGKILLs it. */
static void round_of_load(gl_ledger_t *l, gl_gw_t *g, unsigned seed, unsigned ms)
{
	int stop = 0, quit = 0;
	gl_load_t ld[WS_CLIENTS + HTTP_CLIENTS];
	memset(ld, 0, sizeof(ld));
	for (int i = 0; i < WS_CLIENTS + HTTP_CLIENTS; i++) {
		ld[i] = (gl_load_t){.l = l, .port = g->port, .seed = seed * 31u + (unsigned)i, .stop = &stop,
				    .quit = &quit, .http = i >= WS_CLIENTS, .max_pending = 4};
		gl_load_start(&ld[i]);
	}
	sleep_ms(ms); /* the kill's random moment, not a wait for anything */
	gl_gw_kill(g);
	STORE(quit, 1);
	for (int i = 0; i < WS_CLIENTS + HTTP_CLIENTS; i++)
		pthread_join(ld[i].th, NULL);
}

/* What the gateway's listening line says it recovered at start. */
static unsigned recovered_at_start(const gl_gw_t *g)
{
	char *out = read_file(g->out);
	cJSON *j = cJSON_Parse(out);
	free(out);
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "recovered");
	cr_assert(cJSON_IsObject(r), "no \"recovered\" in the listening line");
	unsigned n = (unsigned)(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "rerun")) +
				cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "interrupted")));
	cJSON_Delete(j);
	return n;
}

Test(crash_loop, nothing_a_client_was_told_is_lost_or_contradicted, .timeout = 900)
{
	unsigned seed = gl_seed("crash_loop");
	unsigned rnd = seed;
	unsigned rounds = gl_env_uint("PINCER_CRASH_ROUNDS", GL_SANITIZED ? 6 : 20);
	uint64_t recover_ms = GL_SANITIZED ? 60000 : 20000;
	static const char *const sessions[] = {"crash-a", "crash-b", "crash-c"};
	gl_ledger_t *l = gl_ledger_new(sessions, 3);
	char home[GL_HOME_MAX];
	gl_home_init(home, "pincer-crash");
	gl_gw_t g;
	gl_gw_init(&g, home, 0);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	gl_report_t rep = {0};
	uint64_t t0 = now_ms();
	unsigned recovered = 0;
	for (unsigned round = 0; round <= rounds; round++) {
		gl_gw_start(&g);
		recovered += recovered_at_start(&g);
		if (round == 0) {
			l->http_idem = gl_probe_http_idem(g.port);
			fprintf(stderr, "crash_loop: Idempotency-Key on HTTP is %s\n",
				l->http_idem ? "honoured: retried too" : "not honoured: HTTP requests are not retried");
		} else if (round < rounds && rand_r(&rnd) % 4 == 0) {
			/* now and then the load and the kill land while the restart
			 * still runs what the last crash left queued */
			fprintf(stderr, "after restart %u: killed again before recovery is checked\n", round);
		} else {
			char when[64];
			snprintf(when, sizeof(when), "after restart %u", round);
			gl_wait_runs(l, g.port, now_ms() + recover_ms);
			gl_check_store(l, home, when, &rep);
		}
		if (round == rounds)
			break;
		l->round = (int)round;
		unsigned load_seed = rand_r(&rnd), load_ms = 100 + rand_r(&rnd) % 701u;
		round_of_load(l, &g, load_seed, load_ms);
	}
	cr_assert_eq(gl_gw_term(&g), 0, "the gateway did not stop on SIGTERM");
	gl_check_store(l, home, "stopped", &rep);
	fprintf(stderr, "crash_loop: %u rounds in %llu ms, seed %u, %u runs recovered at restarts\n", rounds,
		(unsigned long long)(now_ms() - t0), seed, recovered);
	/* kills under load always leave some run accepted or mid-way */
	cr_assert_gt(recovered, 0, "no restart said it recovered anything");
	curl_global_cleanup();
	cr_assert_eq(rep.failures, 0, "%d failures (seed %u); the first: %s (state left in %s)", rep.failures, seed,
		     rep.first, home);
	gl_ledger_free(l);
	rm_tree(home);
}
