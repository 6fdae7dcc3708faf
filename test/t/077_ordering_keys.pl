# Ordering keys across every delivery path at once: four pull workers
# (pgbench) and the background worker (a remote route) share one topic of
# 40 keys, both fail a fifth of their attempts, and the background worker is
# killed twice in the middle of its batches.  For every key, the first
# successful delivery of each message comes after that of the message before
# it, and everything is delivered.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

# outbox.max_attempts at its maximum: a fifth of the attempts fail, and a
# worker killed mid-batch costs its messages an attempt more
my $node = worker_node('keys', 'app', qq{
outbox.lease_seconds = 10
outbox.backoff_seconds = 1
outbox.backoff_max_seconds = 1
outbox.max_attempts = 50
outbox.worker_naptime_ms = 200
});
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE inbox');

# The remote target: a fifth of the calls fail; a success is recorded with
# the time it committed at (the clock of the same cluster as the pullers').
$node->safe_psql('inbox', q{
	CREATE TABLE public.received (id uuid, key text, n integer, at timestamptz DEFAULT clock_timestamp());
	CREATE FUNCTION public.deliver(env jsonb) RETURNS void LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_sleep(0.005);
		IF random() < 0.2 THEN
			RAISE EXCEPTION 'injected failure';
		END IF;
		INSERT INTO public.received (id, key, n)
		VALUES ((env->>'id')::uuid, env->'payload'->>'key', (env->'payload'->>'n')::integer);
	END $$;
});
remote_server($node, 'app', 'inbox', 'inbox');

# The pullers: claim 5, fail a fifth, record the others with their time and
# complete them, all in one transaction.
$node->safe_psql('app', q{
	CREATE TABLE public.pulled (id uuid, key text, n integer, at timestamptz DEFAULT clock_timestamp());
	CREATE FUNCTION public.pull_step() RETURNS integer LANGUAGE plpgsql AS $$
	DECLARE
		m outbox.message;
		done integer := 0;
	BEGIN
		FOR m IN SELECT * FROM outbox.claim('puller', 'ko', 5, 10) LOOP
			IF random() < 0.2 THEN
				PERFORM outbox.fail(m.id, 'puller', 'injected failure');
			ELSE
				INSERT INTO public.pulled (id, key, n)
				VALUES (m.id, m.ordering_key, (m.payload->>'n')::integer);
				PERFORM outbox.complete(m.id, 'puller');
				done := done + 1;
			END IF;
		END LOOP;
		RETURN done;
	END $$;
	SELECT outbox.route_remote('ko', 'inbox', 'SELECT public.deliver($1)');
});

# 40 keys, 50 messages each, appended round by round
my $script = $node->basedir . '/pull.sql';
open(my $fh, '>', $script) or die;
print $fh "SELECT public.pull_step();\n";
close $fh;
$node->safe_psql('app', q{
	SELECT outbox.append('ko', 'evt.ko.v1', jsonb_build_object('key', 'k' || k, 'n', n), NULL, NULL, 'k' || k)
	  FROM generate_series(1, 50) n, generate_series(1, 40) k ORDER BY n, k});

my $total = 2000;
my $pgbench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '4', '-j', '2', '-R', '20', '-T', '300', '-f', $script, '-d', $node->connstr('app') ],
	'>', \my $out, '2>', \my $err);

# kill the background worker twice while it has a batch in flight
for my $kill (1 .. 2)
{
	ok($node->poll_query_until('app', q{
		SELECT count(*) > 0 FROM outbox.message
		 WHERE lease_owner LIKE 'krizaka_outbox worker%' AND leased_until > now() AND delivered_at IS NULL}),
		"kill $kill: the worker holds leases");
	my $pid = $node->safe_psql('app',
		"SELECT pid FROM outbox.worker_status() WHERE datname = 'app'");
	$node->safe_psql('app', "SELECT pg_terminate_backend($pid)");
	ok(wait_for($node, 'app',
		"SELECT pid <> $pid FROM outbox.worker_status() WHERE datname = 'app'", 't', 60),
		"kill $kill: a new worker runs");
}

ok(wait_for($node, 'app',
	q{SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL}, '0', 240),
	'every message is delivered')
  or diag("left undelivered, with the messages of their keys around them:\n",
	$node->safe_psql('app', q{
		SELECT string_agg(format('%s %s n=%s seq=%s attempts=%s deferred=%s leased_until=%s owner=%s delivered=%s dead=%s error=%s',
			CASE WHEN m.delivered_at IS NULL THEN '*' ELSE ' ' END, m.ordering_key, m.payload->>'n', m.seq,
			m.attempts, m.deferred, m.leased_until, m.lease_owner, m.delivered_at, m.dead_at, m.last_error),
			E'\n' ORDER BY m.ordering_key, m.seq)
		  FROM outbox.message m
		  JOIN (SELECT ordering_key, (payload->>'n')::int AS n FROM outbox.message
		         WHERE delivered_at IS NULL) u
		    ON m.ordering_key = u.ordering_key AND abs((m.payload->>'n')::int - u.n) <= 2}),
	"\nworker: ", $node->safe_psql('app', q{SELECT concat_ws(' ', pid, state, last_error) FROM outbox.worker_status()}));
$pgbench->kill_kill;

# all first deliveries, from both paths, in one table
my $remote = $node->safe_psql('inbox', q{SELECT string_agg(format('(%L::uuid,%L,%s,%L::timestamptz)', id, key, n, at), ',') FROM received});
$node->safe_psql('app', qq{
	CREATE TABLE public.firsts AS
	SELECT DISTINCT ON (id) id, key, n, at FROM (
		SELECT id, key, n, at FROM public.pulled
		UNION ALL SELECT * FROM (VALUES $remote) r(id, key, n, at)) d
	ORDER BY id, at});
is($node->safe_psql('app', 'SELECT count(*) FROM public.firsts'), $total, 'every message was delivered at least once');
is($node->safe_psql('app', q{SELECT count(DISTINCT key) FROM public.firsts}), '40', 'on all 40 keys');
is($node->safe_psql('app', q{
	SELECT count(*) FROM (
		SELECT n, lag(n) OVER (PARTITION BY key ORDER BY at) AS before FROM public.firsts) s
	 WHERE before IS NOT NULL AND n <> before + 1}),
	'0', 'for every key, the first deliveries came in the order of the appends');
cmp_ok($node->safe_psql('app', 'SELECT count(*) FROM public.pulled'), '>', 0, 'pull workers delivered some');
cmp_ok($node->safe_psql('inbox', 'SELECT count(*) FROM received'), '>', 0, 'the background worker delivered some');
cmp_ok($node->safe_psql('app', q{SELECT sum(attempts - 1) FROM outbox.message}), '>', 0, 'with retries after failures');

$node->stop;
done_testing();
