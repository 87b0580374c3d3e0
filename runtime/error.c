#include "error.h"

const char *pc_strerror(int code)
{
	switch (code) {
	case PC_OK: return "success";
	case PC_ENOMEM: return "out of memory";
	case PC_EINVAL: return "invalid argument";
	case PC_ETIMEDOUT: return "timed out";
	case PC_ESTOPPED: return "stopped";
	case PC_EBUSY: return "busy";
	case PC_ENOTFOUND: return "not found";
	case PC_EEXIST: return "already exists";
	case PC_ESYS: return "system call failed";
	case PC_ESTATE: return "not allowed in this state";
	case PC_ELIMIT: return "limit reached";
	case PC_EPERM: return "not permitted";
	default: return "unknown error";
	}
}
