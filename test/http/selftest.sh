#!/bin/bash
# selftest.sh: the receiver of the HTTP route tests (receiver.py) and the
# certificates of make-ca.sh, checked with curl against a receiver started
# here: the answers of each behaviour, what the log records, the signature
# check (the Standard Webhooks test vector, a rotation, a wrong secret),
# hangs and their "closed" event, and TLS with and without the test CA.
# Needs python3, curl and openssl; runs as any user; prints one line per
# check and "N passed, N failed", and fails when any check did.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
T=$(mktemp -d)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	rm -rf "$T"
}
trap cleanup EXIT
PASSED=0
FAILED=0
check() {	# description, then a command that succeeds when the check holds
	local what=$1
	shift
	if "$@"; then
		PASSED=$((PASSED + 1))
		echo "ok: $what"
	else
		FAILED=$((FAILED + 1))
		echo "FAILED: $what"
	fi
}
eq() { [ "$1" = "$2" ] || { echo "  got:      $1" >&2; echo "  expected: $2" >&2; return 1; }; }

# a field of the last "request" event of the log for path ($3: an
# expression on r, the record, e.g. r["answer"]["status"])
last() {	# log path expression
	"$PY" - "$1" "$2" "$3" <<'PYEOF'
import json, sys
log, path, expr = sys.argv[1:]
recs = [json.loads(l) for l in open(log)]
reqs = [r for r in recs if r["event"] == "request" and r["path"] == path]
r = reqs[-1] if reqs else None
v = eval(expr, {"r": r, "recs": recs, "reqs": reqs})
print(json.dumps(v) if not isinstance(v, str) else v)
PYEOF
}

start() {	# name, receiver options...: sets PORT; log in $T/name.log
	local name=$1
	shift
	"$PY" "$HERE/receiver.py" --log "$T/$name.log" --port-file "$T/$name.port" "$@" >"$T/$name.out" 2>"$T/$name.err" &
	PIDS+=($!)
	for _ in $(seq 1 100); do [ -s "$T/$name.port" ] && break; sleep 0.05; done
	PORT=$(cat "$T/$name.port")
}

VECTOR_SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
VECTOR_ID=msg_p5jXN8AQM9LWM0D4loKWxJek
VECTOR_TS=1614265330
VECTOR_BODY='{"test": 2432232314}'
VECTOR_SIG='v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE='
NEW_SECRET=whsec_$(head -c 32 /dev/urandom | base64 -w0)

# 1. The signing function against the published test vector.
check "sign mode reproduces the Standard Webhooks test vector" \
	eq "$("$PY" "$HERE/receiver.py" sign "$VECTOR_SECRET" "$VECTOR_ID" "$VECTOR_TS" "$VECTOR_BODY")" "$VECTOR_SIG"

# 2. Plain HTTP with the vector's secret and a control file.
cat >"$T/control.json" <<'JSON'
{"paths": {"/moved": {"redirect": "/elsewhere"},
           "/busy": {"status": 429, "retry_after": "7", "body": "slow down"},
           "/later": {"status": 503, "retry_after_date": 30},
           "/flaky": {"status": 500, "first": 2},
           "/bad": {"status": 400, "body": "0123456789", "body_size": 5120},
           "/hang": {"hang": true},
           "/drop": {"drop": true}}}
JSON
start plain --secret "$VECTOR_SECRET" --control "$T/control.json" --path '/gone={"status": 410}'
check "the port is printed on stdout" eq "$(head -n 1 "$T/plain.out")" "$PORT"
U=http://127.0.0.1:$PORT

post() {	# path, curl options...: prints the status and the headers
	local path=$1
	shift
	curl -s -o "$T/body" -D "$T/headers" -w '%{http_code}' -X POST "$U$path" "$@"
}
code=$(post /hook -H "webhook-id: $VECTOR_ID" -H "webhook-timestamp: $VECTOR_TS" \
	-H "webhook-signature: v1,AAAA $VECTOR_SIG" -H 'Content-Type: application/json' --data-binary "$VECTOR_BODY")
check "an unconfigured path answers 200" eq "$code" 200
check "the vector's signature verifies (among a bad one)" eq "$(last "$T/plain.log" /hook 'r["signature"] + " " + str(r["verified_by"])')" "valid [0]"
check "the body is recorded exactly" eq "$(last "$T/plain.log" /hook 'r["body"]')" "$VECTOR_BODY"
check "headers are recorded by lower-case name" eq "$(last "$T/plain.log" /hook 'r["headers"]["content-type"]')" application/json
check "both signature entries are recorded" eq "$(last "$T/plain.log" /hook 'len(r["signatures"])')" 2
check "the arrival time is recorded" "$PY" -c "import sys, time; sys.exit(abs(time.time() - $(last "$T/plain.log" /hook 'r["time"]')) > 5)"

post /hook -H "webhook-id: $VECTOR_ID" -H "webhook-timestamp: $VECTOR_TS" \
	-H "webhook-signature: $VECTOR_SIG" --data-binary '{"test": 2432232315}' >/dev/null
check "a changed body does not verify" eq "$(last "$T/plain.log" /hook 'r["signature"] + " " + str(r["verified"])')" "invalid False"
post /hook -H "webhook-id: msg_other" -H "webhook-timestamp: $VECTOR_TS" \
	-H "webhook-signature: $VECTOR_SIG" --data-binary "$VECTOR_BODY" >/dev/null
check "a changed id does not verify" eq "$(last "$T/plain.log" /hook 'r["signature"]')" invalid
post /hook -H "webhook-id: $VECTOR_ID" -H "webhook-timestamp: $((VECTOR_TS + 1))" \
	-H "webhook-signature: $VECTOR_SIG" --data-binary "$VECTOR_BODY" >/dev/null
check "a changed timestamp does not verify" eq "$(last "$T/plain.log" /hook 'r["signature"]')" invalid
post /hook -H "webhook-id: $VECTOR_ID" -H "webhook-timestamp: $VECTOR_TS" \
	-H "webhook-signature: v2,${VECTOR_SIG#v1,}" --data-binary "$VECTOR_BODY" >/dev/null
check "a signature of another version is not accepted" eq "$(last "$T/plain.log" /hook 'r["signature"]')" invalid
post /hook -H "webhook-id: $VECTOR_ID" -H "webhook-timestamp: $VECTOR_TS" --data-binary "$VECTOR_BODY" >/dev/null
check "no header: absent" eq "$(last "$T/plain.log" /hook 'r["signature"]')" absent
now=$(date +%s)
post /hook -H "webhook-id: $VECTOR_ID" -H "webhook-timestamp: $now" --data-binary x >/dev/null
check "the timestamp's skew from the arrival is recorded" "$PY" -c "import sys; sys.exit(not 0 <= $(last "$T/plain.log" /hook 'r["timestamp_skew"]') < 2)"

# 3. Answers.
code=$(post /busy --data-binary x)
check "429 with Retry-After and a body" eq "$code $(tr -d '\r' <"$T/headers" | sed -n 's/^Retry-After: //p') $(cat "$T/body")" "429 7 slow down"
check "the answer is recorded" eq "$(last "$T/plain.log" /busy 'r["answer"]')" '{"retry_after": "7", "status": 429}'
code=$(post /later --data-binary x)
ra=$(tr -d '\r' <"$T/headers" | sed -n 's/^Retry-After: //p')
check "503 with Retry-After as an HTTP date about 30 s ahead" \
	"$PY" -c "import sys, time, email.utils; t = email.utils.parsedate_to_datetime('$ra').timestamp(); sys.exit(not ('$code' == '503' and ' GMT' in '$ra' and 28 <= t - time.time() <= 31))"
code=$(post /moved --data-binary x)
check "a redirect: 302 with an absolute Location" eq "$code $(tr -d '\r' <"$T/headers" | sed -n 's/^Location: //p')" "302 $U/elsewhere"
check "the redirect target was never requested (curl did not follow)" \
	eq "$(last "$T/plain.log" /elsewhere 'len(reqs)')" 0
curl -s -L -o /dev/null -X POST "$U/moved" --data-binary x
check "a client that follows is seen at the target" eq "$(last "$T/plain.log" /elsewhere 'len(reqs)')" 1
codes=$(for i in 1 2 3 4; do post /flaky --data-binary "$i"; echo -n ' '; done)
check "500 for the first two requests, then 200" eq "$codes" "500 500 200 200 "
check "410 from --path" eq "$(post /gone --data-binary x)" 410
code=$(post /bad --data-binary x)
check "400 with a 5120-byte body" eq "$code $(wc -c <"$T/body") $(head -c 12 "$T/body")" "400 5120 012345678901"

# the control file changes the behaviour of a path, and its count restarts
cat >"$T/control.new" <<'JSON'
{"paths": {"/flaky": {"status": 503, "first": 1}}, "default": {"status": 202}}
JSON
mv "$T/control.new" "$T/control.json"
check "a rewritten control file: new behaviour, fresh count, new default" \
	eq "$(post /flaky --data-binary 1) $(post /flaky --data-binary 2) $(post /other --data-binary 3)" "503 200 202"

# 4. Hangs: no answer; the receiver logs when the client leaves.
cat >"$T/control.new" <<'JSON'
{"paths": {"/hang": {"hang": true}, "/drop": {"drop": true}, "/slow": {"delay_ms": 700}}}
JSON
mv "$T/control.new" "$T/control.json"
t0=$(date +%s.%N)
code=$(post /hang --max-time 1.5 --data-binary x)
check "a hanging path never answers (curl times out)" eq "$code" 000
sleep 0.5
check "the log has its request and a closed event about 1.5 s later" "$PY" - "$T/plain.log" <<'PYEOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
req = [r for r in recs if r["event"] == "request" and r["path"] == "/hang"][-1]
closed = [r for r in recs if r["event"] == "closed" and r["seq"] == req["seq"]]
sys.exit(not (req["answer"] == {"hang": True} and len(closed) == 1 and 1.3 < closed[0]["time"] - req["time"] < 2.5))
PYEOF
check "a dropped request gets no answer" eq "$(post /drop --max-time 3 --data-binary x)" 000
t0=$(date +%s%N)
code=$(post /slow --data-binary x)
ms=$((($(date +%s%N) - t0) / 1000000))
check "a delayed answer comes after the delay ($ms ms)" test "$code" = 200 -a "$ms" -ge 650 -a "$ms" -lt 3000

# 5. Rotation: one receiver knowing both secrets tells which one each
# signature matches; the secrets can change through the control file.
body='{"id": "x"}'
ts=$(date +%s)
old_sig=$("$PY" "$HERE/receiver.py" sign "$VECTOR_SECRET" msg_1 "$ts" "$body")
new_sig=$("$PY" "$HERE/receiver.py" sign "$NEW_SECRET" msg_1 "$ts" "$body")
printf '{"secrets": ["%s", "%s"]}\n' "$VECTOR_SECRET" "$NEW_SECRET" >"$T/control.new"
mv "$T/control.new" "$T/control.json"
post /rot -H "webhook-id: msg_1" -H "webhook-timestamp: $ts" -H "webhook-signature: $new_sig $old_sig" --data-binary "$body" >/dev/null
check "two signatures: each secret verifies one" eq "$(last "$T/plain.log" /rot 'r["verified_by"]')" "[0, 1]"
post /rot -H "webhook-id: msg_1" -H "webhook-timestamp: $ts" -H "webhook-signature: $new_sig" --data-binary "$body" >/dev/null
check "the new signature alone: only the new secret" eq "$(last "$T/plain.log" /rot 'r["verified_by"]')" "[1]"
printf '{"secrets": ["%s"]}\n' "whsec_$(head -c 24 /dev/urandom | base64 -w0)" >"$T/control.new"
mv "$T/control.new" "$T/control.json"
post /rot -H "webhook-id: msg_1" -H "webhook-timestamp: $ts" -H "webhook-signature: $new_sig $old_sig" --data-binary "$body" >/dev/null
check "a receiver with another secret refuses both" eq "$(last "$T/plain.log" /rot 'r["signature"] + str(r["verified_by"])')" "invalid[]"
printf '{"secrets": []}\n' >"$T/control.new"
mv "$T/control.new" "$T/control.json"
post /rot -H "webhook-id: msg_1" -H "webhook-timestamp: $ts" -H "webhook-signature: $new_sig" --data-binary "$body" >/dev/null
check "no secret configured: unchecked" eq "$(last "$T/plain.log" /rot 'r["signature"]')" unchecked

# 6. TLS with the test CA.
bash "$HERE/make-ca.sh" "$T/ca" || exit 1
bash "$HERE/make-ca.sh" "$T/other-ca" || exit 1
start tls --cert "$T/ca/server.pem" --key "$T/ca/server.key" --secret "$VECTOR_SECRET"
check "TLS to 127.0.0.1 verified with the CA" eq "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$T/ca/ca.pem" -X POST "https://127.0.0.1:$PORT/t" -d x)" 200
check "TLS to localhost verified with the CA" eq "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$T/ca/ca.pem" -X POST "https://localhost:$PORT/t" -d x)" 200
check "the request is recorded as TLS" eq "$(last "$T/tls.log" /t 'str(r["tls"]) + " " + str(len(reqs))')" "True 2"
curl -s -o /dev/null --cacert "$T/other-ca/ca.pem" -X POST "https://127.0.0.1:$PORT/t" -d x
check "another CA: curl refuses the certificate (exit 60)" eq "$?" 60
curl -s -o /dev/null --capath /nonexistent --cacert /etc/ssl/certs/ca-certificates.crt -X POST "https://127.0.0.1:$PORT/t" -d x
check "the system store: curl refuses the certificate (exit 60)" eq "$?" 60
sleep 0.3
check "no request was recorded from the refused handshakes, and they were logged" \
	eq "$(last "$T/tls.log" /t 'str(len(reqs)) + " " + str(len([x for x in recs if x["event"] == "tls_error"]) >= 2)')" "2 True"
check "plain HTTP to the TLS port gets nothing" eq "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 -X POST "http://127.0.0.1:$PORT/t" -d x)" 000

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
