-- wrk script for bench/run's mock benchmark: POSTs one streamed chat
-- request whose answer the mock scripts from the x-mock-scenario header
-- (the STEP environment variable).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-mock-scenario"] = os.getenv("STEP")
wrk.body = '{"model":"mock","stream":true,"messages":[{"role":"user","content":"hi"}]}'
