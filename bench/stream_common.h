/*
 * What the streaming benchmarks share: the mock LLM in a forked child
 * process, and the parsing work a plain curl-multi baseline does for each
 * response (SSE parser and stream decoder, as the provider stream actor).
 */
#ifndef PC_BENCH_STREAM_COMMON_H
#define PC_BENCH_STREAM_COMMON_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "agents/mock/mock_server.h"
#include "agents/providers/stream.h"
#include "benchlib.h"
#include "io/sse.h"

/* The mock LLM in a forked child process (its own runtime: `workers`
 * workers and one I/O thread), for loads whose server ends would not fit
 * in this process's open-file limit. `max_streams`: HTTP/2 requests at
 * once on one connection (0: the default). Fork before this process
 * starts any runtime. Returns the child's pid; *port is where it listens. */
static inline pid_t bench_mock_child_streams(const char *scenario, uint32_t workers, uint32_t max_streams,
					     uint16_t *port)
{
	int fds[2];
	if (pipe(fds) != 0)
		bench_fail("pipe");
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		bench_fail("fork");
	if (pid == 0) {
		close(fds[0]);
		prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive a failed run */
		pc_runtime_config_t rc;
		pc_runtime_config_init(&rc);
		rc.workers = workers;
		pc_runtime_t *rt = NULL;
		pc_io_t *io = NULL;
		pc_mock_server_t *m = NULL;
		pc_io_config_t ioc = {.threads = 1};
		pc_mock_server_config_t mc = {.host = "127.0.0.1", .scenario = scenario, .max_records = 64,
					      .max_record_bytes = (size_t)1 << 20, .max_streams = max_streams};
		char err[256] = "";
		if (pc_runtime_new(&rc, &rt) || pc_runtime_start(rt) || pc_io_new(rt, &ioc, &io) ||
		    pc_mock_server_start(io, &mc, &m, err, sizeof(err)))
			_exit(1);
		uint16_t p = pc_mock_server_port(m);
		if (write(fds[1], &p, sizeof(p)) != sizeof(p))
			_exit(1);
		close(fds[1]);
		pause(); /* until the parent's SIGTERM */
		_exit(0);
	}
	close(fds[1]);
	if (read(fds[0], port, sizeof(*port)) != sizeof(*port))
		bench_fail("the mock server did not start");
	close(fds[0]);
	return pid;
}

static inline pid_t bench_mock_child(const char *scenario, uint32_t workers, uint16_t *port)
{
	return bench_mock_child_streams(scenario, workers, 0, port);
}

static inline void bench_mock_child_stop(pid_t pid)
{
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
}

typedef struct parse {
	pc_sse_parser_t *sse;
	pc_stream_decoder_t *dec;
} parse_t;

static inline int feed_decoder(void *user, const pc_sse_event_t *ev) { return pc_stream_decoder_feed_sse(user, ev); }

static inline void parse_init(parse_t *p)
{
	if (pc_stream_decoder_new(PC_API_OPENAI_COMPLETIONS, NULL, NULL, &p->dec) ||
	    pc_sse_parser_new(NULL, feed_decoder, p->dec, &p->sse))
		bench_fail("parser");
}

/* Ends the stream as the provider stream actor does: the assembled
 * message, printed as the JSON its owner receives. */
static inline bool parse_finish(parse_t *p)
{
	pc_stream_result_t r;
	bool ok = pc_sse_finish(p->sse) == 0 && pc_stream_decoder_finish(p->dec, &r) == 0 && r.complete &&
		  !r.error_message;
	cJSON *j = NULL;
	if (ok && r.nblocks && pc_stream_result_to_json(&r, &j) == 0) {
		char *text = cJSON_PrintUnformatted(j);
		ok = text != NULL;
		cJSON_free(text);
		cJSON_Delete(j);
	}
	pc_sse_parser_free(p->sse);
	pc_stream_decoder_free(p->dec);
	return ok;
}

#endif
