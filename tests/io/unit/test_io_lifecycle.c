/*
 * The connection machines' tables (io/http_conn_internal.h,
 * io/ws_internal.h, io/http2_internal.h): which transitions are legal,
 * and their names.
 */
#include <criterion/criterion.h>

#include "io/http2_internal.h"
#include "io/http_conn_internal.h"
#include "io/ws_internal.h"

Test(http_conn_lifecycle, the_table)
{
	/* the ordinary path of a kept-alive connection */
	cr_assert(pc__conn_lc_legal(PC__C_NEW, PC__C_HEAD));
	cr_assert(pc__conn_lc_legal(PC__C_HEAD, PC__C_BODY));
	cr_assert(pc__conn_lc_legal(PC__C_BODY, PC__C_SERVICE));
	cr_assert(pc__conn_lc_legal(PC__C_SERVICE, PC__C_STREAM));
	cr_assert(pc__conn_lc_legal(PC__C_STREAM, PC__C_HEAD));
	cr_assert(pc__conn_lc_legal(PC__C_SERVICE, PC__C_HEAD));
	/* upgrades */
	cr_assert(pc__conn_lc_legal(PC__C_SERVICE, PC__C_WS));
	cr_assert(pc__conn_lc_legal(PC__C_SERVICE, PC__C_H2));
	cr_assert(pc__conn_lc_legal(PC__C_HEAD, PC__C_H2));
	/* the end */
	cr_assert(pc__conn_lc_legal(PC__C_CLOSING, PC__C_LINGER));
	cr_assert(pc__conn_lc_legal(PC__C_WS, PC__C_LINGER));
	for (int s = 0; s < PC__C_CLOSED; s++)
		cr_assert(pc__conn_lc_legal((pc__conn_state_t)s, PC__C_CLOSED), "%s -> closed",
			  pc__conn_lc_name((pc__conn_state_t)s));
	/* refused */
	for (int s = 0; s < PC__C_COUNT; s++)
		cr_assert(!pc__conn_lc_legal(PC__C_CLOSED, (pc__conn_state_t)s), "closed is terminal");
	cr_assert(!pc__conn_lc_legal(PC__C_HEAD, PC__C_SERVICE), "a request's head comes before it");
	cr_assert(!pc__conn_lc_legal(PC__C_HEAD, PC__C_WS), "an upgrade needs a request in service");
	cr_assert(!pc__conn_lc_legal(PC__C_WS, PC__C_HEAD), "a WebSocket never goes back to HTTP");
	cr_assert(!pc__conn_lc_legal(PC__C_H2, PC__C_WS));
	cr_assert(!pc__conn_lc_legal(PC__C_LINGER, PC__C_HEAD));
	cr_assert(!pc__conn_lc_legal(PC__C_CLOSING, PC__C_HEAD));
	cr_assert(!pc__conn_lc_legal(PC__C_HEAD, PC__C_HEAD));
	cr_assert(!pc__conn_lc_legal(PC__C_COUNT, PC__C_CLOSED));
	cr_assert(!pc__conn_lc_legal(PC__C_HEAD, PC__C_COUNT));

	cr_assert_str_eq(pc__conn_lc_name(PC__C_NEW), "new");
	cr_assert_str_eq(pc__conn_lc_name(PC__C_SERVICE), "service");
	cr_assert_str_eq(pc__conn_lc_name(PC__C_CLOSED), "closed");
	cr_assert_str_eq(pc__conn_lc_name(PC__C_COUNT), "unknown");
	for (int s = 0; s < PC__C_COUNT; s++)
		cr_assert_str_neq(pc__conn_lc_name((pc__conn_state_t)s), "unknown");
}

Test(ws_lifecycle, the_table)
{
	cr_assert(pc__ws_lc_legal(PC__WS_NEW, PC__WS_OPEN));
	cr_assert(pc__ws_lc_legal(PC__WS_OPEN, PC__WS_CLOSING));
	cr_assert(pc__ws_lc_legal(PC__WS_CLOSING, PC__WS_CLOSED));
	cr_assert(pc__ws_lc_legal(PC__WS_OPEN, PC__WS_CLOSED));
	cr_assert(pc__ws_lc_legal(PC__WS_NEW, PC__WS_CLOSED));
	cr_assert(!pc__ws_lc_legal(PC__WS_CLOSING, PC__WS_OPEN));
	cr_assert(!pc__ws_lc_legal(PC__WS_NEW, PC__WS_CLOSING));
	for (int s = 0; s < PC__WS_COUNT; s++)
		cr_assert(!pc__ws_lc_legal(PC__WS_CLOSED, (pc__ws_state_t)s), "closed is terminal");
	cr_assert_str_eq(pc__ws_lc_name(PC__WS_OPEN), "open");
	cr_assert_str_eq(pc__ws_lc_name(PC__WS_COUNT), "unknown");
}

Test(h2stream_lifecycle, the_table)
{
	/* a plain answer, a streamed one */
	cr_assert(pc__h2_lc_legal(PC__H2_S_NEW, PC__H2_S_RECV));
	cr_assert(pc__h2_lc_legal(PC__H2_S_RECV, PC__H2_S_SERVICE));
	cr_assert(pc__h2_lc_legal(PC__H2_S_SERVICE, PC__H2_S_DONE));
	cr_assert(pc__h2_lc_legal(PC__H2_S_SERVICE, PC__H2_S_STREAM));
	cr_assert(pc__h2_lc_legal(PC__H2_S_STREAM, PC__H2_S_DONE));
	/* refused here while it arrives */
	cr_assert(pc__h2_lc_legal(PC__H2_S_RECV, PC__H2_S_DONE));
	/* a reset, or the connection's end, closes any stage */
	for (int s = 0; s < PC__H2_S_CLOSED; s++)
		cr_assert(pc__h2_lc_legal((pc__h2_stage_t)s, PC__H2_S_CLOSED), "%s -> closed",
			  pc__h2_lc_name((pc__h2_stage_t)s));
	for (int s = 0; s < PC__H2_S_COUNT; s++)
		cr_assert(!pc__h2_lc_legal(PC__H2_S_CLOSED, (pc__h2_stage_t)s), "closed is terminal");
	for (int s = 0; s < PC__H2_S_CLOSED; s++)
		cr_assert(!pc__h2_lc_legal(PC__H2_S_DONE, (pc__h2_stage_t)s), "done only closes");
	cr_assert(!pc__h2_lc_legal(PC__H2_S_NEW, PC__H2_S_SERVICE), "a request arrives before its service");
	cr_assert(!pc__h2_lc_legal(PC__H2_S_RECV, PC__H2_S_STREAM), "a stream needs its actor");
	cr_assert(!pc__h2_lc_legal(PC__H2_S_STREAM, PC__H2_S_SERVICE));
	cr_assert(!pc__h2_lc_legal(PC__H2_S_RECV, PC__H2_S_RECV));
	cr_assert(!pc__h2_lc_legal(PC__H2_S_COUNT, PC__H2_S_CLOSED));
	cr_assert(!pc__h2_lc_legal(PC__H2_S_RECV, PC__H2_S_COUNT));
	cr_assert_str_eq(pc__h2_lc_name(PC__H2_S_RECV), "recv");
	cr_assert_str_eq(pc__h2_lc_name(PC__H2_S_CLOSED), "closed");
	cr_assert_str_eq(pc__h2_lc_name(PC__H2_S_COUNT), "unknown");
	for (int s = 0; s < PC__H2_S_COUNT; s++)
		cr_assert_str_neq(pc__h2_lc_name((pc__h2_stage_t)s), "unknown");
}
