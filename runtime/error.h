/*
 * Error codes. Functions that can fail return 0 or one of these negative
 * codes and write results through out parameters.
 */
#ifndef PINCER_RUNTIME_ERROR_H
#define PINCER_RUNTIME_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

enum {
	PC_OK = 0,
	PC_ENOMEM = -1,    /* an allocation failed */
	PC_EINVAL = -2,    /* a bad argument */
	PC_ETIMEDOUT = -3, /* a wait ran out of time */
	PC_ESTOPPED = -4,  /* the actor or runtime has stopped */
	PC_EBUSY = -5,     /* a bounded queue is full */
	PC_ENOTFOUND = -6, /* no such name or id */
	PC_EEXIST = -7,    /* the name is taken */
	PC_ESYS = -8,      /* a system call failed (errno tells which) */
	PC_ESTATE = -9,    /* not allowed in the current state */
	PC_ELIMIT = -10,   /* a limit was reached (e.g. restart intensity) */
	PC_EPERM = -11,    /* refused by a rule (e.g. no auth beyond loopback) */
};

/* Layers above the runtime number their own codes in reserved ranges and
 * name them with their own strerror: -100..-199 the store (io/store/store.h,
 * pc_store_strerror). pc_strerror calls them "unknown error". */
#define PC_ERANGE_STORE_FIRST (-199)
#define PC_ERANGE_STORE_LAST (-100)

/* A static, human-readable name for a code; never NULL. Any thread. */
const char *pc_strerror(int code);

#ifdef __cplusplus
}
#endif
#endif
