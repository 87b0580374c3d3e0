/*
 * The agent API takes only text: a message, key or other string of
 * pc_agent_submit, or a steer, that is not UTF-8 is PC_EINVAL, and nothing
 * is stored or sent to the model; text beyond ASCII is taken whole.
 */
#include <criterion/criterion.h>

#include "agent_harness.h"

TestSuite(agent_api_text, .timeout = 60);

Test(agent_api_text, strings_that_are_not_utf8_are_refused_before_anything_is_stored)
{
	harness_t h;
	harness_start(&h, "{}");
	pc_agent_accepted_t acc;
	const pc_agent_params_t bad[] = {
		{.session_key = "victim", .message = "caf\xe9"},
		{.session_key = "victim", .message = "\xed\xa0\x80"},
		{.session_key = "victim\xff", .message = "hi"},
		{.session_key = "victim", .message = "hi", .idempotency_key = "k\xc0\xaf"},
		{.session_key = "victim", .message = "hi", .model = "mock/\xf4\x90\x80\x80"},
		{.session_key = "victim", .message = "hi", .extra_system_prompt = "\xe2\x82"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(pc_agent_submit(h.agent, &bad[i], &acc), PC_EINVAL, "case %zu", i);
	cr_assert_eq(pc_agent_steer(h.agent, "victim", "\xff"), PC_EINVAL);
	char roles[64];
	cr_assert_eq(history_roles(&h, "victim", roles, sizeof(roles)), 0, "%s", roles);
	cr_assert_eq(request_count(&h), 0);

	char run[80];
	submit(&h, "intl", "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80", run);
	cJSON *d = finish_of(&h, run, 10000);
	cr_assert_str_eq(payload_text(d), "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80");
	cJSON_Delete(d);
	harness_stop(&h);
}
