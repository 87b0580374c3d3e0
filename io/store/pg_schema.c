/*
 * The PostgreSQL backend's schema: its tables, and the functions each
 * write of a batch is one call of. A write that the rules refuse (a stale
 * epoch, a taken run id, a rewrite planned on an old snapshot) returns a
 * code in its row instead of raising an error: in a pipeline, an error
 * aborts the whole transaction, and with it every other write of the
 * batch (docs/store.md, "PostgreSQL").
 *
 * Times are milliseconds since the Unix epoch from the database's clock
 * (now(), the transaction's start; node heartbeats and session leases,
 * clock_timestamp(): when they are written, so that a lease and the node
 * it is bound to are compared on one clock), so that every gateway on one
 * database agrees on lease expiries. Keys and ids are compared bytewise
 * (COLLATE "C"), as SQLite compares them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"

#define SCHEMA_VERSION 5
/* pg_advisory_xact_lock key for migrations: "PCNR" */
#define MIGRATE_LOCK "1346587218"

/* Migrations: entry v takes a database at version v-1 to version v. */
static const char *const migrations[SCHEMA_VERSION + 1] = {
	NULL,
	"CREATE TABLE pincer_schema(\n"
	" one boolean PRIMARY KEY DEFAULT true CHECK (one),\n"
	" app text NOT NULL,\n"
	" version integer NOT NULL);\n"
	"CREATE FUNCTION pincer_ms() RETURNS bigint LANGUAGE sql STABLE\n"
	" AS $$SELECT (extract(epoch FROM now()) * 1000)::bigint$$;\n"
	"CREATE TABLE sessions(\n"
	" sid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n"
	" key text COLLATE \"C\" NOT NULL UNIQUE,\n"
	" id text COLLATE \"C\" NOT NULL,\n"
	" agent text,\n"
	" created_ms bigint NOT NULL,\n"
	" updated_ms bigint NOT NULL,\n"
	" metadata text,\n"
	" last_seq bigint NOT NULL DEFAULT 0,\n"
	" lease_owner text,\n"
	" lease_epoch bigint NOT NULL DEFAULT 0,\n"
	" lease_expires_ms bigint NOT NULL DEFAULT 0,\n"
	" run_count bigint NOT NULL DEFAULT 0,\n"
	" last_run_id text);\n"
	"CREATE TABLE messages(\n"
	" session_id bigint NOT NULL,\n"
	" seq bigint NOT NULL,\n"
	" role text NOT NULL,\n"
	" content text NOT NULL,\n"
	" tool_call_ids text,\n"
	" run_id text,\n"
	" created_ms bigint NOT NULL,\n"
	" PRIMARY KEY (session_id, seq));\n"
	"CREATE TABLE runs(\n"
	" n bigint GENERATED ALWAYS AS IDENTITY,\n"
	" run_id text COLLATE \"C\" PRIMARY KEY,\n"
	" session_key text COLLATE \"C\" NOT NULL,\n"
	" idem_key text,\n"
	" fingerprint text,\n"
	" status text NOT NULL,\n"
	" started_ms bigint NOT NULL,\n"
	" ended_ms bigint,\n"
	" error_code text,\n"
	" usage text,\n"
	" owner text,\n"
	" prompt text);\n"
	"CREATE UNIQUE INDEX runs_idem ON runs(session_key, idem_key) WHERE idem_key IS NOT NULL;\n"
	"CREATE INDEX runs_open ON runs(n) WHERE status = 'accepted';\n"
	"CREATE TABLE attempts(\n"
	" run_id text NOT NULL,\n"
	" idx bigint NOT NULL,\n"
	" provider text, model text, profile text, reason text,\n"
	" status text NOT NULL,\n"
	" code text,\n"
	" duration_ms bigint NOT NULL,\n"
	" created_ms bigint NOT NULL,\n"
	" PRIMARY KEY (run_id, idx));\n"
	"CREATE TABLE usage(\n"
	" run_id text COLLATE \"C\" NOT NULL,\n"
	" attempt_idx bigint NOT NULL,\n"
	" call_idx bigint NOT NULL,\n"
	" session_key text COLLATE \"C\" NOT NULL,\n"
	" provider text, model text,\n"
	" input bigint NOT NULL, output bigint NOT NULL,\n"
	" cache_read bigint NOT NULL, cache_write bigint NOT NULL,\n"
	" total bigint NOT NULL,\n"
	" created_ms bigint NOT NULL,\n"
	" PRIMARY KEY (run_id, attempt_idx, call_idx));\n"
	"CREATE INDEX usage_session ON usage(session_key, created_ms);\n"
	"CREATE TABLE devices(\n"
	" id text COLLATE \"C\" PRIMARY KEY,\n"
	" public_key text NOT NULL,\n"
	" token_hash text NOT NULL,\n"
	" scopes text,\n"
	" approved_ms bigint NOT NULL,\n"
	" issued_ms bigint NOT NULL);\n"
	"CREATE TABLE audit(\n"
	" id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n"
	" ts_ms bigint NOT NULL,\n"
	" kind text NOT NULL CHECK (kind IN ('agent_run', 'tool_action')),\n"
	" status text NOT NULL CHECK (status IN ('started', 'succeeded', 'failed', 'cancelled', 'timed_out', 'blocked', 'unknown')),\n"
	" run_id text NOT NULL,\n"
	" session_key text,\n"
	" tool_name text,\n"
	" tool_call_id text,\n"
	" code text,\n"
	" CHECK (status IN ('started', 'succeeded') OR coalesce(code, '') LIKE 'run\\_%' OR coalesce(code, '') LIKE 'tool\\_%'));\n"
	"CREATE INDEX audit_ts ON audit(ts_ms);\n"
	"CREATE TYPE pincer_res AS (rc text, n bigint, id text, status text, created boolean, mismatch boolean);\n"
	"CREATE FUNCTION pincer_session(p_key text, p_agent text, p_id text, p_meta text) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res; ms bigint := pincer_ms();\n"
	"BEGIN\n"
	" INSERT INTO sessions(key, id, agent, created_ms, updated_ms, metadata)\n"
	"  VALUES (p_key, coalesce(p_id, replace(gen_random_uuid()::text, '-', '')), p_agent, ms, ms, p_meta)\n"
	"  ON CONFLICT (key) DO NOTHING RETURNING id INTO r.id;\n"
	" r.created := FOUND;\n"
	" IF NOT FOUND THEN\n"
	"  SELECT id INTO r.id FROM sessions WHERE key = p_key;\n"
	" END IF;\n"
	" RETURN r;\n"
	"END $$;\n"
	"CREATE FUNCTION pincer_append(p_key text, p_epoch bigint, p_role text, p_content text, p_ids text, p_run text,\n"
	" p_created bigint) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res; ms bigint := pincer_ms(); v_sid bigint;\n"
	"BEGIN\n"
	" FOR i IN 1..2 LOOP\n"
	"  UPDATE sessions SET last_seq = last_seq + 1, updated_ms = ms\n"
	"   WHERE key = p_key AND (p_epoch = 0 OR lease_epoch = p_epoch) RETURNING sid, last_seq INTO v_sid, r.n;\n"
	"  EXIT WHEN FOUND;\n"
	"  IF i = 2 OR p_epoch <> 0 OR EXISTS (SELECT 1 FROM sessions WHERE key = p_key) THEN\n"
	"   r.rc := 'fenced';\n"
	"   RETURN r;\n"
	"  END IF;\n"
	"  INSERT INTO sessions(key, id, created_ms, updated_ms)\n"
	"   VALUES (p_key, replace(gen_random_uuid()::text, '-', ''), ms, ms) ON CONFLICT (key) DO NOTHING;\n"
	" END LOOP;\n"
	" INSERT INTO messages(session_id, seq, role, content, tool_call_ids, run_id, created_ms)\n"
	"  VALUES (v_sid, r.n, p_role, p_content, p_ids, p_run, CASE WHEN p_created > 0 THEN p_created ELSE ms END);\n"
	" RETURN r;\n"
	"END $$;\n"
	/* p_msgs: a JSON array of [role, content, tool_call_ids, run_id, created_ms] (strings may be null) */
	"CREATE FUNCTION pincer_rewrite(p_key text, p_epoch bigint, p_expected bigint, p_from bigint, p_msgs json)\n"
	" RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res; ms bigint := pincer_ms(); v_sid bigint; v_last bigint; v_epoch bigint; v_n bigint;\n"
	"BEGIN\n"
	" SELECT sid, last_seq, lease_epoch INTO v_sid, v_last, v_epoch FROM sessions WHERE key = p_key FOR UPDATE;\n"
	" IF NOT FOUND THEN r.rc := 'notfound'; RETURN r; END IF;\n"
	" IF p_epoch <> 0 AND p_epoch <> v_epoch THEN r.rc := 'fenced'; RETURN r; END IF;\n"
	" IF v_last <> p_expected THEN r.rc := 'conflict'; RETURN r; END IF;\n"
	" DELETE FROM messages WHERE session_id = v_sid AND seq >= p_from;\n"
	" INSERT INTO messages(session_id, seq, role, content, tool_call_ids, run_id, created_ms)\n"
	"  SELECT v_sid, v_last + k, m->>0, m->>1, m->>2, m->>3,\n"
	"   CASE WHEN (m->>4)::bigint > 0 THEN (m->>4)::bigint ELSE ms END\n"
	"  FROM json_array_elements(p_msgs) WITH ORDINALITY AS t(m, k);\n"
	" v_n := json_array_length(p_msgs);\n"
	" -- even a pure truncation moves last_seq on, so a rewrite planned on an\n"
	" -- older snapshot sees the change\n"
	" r.n := v_last + greatest(v_n, 1);\n"
	" UPDATE sessions SET last_seq = r.n, updated_ms = ms WHERE sid = v_sid;\n"
	" RETURN r;\n"
	"END $$;\n"
	"CREATE FUNCTION pincer_run_begin(p_run text, p_key text, p_idem text, p_fp text, p_owner text, p_prompt text,\n"
	" p_ttl bigint) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res; ms bigint := pincer_ms(); v_started bigint; v_fp text;\n"
	"BEGIN\n"
	" FOR i IN 1..2 LOOP\n"
	"  IF p_idem IS NOT NULL THEN\n"
	"   SELECT run_id, status, started_ms, fingerprint INTO r.id, r.status, v_started, v_fp\n"
	"    FROM runs WHERE session_key = p_key AND idem_key = p_idem FOR UPDATE;\n"
	"   IF FOUND THEN\n"
	"    IF v_started >= ms - p_ttl THEN\n"
	"     r.mismatch := v_fp IS NOT NULL AND p_fp IS NOT NULL AND v_fp <> p_fp;\n"
	"     RETURN r;\n"
	"    END IF;\n"
	"    UPDATE runs SET idem_key = NULL WHERE run_id = r.id;\n"
	"    r.id := NULL;\n"
	"    r.status := NULL;\n"
	"   END IF;\n"
	"  END IF;\n"
	"  INSERT INTO runs(run_id, session_key, idem_key, status, started_ms, fingerprint, owner, prompt)\n"
	"   VALUES (p_run, p_key, p_idem, 'accepted', ms, p_fp, p_owner, p_prompt) ON CONFLICT DO NOTHING;\n"
	"  EXIT WHEN FOUND;\n"
	"  -- taken: the run id, or the key by a writer that committed meanwhile\n"
	"  IF i = 2 OR EXISTS (SELECT 1 FROM runs WHERE run_id = p_run) THEN r.rc := 'exists'; RETURN r; END IF;\n"
	" END LOOP;\n"
	" INSERT INTO sessions(key, id, created_ms, updated_ms, run_count, last_run_id)\n"
	"  VALUES (p_key, replace(gen_random_uuid()::text, '-', ''), ms, ms, 1, p_run)\n"
	"  ON CONFLICT (key) DO UPDATE SET run_count = sessions.run_count + 1, last_run_id = excluded.last_run_id;\n"
	" r.id := p_run;\n"
	" r.status := 'accepted';\n"
	" r.created := true;\n"
	" RETURN r;\n"
	"END $$;\n"
	/* Fenced like a transcript write: only the lease holder at p_epoch writes */
	/* (0: unfenced); the row stays locked so the lease cannot move before commit. */
	"CREATE FUNCTION pincer_fenced(p_key text, p_epoch bigint) RETURNS boolean\n"
	"LANGUAGE sql AS $$\n"
	" SELECT p_epoch <> 0 AND NOT coalesce((SELECT lease_epoch = p_epoch FROM sessions WHERE key = p_key FOR SHARE), false)\n"
	"$$;\n"
	"CREATE FUNCTION pincer_run_end(p_run text, p_key text, p_epoch bigint, p_status text, p_code text, p_usage text)\n"
	" RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res;\n"
	"BEGIN\n"
	" IF pincer_fenced(p_key, p_epoch) THEN r.rc := 'fenced'; RETURN r; END IF;\n"
	" UPDATE runs SET status = p_status, ended_ms = pincer_ms(), error_code = p_code, usage = p_usage, prompt = NULL\n"
	"  WHERE run_id = p_run;\n"
	" IF NOT FOUND THEN r.rc := 'notfound'; END IF;\n"
	" RETURN r;\n"
	"END $$;\n"
	"CREATE FUNCTION pincer_run_adopt(p_run text, p_from text, p_to text) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res;\n"
	"BEGIN\n"
	" UPDATE runs SET owner = p_to WHERE run_id = p_run AND status = 'accepted' AND owner IS NOT DISTINCT FROM p_from;\n"
	" IF NOT FOUND THEN r.rc := 'fenced'; END IF;\n"
	" RETURN r;\n"
	"END $$;\n"
	"CREATE FUNCTION pincer_attempt(p_run text, p_idx bigint, p_provider text, p_model text, p_profile text,\n"
	" p_reason text, p_status text, p_code text, p_duration bigint) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res;\n"
	"BEGIN\n"
	" INSERT INTO attempts(run_id, idx, provider, model, profile, reason, status, code, duration_ms, created_ms)\n"
	"  VALUES (p_run, p_idx, p_provider, p_model, p_profile, p_reason, p_status, p_code, p_duration, pincer_ms())\n"
	"  ON CONFLICT (run_id, idx) DO UPDATE SET provider = excluded.provider, model = excluded.model,\n"
	"   profile = excluded.profile, reason = excluded.reason, status = excluded.status, code = excluded.code,\n"
	"   duration_ms = excluded.duration_ms, created_ms = excluded.created_ms;\n"
	" RETURN r;\n"
	"END $$;\n"
	"CREATE FUNCTION pincer_usage_add(p_run text, p_key text, p_epoch bigint, p_attempt bigint, p_call bigint,\n"
	" p_provider text, p_model text, p_input bigint, p_output bigint, p_cache_read bigint, p_cache_write bigint,\n"
	" p_total bigint, p_created bigint) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res;\n"
	"BEGIN\n"
	" IF pincer_fenced(p_key, p_epoch) THEN r.rc := 'fenced'; RETURN r; END IF;\n"
	" INSERT INTO usage(run_id, attempt_idx, call_idx, session_key, provider, model, input, output, cache_read,\n"
	"  cache_write, total, created_ms)\n"
	"  VALUES (p_run, p_attempt, p_call, p_key, p_provider, p_model, p_input, p_output, p_cache_read, p_cache_write,\n"
	"   p_total, CASE WHEN p_created > 0 THEN p_created ELSE pincer_ms() END)\n"
	"  ON CONFLICT (run_id, attempt_idx, call_idx) DO UPDATE SET session_key = excluded.session_key,\n"
	"   provider = excluded.provider, model = excluded.model, input = excluded.input, output = excluded.output,\n"
	"   cache_read = excluded.cache_read, cache_write = excluded.cache_write, total = excluded.total,\n"
	"   created_ms = excluded.created_ms;\n"
	" RETURN r;\n"
	"END $$;\n"
	"CREATE FUNCTION pincer_device_put(p_id text, p_key text, p_hash text, p_scopes text, p_approved bigint,\n"
	" p_issued bigint, p_update boolean) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res; ms bigint := pincer_ms();\n"
	"BEGIN\n"
	" IF p_update THEN\n"
	"  UPDATE devices SET public_key = p_key, token_hash = p_hash, scopes = p_scopes,\n"
	"   approved_ms = CASE WHEN p_approved > 0 THEN p_approved ELSE ms END,\n"
	"   issued_ms = CASE WHEN p_issued > 0 THEN p_issued ELSE ms END WHERE id = p_id;\n"
	"  IF NOT FOUND THEN r.rc := 'notfound'; END IF;\n"
	"  RETURN r;\n"
	" END IF;\n"
	" INSERT INTO devices(id, public_key, token_hash, scopes, approved_ms, issued_ms)\n"
	"  VALUES (p_id, p_key, p_hash, p_scopes, CASE WHEN p_approved > 0 THEN p_approved ELSE ms END,\n"
	"   CASE WHEN p_issued > 0 THEN p_issued ELSE ms END)\n"
	"  ON CONFLICT (id) DO UPDATE SET public_key = excluded.public_key, token_hash = excluded.token_hash,\n"
	"   scopes = excluded.scopes, approved_ms = excluded.approved_ms, issued_ms = excluded.issued_ms;\n"
	" RETURN r;\n"
	"END $$;\n"
	"CREATE FUNCTION pincer_device_delete(p_id text) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res;\n"
	"BEGIN\n"
	" DELETE FROM devices WHERE id = p_id;\n"
	" IF NOT FOUND THEN r.rc := 'notfound'; END IF;\n"
	" RETURN r;\n"
	"END $$;\n"
	"CREATE FUNCTION pincer_audit(p_ts bigint, p_kind text, p_status text, p_run text, p_key text, p_tool text,\n"
	" p_call text, p_code text) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res;\n"
	"BEGIN\n"
	" -- the table's checks, answered rather than raised (a raise would take\n"
	" -- the batch's transaction with it)\n"
	" IF p_kind NOT IN ('agent_run', 'tool_action') OR p_status NOT IN ('started', 'succeeded', 'failed', 'cancelled',\n"
	"   'timed_out', 'blocked', 'unknown') OR p_run IS NULL OR NOT (p_status IN ('started', 'succeeded')\n"
	"   OR coalesce(p_code, '') LIKE 'run\\_%' OR coalesce(p_code, '') LIKE 'tool\\_%') THEN\n"
	"  r.rc := 'invalid';\n"
	"  RETURN r;\n"
	" END IF;\n"
	" INSERT INTO audit(ts_ms, kind, status, run_id, session_key, tool_name, tool_call_id, code)\n"
	"  VALUES (CASE WHEN p_ts > 0 THEN p_ts ELSE pincer_ms() END, p_kind, p_status, p_run, p_key, p_tool, p_call, p_code);\n"
	" RETURN r;\n"
	"END $$;\n"
	"CREATE FUNCTION pincer_audit_trim(p_max bigint, p_days bigint) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res;\n"
	"BEGIN\n"
	" DELETE FROM audit WHERE id <= (SELECT max(id) FROM audit) - p_max;\n"
	" DELETE FROM audit WHERE ts_ms < pincer_ms() - p_days * 86400000;\n"
	" RETURN r;\n"
	"END $$;\n"
	"CREATE FUNCTION pincer_lease_acquire(p_key text, p_owner text, p_ttl bigint, p_steal text) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res; ms bigint := pincer_ms(); v_owner text; v_epoch bigint; v_expires bigint;\n"
	" v_live boolean; v_mine boolean;\n"
	"BEGIN\n"
	" INSERT INTO sessions(key, id, created_ms, updated_ms)\n"
	"  VALUES (p_key, replace(gen_random_uuid()::text, '-', ''), ms, ms) ON CONFLICT (key) DO NOTHING;\n"
	" SELECT lease_owner, lease_epoch, lease_expires_ms INTO v_owner, v_epoch, v_expires\n"
	"  FROM sessions WHERE key = p_key FOR UPDATE;\n"
	" v_live := v_owner IS NOT NULL AND v_expires > ms;\n"
	" v_mine := v_owner IS NOT NULL AND v_owner = p_owner;\n"
	" IF v_live AND NOT v_mine AND v_owner IS DISTINCT FROM p_steal THEN\n"
	"  r.rc := 'busy';\n"
	"  r.id := v_owner;\n"
	"  RETURN r;\n"
	" END IF;\n"
	" -- a renewal by the live holder keeps its epoch; any new holder fences out\n"
	" -- every earlier one\n"
	" r.n := CASE WHEN v_live AND v_mine THEN v_epoch ELSE v_epoch + 1 END;\n"
	" UPDATE sessions SET lease_owner = p_owner, lease_epoch = r.n, lease_expires_ms = ms + p_ttl WHERE key = p_key;\n"
	" RETURN r;\n"
	"END $$;\n"
	"CREATE FUNCTION pincer_lease_release(p_key text, p_owner text, p_epoch bigint) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res;\n"
	"BEGIN\n"
	" UPDATE sessions SET lease_owner = NULL, lease_expires_ms = 0\n"
	"  WHERE key = p_key AND lease_owner = p_owner AND lease_epoch = p_epoch;\n"
	" IF NOT FOUND THEN\n"
	"  r.rc := CASE WHEN EXISTS (SELECT 1 FROM sessions WHERE key = p_key) THEN 'fenced' ELSE 'notfound' END;\n"
	" END IF;\n"
	" RETURN r;\n"
	"END $$;\n"
	"CREATE FUNCTION pincer_session_set(p_key text, p_meta text, p_epoch bigint) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res;\n"
	"BEGIN\n"
	" UPDATE sessions SET metadata = p_meta, updated_ms = pincer_ms()\n"
	"  WHERE key = p_key AND (p_epoch = 0 OR lease_epoch = p_epoch);\n"
	" IF NOT FOUND THEN\n"
	"  r.rc := CASE WHEN EXISTS (SELECT 1 FROM sessions WHERE key = p_key) THEN 'fenced' ELSE 'notfound' END;\n"
	" END IF;\n"
	" RETURN r;\n"
	"END $$;\n",
	/* 2: the gateways sharing the database record heartbeats, so each can
	 * tell which others are live (a node's row expires with its lease). */
	"CREATE TABLE nodes(\n"
	" id text COLLATE \"C\" PRIMARY KEY,\n"
	" url text,\n"
	" started_ms bigint NOT NULL,\n"
	" heartbeat_ms bigint NOT NULL,\n"
	" expires_ms bigint NOT NULL);\n"
	/* the clock as it is when called, not at the transaction's start: a
	 * beat's time is when it was written, however long its batch waited on
	 * other rows' locks, and a listing measures leases by the same clock */
	"CREATE FUNCTION pincer_clock_ms() RETURNS bigint LANGUAGE sql VOLATILE\n"
	" AS $$SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint$$;\n"
	/* pincer_res has one number: n is the beat's time, and id the node's
	 * started_ms, as text */
	"CREATE FUNCTION pincer_node_beat(p_id text, p_url text, p_lease bigint, p_fresh boolean) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res; ms bigint := pincer_clock_ms(); v_expires bigint; v_started bigint := ms;\n"
	"BEGIN\n"
	" -- a lease too long for the clock never runs out\n"
	" v_expires := ms + least(p_lease, 9223372036854775807 - ms);\n"
	" INSERT INTO nodes(id, url, started_ms, heartbeat_ms, expires_ms)\n"
	"  VALUES (p_id, p_url, ms, ms, v_expires) ON CONFLICT (id) DO NOTHING;\n"
	" r.created := FOUND;\n"
	" IF NOT FOUND THEN\n"
	"  UPDATE nodes SET url = p_url, started_ms = CASE WHEN p_fresh THEN ms ELSE started_ms END,\n"
	"   heartbeat_ms = ms, expires_ms = v_expires WHERE id = p_id RETURNING started_ms INTO v_started;\n"
	" END IF;\n"
	" r.n := ms;\n"
	" r.id := v_started::text;\n"
	" RETURN r;\n"
	"END $$;\n",
	/* 3: a node's row names the process beating for it, so that a lease
	 * held while a node is live (lease_expires_ms -1: PC_STORE_LEASE_NODE)
	 * is bound to that process, and two processes given one node id never
	 * share a row; leases are timed by the nodes' clock */
	"ALTER TABLE nodes ADD COLUMN owner text COLLATE \"C\";\n"
	"DROP FUNCTION pincer_node_beat(text, text, bigint, boolean);\n"
	"CREATE FUNCTION pincer_node_beat(p_id text, p_url text, p_owner text, p_lease bigint, p_fresh boolean)\n"
	" RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res; ms bigint := pincer_clock_ms(); v_expires bigint; v_started bigint := ms;\n"
	" v_owner text; v_until bigint;\n"
	"BEGIN\n"
	" -- a lease too long for the clock never runs out\n"
	" v_expires := ms + least(p_lease, 9223372036854775807 - ms);\n"
	" INSERT INTO nodes(id, url, owner, started_ms, heartbeat_ms, expires_ms)\n"
	"  VALUES (p_id, p_url, p_owner, ms, ms, v_expires) ON CONFLICT (id) DO NOTHING;\n"
	" r.created := FOUND;\n"
	" IF NOT FOUND THEN\n"
	"  SELECT owner, expires_ms INTO v_owner, v_until FROM nodes WHERE id = p_id FOR UPDATE;\n"
	"  -- live and another process's (a row from before owners has none to defend)\n"
	"  IF v_until > ms AND v_owner <> p_owner THEN\n"
	"   r.rc := 'busy';\n"
	"   r.id := v_owner;\n"
	"   RETURN r;\n"
	"  END IF;\n"
	"  UPDATE nodes SET url = p_url, owner = p_owner, started_ms = CASE WHEN p_fresh THEN ms ELSE started_ms END,\n"
	"   heartbeat_ms = ms, expires_ms = v_expires WHERE id = p_id RETURNING started_ms INTO v_started;\n"
	" END IF;\n"
	" r.n := ms;\n"
	" r.id := v_started::text;\n"
	" RETURN r;\n"
	"END $$;\n"
	/* a scan: the table holds a row per gateway sharing the database */
	"CREATE FUNCTION pincer_owner_live(p_owner text, p_ms bigint) RETURNS boolean LANGUAGE sql STABLE\n"
	" AS $$SELECT EXISTS (SELECT 1 FROM nodes WHERE owner = p_owner AND expires_ms > p_ms)$$;\n"
	/* the nodes' clock, not the transaction's start: a lease is compared
	 * with the node rows it may be bound to */
	"CREATE OR REPLACE FUNCTION pincer_lease_acquire(p_key text, p_owner text, p_ttl bigint, p_steal text)\n"
	" RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res; ms bigint := pincer_clock_ms(); v_node boolean := p_ttl = -1; v_owner text;\n"
	" v_epoch bigint; v_expires bigint; v_live boolean; v_mine boolean;\n"
	"BEGIN\n"
	" -- a node out of the cluster takes nothing\n"
	" IF v_node AND NOT pincer_owner_live(p_owner, ms) THEN\n"
	"  r.rc := 'state';\n"
	"  RETURN r;\n"
	" END IF;\n"
	" INSERT INTO sessions(key, id, created_ms, updated_ms)\n"
	"  VALUES (p_key, replace(gen_random_uuid()::text, '-', ''), ms, ms) ON CONFLICT (key) DO NOTHING;\n"
	" SELECT lease_owner, lease_epoch, lease_expires_ms INTO v_owner, v_epoch, v_expires\n"
	"  FROM sessions WHERE key = p_key FOR UPDATE;\n"
	" v_mine := v_owner IS NOT NULL AND v_owner = p_owner;\n"
	" -- a timed lease lives until it expires, a node-bound one while its owner's node does\n"
	" v_live := v_owner IS NOT NULL AND CASE WHEN v_expires <> -1 THEN v_expires > ms\n"
	"  ELSE (v_mine AND v_node) OR pincer_owner_live(v_owner, ms) END;\n"
	" IF v_live AND NOT v_mine AND v_owner IS DISTINCT FROM p_steal THEN\n"
	"  r.rc := 'busy';\n"
	"  r.id := v_owner;\n"
	"  RETURN r;\n"
	" END IF;\n"
	" -- a renewal by the live holder keeps its epoch; any new holder fences out\n"
	" -- every earlier one\n"
	" r.n := CASE WHEN v_live AND v_mine THEN v_epoch ELSE v_epoch + 1 END;\n"
	" UPDATE sessions SET lease_owner = p_owner, lease_epoch = r.n,\n"
	"  lease_expires_ms = CASE WHEN v_node THEN -1 ELSE ms + p_ttl END WHERE key = p_key;\n"
	" -- the owner whose writes are fenced from now on\n"
	" IF NOT v_mine THEN\n"
	"  r.id := v_owner;\n"
	" END IF;\n"
	" RETURN r;\n"
	"END $$;\n"
	/* the first end stands: a node that lost the run to another ends it late */
	"CREATE OR REPLACE FUNCTION pincer_run_end(p_run text, p_key text, p_epoch bigint, p_status text, p_code text,\n"
	" p_usage text) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res;\n"
	"BEGIN\n"
	" IF pincer_fenced(p_key, p_epoch) THEN r.rc := 'fenced'; RETURN r; END IF;\n"
	" UPDATE runs SET status = p_status, ended_ms = pincer_ms(), error_code = p_code, usage = p_usage, prompt = NULL\n"
	"  WHERE run_id = p_run AND status = 'accepted';\n"
	" IF NOT FOUND THEN\n"
	"  r.rc := CASE WHEN EXISTS (SELECT 1 FROM runs WHERE run_id = p_run) THEN 'fenced' ELSE 'notfound' END;\n"
	" END IF;\n"
	" RETURN r;\n"
	"END $$;\n"
	/* a run moves from a cluster node only once that node is gone, and a
	 * node claims its own run only while it is live */
	"CREATE OR REPLACE FUNCTION pincer_run_adopt(p_run text, p_from text, p_to text) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res; v_claim boolean := coalesce(p_from = p_to, false);\n"
	" v_live boolean := p_from IS NOT NULL AND pincer_owner_live(p_from, pincer_clock_ms());\n"
	"BEGIN\n"
	" IF v_claim IS DISTINCT FROM v_live THEN\n"
	"  r.rc := CASE WHEN v_claim THEN 'state' ELSE 'busy' END;\n"
	"  RETURN r;\n"
	" END IF;\n"
	" UPDATE runs SET owner = p_to WHERE run_id = p_run AND status = 'accepted' AND owner IS NOT DISTINCT FROM p_from;\n"
	" IF NOT FOUND THEN r.rc := 'fenced'; END IF;\n"
	" RETURN r;\n"
	"END $$;\n",
	/* 4: a run's end says whether running it again could repeat what a
	 * tool of it did, for whoever reads the run back (another node). The
	 * old form stays, for the nodes of the version before while a cluster
	 * is upgraded one node at a time: their runs end as not known to be
	 * replay-invalid, as they always did. */
	"ALTER TABLE runs ADD COLUMN replay_invalid boolean NOT NULL DEFAULT false;\n"
	"CREATE FUNCTION pincer_run_end(p_run text, p_key text, p_epoch bigint, p_status text, p_code text,\n"
	" p_usage text, p_replay_invalid boolean) RETURNS pincer_res\n"
	"LANGUAGE plpgsql AS $$\n"
	"DECLARE r pincer_res;\n"
	"BEGIN\n"
	" IF pincer_fenced(p_key, p_epoch) THEN r.rc := 'fenced'; RETURN r; END IF;\n"
	" UPDATE runs SET status = p_status, ended_ms = pincer_ms(), error_code = p_code, usage = p_usage,\n"
	"  replay_invalid = p_replay_invalid, prompt = NULL WHERE run_id = p_run AND status = 'accepted';\n"
	" IF NOT FOUND THEN\n"
	"  r.rc := CASE WHEN EXISTS (SELECT 1 FROM runs WHERE run_id = p_run) THEN 'fenced' ELSE 'notfound' END;\n"
	" END IF;\n"
	" RETURN r;\n"
	"END $$;\n"
	"CREATE OR REPLACE FUNCTION pincer_run_end(p_run text, p_key text, p_epoch bigint, p_status text,\n"
	" p_code text, p_usage text) RETURNS pincer_res\n"
	"LANGUAGE sql AS $$SELECT pincer_run_end(p_run, p_key, p_epoch, p_status, p_code, p_usage, false)$$;\n",
	/* 5: a listed session names its first open run (the one running, or
	 * next, on whichever node), looked up by session among the open ones */
	"CREATE INDEX runs_open_session ON runs(session_key, n) WHERE status = 'accepted';\n",
};

/* Runs `sql` (one statement or several) on a plain connection. */
static int exec_sql(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(r);
	int rc = (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) ? 0 : pc__pg_code(r, c);
	PQclear(r);
	return rc;
}

/* The schema's version: 0 for a database without our tables. */
static int schema_version(PGconn *c, int *version)
{
	PGresult *r = PQexec(c, "SELECT to_regclass('pincer_schema') IS NOT NULL, to_regclass('sessions') IS NOT NULL");
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
		int rc = pc__pg_code(r, c);
		PQclear(r);
		return rc;
	}
	bool ours = PQgetvalue(r, 0, 0)[0] == 't', theirs = PQgetvalue(r, 0, 1)[0] == 't';
	PQclear(r);
	*version = 0;
	if (!ours)
		return theirs ? PC_STORE_EFOREIGN : 0;
	r = PQexec(c, "SELECT app, version FROM pincer_schema");
	int rc = 0;
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		rc = pc__pg_code(r, c);
	else if (PQntuples(r) != 1 || strcmp(PQgetvalue(r, 0, 0), "pincer") != 0)
		rc = PC_STORE_EFOREIGN;
	else if ((*version = atoi(PQgetvalue(r, 0, 1))) > SCHEMA_VERSION)
		rc = PC_STORE_EVERSION;
	PQclear(r);
	return rc;
}

int pc__pg_migrate(PGconn *c)
{
	/* one transaction: PostgreSQL's DDL is transactional, and a second
	 * process starting at the same moment waits on the lock, then finds
	 * the schema made */
	int rc = exec_sql(c, "BEGIN");
	if (rc != 0)
		return rc;
	int version = 0;
	rc = exec_sql(c, "SELECT pg_advisory_xact_lock(" MIGRATE_LOCK ")");
	if (rc == 0)
		rc = schema_version(c, &version);
	for (int v = version + 1; v <= SCHEMA_VERSION && rc == 0; v++)
		rc = exec_sql(c, migrations[v]);
	if (rc == 0 && version < SCHEMA_VERSION) {
		char sql[128];
		snprintf(sql, sizeof(sql),
			 version == 0 ? "INSERT INTO pincer_schema(app, version) VALUES ('pincer', %d)"
				      : "UPDATE pincer_schema SET version = %d",
			 SCHEMA_VERSION);
		rc = exec_sql(c, sql);
	}
	int end = exec_sql(c, rc == 0 ? "COMMIT" : "ROLLBACK");
	return rc != 0 ? rc : end;
}
