/*
 * The gateway's access log: one line per HTTP request served (WebSocket
 * upgrades included: status 101) and one per WebSocket closed, from the
 * HTTP server's access hook, on its I/O thread, through the gateway's
 * logger (drop mode: a full stderr drops the line, never stalls the
 * thread). The query string is never logged (tokens travel there), nor
 * any header but the answer's x-request-id.
 */
#include "gateway_internal.h"

void pc__gw_access(void *user, const pc_http_access_t *a)
{
	pc_gateway_t *g = user;
	double ms = (double)a->duration_us / 1000.0;
	if (a->kind == PC_HTTP_ACCESS_WS_CLOSE) {
		(void)pc_log_kv(g->log, PC_LOG_INFO, "websocket closed", PC_LF_STR("peer", a->peer),
				PC_LF_INT("code", a->status),
				PC_LF_STR("reason", a->reason ? pc_strerror(a->reason) : "closed by the peer"),
				PC_LF_DOUBLE("durationMs", ms));
		return;
	}
	pc_log_level_t level = a->status >= 500 || !a->completed ? PC_LOG_WARN : PC_LOG_INFO;
	(void)pc_log_kv(g->log, level, "http request", PC_LF_STR("method", a->method), PC_LF_STR("path", a->path),
			PC_LF_INT("status", a->status), PC_LF_DOUBLE("durationMs", ms),
			PC_LF_INT("bytes", (int64_t)a->bytes), PC_LF_STR("peer", a->peer),
			PC_LF_STR("requestId", a->request_id[0] ? a->request_id : NULL),
			PC_LF_BOOL("completed", a->completed));
}
