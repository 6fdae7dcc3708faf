#!/usr/bin/env bash
# test/demo.sh: the whole flow of krizaka_outbox on the throwaway cluster that
# `make demo` (test/run --demo) starts.  Runs as postgres with PGHOST, PGPORT
# and PGUSER set; the cluster preloads the library.
set -euo pipefail

say() { printf '\n## %s\n' "$*"; }
sql() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
# Run a query until it returns t, for at most 30 s.
wait_for() {
	local db=$1 query=$2
	for _ in $(seq 1 300); do
		[ "$(psql -X -qAt -d "$db" -c "$query")" = t ] && return 0
		sleep 0.1
	done
	echo "timed out waiting for: $query" >&2
	return 1
}

say "Settings: a drain worker for database demo; fast retries for the show"
sql -d postgres <<'SQL'
ALTER SYSTEM SET outbox.worker_databases = 'demo';
ALTER SYSTEM SET outbox.backoff_seconds = 1;
ALTER SYSTEM SET outbox.max_attempts = 3;
SELECT pg_reload_conf();
SQL
createdb demo
createdb inbox

say "A second database, inbox, receives one topic through libpq"
sql -d inbox <<'SQL'
CREATE TABLE event (id uuid PRIMARY KEY, topic text, body jsonb,
                    received_at timestamptz DEFAULT clock_timestamp());
SQL

sql -d demo -v host="$PGHOST" -v port="$PGPORT" <<'SQL'
CREATE EXTENSION krizaka_outbox;
CREATE EXTENSION dblink;
CREATE SERVER inbox FOREIGN DATA WRAPPER dblink_fdw
    OPTIONS (host :'host', port :'port', dbname 'inbox');
CREATE USER MAPPING FOR CURRENT_USER SERVER inbox OPTIONS (user 'postgres');
SELECT outbox.route_notify('live', 'live_events');
SELECT outbox.route_remote('credits', 'inbox',
    'INSERT INTO event (id, topic, body) VALUES (($1->>''id'')::uuid, $2, $1) ON CONFLICT (id) DO NOTHING');
SELECT outbox.route_remote('audit', 'inbox', 'INSERT INTO audit_log (body) VALUES ($1)');
TABLE outbox.routes;
SQL

say "check_route tries a route as delivery would, delivering nothing: credits is ready, audit's table is missing"
sql -d demo -c "SELECT * FROM outbox.check_route('credits')"
sql -d demo -c "SELECT * FROM outbox.check_route('audit')"

say "A listener on channel live_events"
listen_out=$(mktemp)
psql -X -q -d demo -c 'LISTEN live_events' -c 'SELECT pg_sleep(4)' >"$listen_out" 2>&1 &
listener=$!
wait_for demo "SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(4)%'"

say "Appends: two committed transactions, one rolled back (orderId 2, redemptionId 42); what committed:"
sql -d demo <<'SQL'
\o /dev/null
BEGIN;
SELECT outbox.append('live', 'evt.order.placed.v1', '{"orderId": 1}') IS NOT NULL AS appended;
SELECT outbox.append('credits', 'evt.coupon.redeemed.v1', '{"redemptionId": 41}') IS NOT NULL AS appended;
COMMIT;
BEGIN;
SELECT outbox.append('live', 'evt.order.placed.v1', '{"orderId": 2}') IS NOT NULL AS appended;
SELECT outbox.append('credits', 'evt.coupon.redeemed.v1', '{"redemptionId": 42}') IS NOT NULL AS appended;
ROLLBACK;
BEGIN;
SELECT outbox.append('live', 'evt.order.placed.v1', '{"orderId": 3}') IS NOT NULL AS appended;
SELECT outbox.append('audit', 'evt.audit.logged.v1', '{"who": "alice"}') IS NOT NULL AS appended;
COMMIT;
\o
SELECT topic, payload FROM outbox.message ORDER BY id;
SQL

wait_for demo "SELECT count(*) = 3 FROM outbox.message WHERE delivered_at IS NOT NULL"
wait "$listener" || true
say "What the listener received (orderId 2 was rolled back and never sent)"
grep 'Asynchronous notification' "$listen_out" | sed 's/ received from server process.*//'
rm -f "$listen_out"

say "What the inbox holds"
sql -d inbox -c "SELECT topic, body FROM event ORDER BY received_at"

say "The audit route fails (no table audit_log yet): it backs off, then the message is dead"
wait_for demo "SELECT dead_at IS NOT NULL FROM outbox.message WHERE topic = 'audit'"
sql -d demo -c "SELECT topic, attempts, dead_at IS NOT NULL AS dead, last_error FROM outbox.message WHERE topic = 'audit'"

say "Fix the target and revive the dead message"
sql -d inbox -c "CREATE TABLE audit_log (body jsonb)"
sql -d demo -c "SELECT outbox.retry_dead_topic('audit') AS revived"
wait_for demo "SELECT delivered_at IS NOT NULL FROM outbox.message WHERE topic = 'audit'"
sql -d inbox -c "SELECT body FROM audit_log"

say "topic_stats and the worker"
sql -d demo -c "SELECT * FROM outbox.topic_stats ORDER BY topic"
sql -d demo -c "SELECT datname, state, delivered, failed FROM outbox.worker_status()"

say "Done: the cluster is thrown away"
