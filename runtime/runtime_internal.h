/*
 * Runtime internals shared by the scheduler, the timers, the blocking pool
 * and the actor core. Never installed.
 */
#ifndef PC_RUNTIME_RUNTIME_INTERNAL_H
#define PC_RUNTIME_RUNTIME_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../actors/actor.h"
#include "../mailbox/msg_pool.h"
#include "error.h"
#include "runtime.h"
#include "sync.h"
#include "timer_wheel_internal.h"
#include "trim.h"

#define PC__RUNQ_SIZE 256u
#define PC__LIFO_MAX_RUNS 3u   /* consecutive LIFO turns while others wait */
#define PC__INJECT_EVERY 61u   /* ticks between fairness checks of inject */
#define PC__ID_BLOCK 1024u     /* ids a worker takes from the global counter */
#define PC__SENDS_PER_BATCH 4u /* a turn ends after batch * this many sends */
#define PC__OUTBOX_MAX 64u     /* messages in one pushed chain */
/* Backpressure: a mailbox this deep holds its (actor) senders back until
 * it is down to PC__DEPTH_LOW. */
#define PC__DEPTH_HIGH 1024u
#define PC__DEPTH_LOW 256u

enum { PC__RT_NEW, PC__RT_RUNNING, PC__RT_STOPPING, PC__RT_STOPPED };

/* The running actor's context; embedded in its worker. */
struct pc_ctx {
	struct pc__worker *w;       /* NULL for stop handlers run at shutdown */
	pc_runtime_t *rt;
	pc_actor_t *actor;
	pc_actor_t *mute_target;    /* retained: a receiver too far behind that we sent to */
	uint32_t sends;             /* messages sent in this turn */
	/* Outbox: consecutive sends to one receiver, pushed as one chain when
	 * the receiver changes, the handler returns, or it is full. */
	pc_actor_t *out_to;         /* retained while the outbox holds messages */
	pc_msg_t *out_first, *out_last;
	uint32_t out_n;
	bool exit_req;
	int exit_reason;
	int exit_code;
};

/* Per-worker counters: written by their worker only, read by anyone. */
typedef struct pc__worker_counters {
	uint64_t handled, sent, turns, steals, parks, wakeups, trims, parked_ns;
	uint64_t spawned, exited, reclaimed, dead_letters, mutes;
} pc__worker_counters_t;

/* A bounded ring of runnable actors (the Go/Tokio run queue): the owner
 * pushes at tail and pops at head; thieves take half from head. */
typedef struct pc__runq {
	uint32_t head; /* CAS by owner and thieves */
	uint32_t tail; /* written by the owner only */
	pc_actor_t *buf[PC__RUNQ_SIZE];
} pc__runq_t;

typedef struct pc__worker {
	pc__runq_t runq;
	pc_actor_t *lifo;        /* non-stealable hand-off slot */
	uint32_t lifo_runs;
	uint32_t index;
	uint32_t tick;
	uint32_t park_word;      /* futex: 1 = woken */
	bool searching;
	bool notify_owed;        /* made work stealable during this turn */
	pc__trim_clock_t trim;   /* when its free heap is due to go back */
	uint64_t rng;
	uint64_t id_next, id_limit;
	uint64_t started_ns;
	uint64_t parked_since;    /* 0 while awake (atomic) */
	uint32_t park_seq;        /* seqlock over parked_since + c.parked_ns: odd while they change */
	pc_runtime_t *rt;
	pthread_t thread;
	bool thread_started;
	struct pc_ctx ctx;
	pc__msg_cache_t msg_cache;
	pc__mags_t actor_cache;   /* free actor slots */
	pc__worker_counters_t c;
} __attribute__((aligned(64))) pc__worker_t;

typedef struct pc__timer_entry pc__timer_entry_t;

typedef struct pc__timers {
	pthread_mutex_t lock;
	pthread_cond_t cond;     /* the timer thread sleeps here */
	pc__timer_wheel_t wheel;
	pc__timer_entry_t **chunks;
	uint32_t nchunks;
	uint32_t free_head;      /* index + 1 of the first free entry, 0 = none */
	uint64_t sleep_until;    /* what the timer thread waits for (ns; atomic
				  * stores, read without the lock by
				  * pc__timers_quiet_for) */
	pc__timer_entry_t *soon_head, *soon_tail; /* due within the current ms, by due time */
	uint64_t pending;        /* live entries (atomic reads) */
	bool stopping;
	pthread_t thread;
	bool thread_started;
} pc__timers_t;

typedef struct pc__blocking_job pc__blocking_job_t;

/* A blocking thread's own wake-up (blocking.c). */
typedef struct pc__blocking_idler {
	pthread_cond_t cond;
	bool called;             /* a submitter took it off the idle stack */
} pc__blocking_idler_t;

typedef struct pc__blocking {
	pthread_mutex_t lock;
	pc__blocking_job_t *head, *tail;
	uint32_t queued, max_queued;
	uint32_t threads, max_threads;
	uint32_t named;          /* threads that have taken a name */
	uint64_t pending;        /* queued + running (atomic reads) */
	bool stopping;
	pthread_t *tids;
	pc__blocking_idler_t *idlers; /* one per thread, by its name's number */
	uint32_t *idle;          /* the waiting threads, the latest on top */
	uint32_t nidle;
	uint32_t waking;         /* called off the stack, not yet awake */
} pc__blocking_t;

struct pc__registry;
struct pc__actor_pool;

struct pc_runtime {
	pc_runtime_config_t cfg;
	pc__mimalloc_t mi; /* when mimalloc is the process's allocator (trim.h) */
	uint32_t nworkers;
	uint32_t state;          /* PC__RT_* (atomic) */
	pc__worker_t *workers;

	/* Global injection queue: a mutex-guarded ring, with a lock-free
	 * length for the "is there anything" checks on the hot path. */
	pthread_mutex_t inject_lock;
	pc_actor_t **inject_buf;
	uint32_t inject_head, inject_cap;
	uint32_t inject_len;     /* atomic reads */

	/* Parking: see park.c for the protocol. */
	pthread_mutex_t idle_lock;
	pthread_cond_t quiet_cond;
	uint32_t *idle_stack;
	uint32_t nidle_stack;
	uint32_t num_idle;       /* atomic */
	uint32_t num_searching;  /* atomic */
	uint32_t quiet_waiters;  /* atomic */
	uint32_t held;           /* atomic: threads holding actors of this runtime
				  * (pc_runtime_hold_begin), not yet queued */

	pc__timers_t timers;
	pc__blocking_t blocking;
	struct pc__actor_pool *actor_pool;
	struct pc__registry *registry;

	/* Counters for work done off the workers (atomic); a guest's own go
	 * here when it is freed. */
	uint64_t ext_sent, ext_spawned, ext_exited, ext_dead, timers_fired, blocking_done, blocking_trims;
	uint64_t ext_reclaimed, ext_mutes, ext_guest_turns;
	/* The live guests (worker.c), whose counters the stats add in. */
	pthread_mutex_t guests_lock;
	struct pc_runtime_guest *guests;
	uint32_t guests_running; /* atomic: guests in a run now; the stop waits
				  * for none before it runs stop handlers */
	uint64_t next_id;        /* atomic, handed out in blocks */
};

/* The worker running on this thread, or NULL. */
pc__worker_t *pc__current_worker(void);
/* Whether this thread is running actors as a guest now. */
bool pc__guest_running(void);
/* The stop, once the state says stopping: waits until no guest runs an
 * actor (a run started before sees the state after its turn and hands the
 * rest over). */
void pc__guests_wait_out(pc_runtime_t *rt);
/* Adds the live guests' counters into `into` (stats); guests_lock held. */
void pc__guests_count(pc_runtime_t *rt, pc__worker_counters_t *into);

/* Scheduler (worker.c, park.c) */
void pc__schedule(pc_runtime_t *rt, pc_actor_t *a);
void pc__schedule_external(pc_runtime_t *rt, pc_actor_t *a);
void pc__notify(pc_runtime_t *rt);
void pc__inject_push(pc_runtime_t *rt, pc_actor_t *const *actors, uint32_t n);
pc_actor_t *pc__inject_pop(pc_runtime_t *rt);
bool pc__work_available(pc_runtime_t *rt);
void pc__park(pc__worker_t *w);
void pc__wake_all(pc_runtime_t *rt);
void pc__quiet_signal(pc_runtime_t *rt);
int pc__workers_start(pc_runtime_t *rt);
void pc__workers_join(pc_runtime_t *rt);

/* Run queue (runq.c) */
void pc__runq_push(pc__worker_t *w, pc_actor_t *a);
pc_actor_t *pc__runq_pop(pc__worker_t *w);
pc_actor_t *pc__runq_steal(pc__worker_t *thief, pc__worker_t *victim);
uint32_t pc__runq_len(const pc__runq_t *q);

/* Ids: unique, never reused. */
uint64_t pc__next_id(pc_runtime_t *rt);

/* Timers (timers.c) */
int pc__timers_init(pc_runtime_t *rt);
int pc__timers_start(pc_runtime_t *rt);
void pc__timers_stop(pc_runtime_t *rt);
void pc__timers_free(pc_runtime_t *rt);
/* Whether no timer is due within `ns` of `now_ns` (a hint: read without
 * the timer thread's lock). */
bool pc__timers_quiet_for(pc_runtime_t *rt, uint64_t now_ns, uint64_t ns);
/* A fired timer message reached its actor: true if it is to be handled,
 * false if it was cancelled (the caller frees it). Releases the entry. */
bool pc__timer_claim(pc_runtime_t *rt, pc_msg_t *msg);

/* Blocking pool (blocking.c) */
int pc__blocking_init(pc_runtime_t *rt);
void pc__blocking_stop(pc_runtime_t *rt);
void pc__blocking_free(pc_runtime_t *rt);

/* Actor core (actors/actor.c) */
enum { PC__TURN_IDLE, PC__TURN_AGAIN, PC__TURN_MUTED, PC__TURN_GONE };
int pc__actor_turn(pc__worker_t *w, pc_actor_t *a);
void pc__actors_stop_all(pc_runtime_t *rt);
void pc__actors_drain(pc_runtime_t *rt);
void pc__actors_free(pc_runtime_t *rt);
int pc__actor_pool_new(pc_runtime_t *rt);
void pc__actor_pool_free(pc_runtime_t *rt);
/* Frees a message the runtime took from a mailbox without delivering it,
 * releasing what it holds (reply reference, timer entry). */
void pc__msg_dispose(pc_runtime_t *rt, pc_msg_t *m);
void pc__count_dead_letter(pc_runtime_t *rt);

#endif
