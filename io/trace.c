/*
 * Lifecycle traces of the I/O layer's connection machines (io.h,
 * pc_io_trace_set; loop_internal.h, pc__io_trace).
 *
 * io sits below obs, so it cannot write through the agent's logger: the
 * lines go to standard error unless whoever owns a logger registers a sink
 * (an upward call by registration). The set of traced machines and the
 * sink are read with relaxed atomics: set them before the traffic that
 * should be traced. The sink and its user are read and called under one
 * lock, so a release (pc_io_trace_release) never races a line in flight;
 * only traced transitions take it.
 */
#include "loop_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
	const char *name;
	unsigned bit;
} machines[] = {
	{"http", PC__IO_TRACE_HTTP},
	{"ws", PC__IO_TRACE_WS},
	{"wsclient", PC__IO_TRACE_WSCLIENT},
	{"h2stream", PC__IO_TRACE_H2STREAM},
	{"h1client", PC__IO_TRACE_H1CLIENT},
};

static unsigned trace_mask;
static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static pc_io_trace_fn trace_fn; /* sink_lock */
static void *trace_user;        /* sink_lock */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static bool explicit_set;

static unsigned parse(const char *spec)
{
	unsigned mask = 0;
	while (spec && *spec) {
		size_t n = strcspn(spec, ",");
		const char *p = spec;
		size_t len = n;
		while (len && (*p == ' ' || *p == '\t'))
			p++, len--;
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len == 3 && !strncmp(p, "all", 3))
			mask = ~0u;
		for (size_t i = 0; i < sizeof(machines) / sizeof(machines[0]); i++)
			if (strlen(machines[i].name) == len && !strncmp(p, machines[i].name, len))
				mask |= machines[i].bit;
		spec += n + (spec[n] == ',');
	}
	return mask;
}

static void read_env(void)
{
	if (!__atomic_load_n(&explicit_set, __ATOMIC_ACQUIRE))
		__atomic_store_n(&trace_mask, parse(getenv("PINCER_TRACE")), __ATOMIC_RELAXED);
}

void pc_io_trace_set(const char *spec, pc_io_trace_fn fn, void *user)
{
	__atomic_store_n(&explicit_set, true, __ATOMIC_RELEASE);
	pthread_once(&env_once, read_env);
	pthread_mutex_lock(&sink_lock);
	trace_user = user;
	trace_fn = fn;
	pthread_mutex_unlock(&sink_lock);
	__atomic_store_n(&trace_mask, parse(spec ? spec : getenv("PINCER_TRACE")), __ATOMIC_RELEASE);
}

bool pc__io_traced(unsigned machine)
{
	pthread_once(&env_once, read_env);
	return (__atomic_load_n(&trace_mask, __ATOMIC_ACQUIRE) & machine) != 0;
}

static void emit(const char *line)
{
	pthread_mutex_lock(&sink_lock);
	if (trace_fn)
		trace_fn(trace_user, line);
	else
		fprintf(stderr, "%s\n", line);
	pthread_mutex_unlock(&sink_lock);
}

void pc__io_trace(const char *machine, uint64_t id, const char *from, const char *to, const char *why)
{
	char line[256];
	snprintf(line, sizeof(line), "trace %s %llu %s -> %s (%s)", machine, (unsigned long long)id, from, to,
		 why ? why : "");
	emit(line);
}

void pc__io_trace_sub(const char *machine, uint64_t id, uint64_t sub, const char *from, const char *to,
		      const char *why)
{
	char line[256];
	snprintf(line, sizeof(line), "trace %s %llu/%llu %s -> %s (%s)", machine, (unsigned long long)id,
		 (unsigned long long)sub, from, to, why ? why : "");
	emit(line);
}

bool pc_io_trace_claim(pc_io_trace_fn fn, void *user)
{
	if (!fn)
		return false;
	pthread_mutex_lock(&sink_lock);
	bool free_ = trace_fn == NULL;
	if (free_) {
		trace_fn = fn;
		trace_user = user;
	}
	pthread_mutex_unlock(&sink_lock);
	/* The claimant is being made: PINCER_TRACE is read again, as the
	 * agent reads it when it is made (unless pc_io_trace_set chose). */
	if (free_ && !__atomic_load_n(&explicit_set, __ATOMIC_ACQUIRE))
		__atomic_store_n(&trace_mask, parse(getenv("PINCER_TRACE")), __ATOMIC_RELEASE);
	return free_;
}

void pc_io_trace_release(void *user)
{
	pthread_mutex_lock(&sink_lock);
	if (trace_fn && trace_user == user) {
		trace_fn = NULL;
		trace_user = NULL;
	}
	pthread_mutex_unlock(&sink_lock);
}

uint64_t pc__io_serial(void)
{
	static uint64_t next;
	return __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
}
