#!/usr/bin/env bash
# The live daemon against its OpenAPI description (docs/openapi.yaml), with
# schemathesis (PyPI, in the project's venv): every operation, with examples
# from the schema, its boundary values and generated data, over TCP with the
# token, must answer without a server error, with a documented status and
# content type, and a body that matches its schema; an operation whose
# security names the token must refuse a request without it or with a
# wrong one (ignored_auth). Deterministic
# generation: the same cases every run.
source "$(dirname "$0")/daemon_lib.sh"
ST=$(dirname "${VRAM_PYTHON:-/nonexistent/python}")/schemathesis
[ -x "$ST" ] || fail "schemathesis not found beside VRAM_PYTHON ($ST): make deps installs it"
export VRAM_TOKEN=openapi-check-token
start_daemon
tcp=$(tcp_address)
# a job to read, and one ended, so that the id routes reach their handlers
api POST /v1/jobs '{"mem_bytes":"1GiB","name":"openapi-a"}' >/dev/null
api POST /v1/jobs '{"mem_bytes":"1GiB","name":"openapi-b"}' >/dev/null
api POST /v1/jobs/2/finish '{"exit_status":0}' >/dev/null
(cd "$T" && "$ST" run "$VRAM_SOURCE_DIR/docs/openapi.yaml" -u "http://$tcp" \
    -H "Authorization: Bearer $VRAM_TOKEN" \
    -c not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,ignored_auth \
    -n 10 --generation-deterministic --request-timeout 70 --phases examples,coverage,fuzzing \
    --no-color >"$T/st.log" 2>&1) || { tail -80 "$T/st.log"; fail "vramd does not match docs/openapi.yaml"; }
grep -E "generated, [0-9]+ passed" "$T/st.log" || { tail -20 "$T/st.log"; fail "schemathesis ran no case"; }
api GET /v1/health >/dev/null; [ "$(status)" = 200 ] || fail "vramd stopped serving"
check_ledger
pass "vramd matches docs/openapi.yaml: $(grep -oE '[0-9]+ generated' "$T/st.log") cases over TCP, no server error, every status, type and body as documented"
