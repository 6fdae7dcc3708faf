# The claim across all topics with thousands of idle topics: once a walk
# of every topic has found their claim positions, a claim visits only the
# topics that may have work (counted in index entries read), and a topic
# that gets work again is claimed at once, whichever way the work came:
# a new append, a failure's retry, a revived dead message, a prepared
# transaction (also one that a restart came between), a pause that ends,
# a default subscription brought back, a route removed.  Nothing of a
# rolled-back append is claimed, and nothing is claimed twice.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('across', '', qq{
autovacuum = off
max_prepared_transactions = 4
outbox.backoff_seconds = 1
});
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION krizaka_outbox;
	CREATE TABLE public.got (id uuid PRIMARY KEY, topic text);
	-- one claim across all topics of up to 500, completed and recorded;
	-- returns the topics claimed, with how many of each
	CREATE FUNCTION public.take() RETURNS text LANGUAGE sql AS $$
		WITH c AS (SELECT * FROM outbox.claim('w', NULL, 500, 30)),
		     d AS (INSERT INTO public.got SELECT c.id, c.topic FROM c
		           WHERE outbox.complete(c.id, 'w') RETURNING topic)
		SELECT coalesce(string_agg(topic || '=' || n, ',' ORDER BY topic), '')
		  FROM (SELECT topic, count(*) AS n FROM d GROUP BY topic) x
	$$;
});

my $sql = q{
	WITH c AS (SELECT * FROM outbox.claim('w', NULL, 50, 30))
	SELECT count(*) FROM c WHERE outbox.complete(c.id, 'w')};

# 600 messages in topic live: 3 claims of 50, then the index entries that
# 4 more read, then the rest; returns those entries
sub drain_live
{
	my ($session) = @_;
	$node->safe_psql('app', q{
		SELECT count(outbox.append('live', 'evt.live.v1', pg_catalog.jsonb_build_object('n', i)))
		  FROM generate_series(1, 600) i});
	my $live = 0;
	$live += $session->query_safe($sql) for 1 .. 3;
	$session->query_safe('SELECT pg_stat_force_next_flush()');
	my $before = message_index_reads($node, 'app');
	$live += $session->query_safe($sql) for 1 .. 4;
	$session->query_safe('SELECT pg_stat_force_next_flush()');
	my $reads = message_index_reads($node, 'app') - $before;
	$live += $session->query_safe($sql) for 1 .. 5;
	is($live, 600, 'the live topic is drained in full batches');
	is($session->query_safe($sql), '0', 'then nothing is due');
	return $reads;
}

my $session = $node->background_psql('app');
my $plain = drain_live($session);
note("index entries read by 4 claims of 50 of the live topic alone: $plain");

# 3,000 topics, more than the 1,024 claim positions kept, each with one
# message, all claimed across all topics
$node->safe_psql('app', q{
	SELECT count(outbox.append('idle' || i, 'evt.idle.v1', pg_catalog.jsonb_build_object('n', i)))
	  FROM generate_series(1, 3000) i});
for (1 .. 10)
{
	last if $node->safe_psql('app', q{SELECT public.take()}) eq '';
}
is($node->safe_psql('app', q{SELECT count(*) FROM public.got WHERE topic LIKE 'idle%'}), '3000',
	'the 3,000 idle topics\' messages are claimed across all topics');

# the same drain beside them: the claims after the first (which may walk
# every topic, more than 3,000 entries) visit the live topic only
my $reads = drain_live($session);
note("the same beside 3,000 idle topics: $reads");
cmp_ok($reads, '<', 2 * $plain, 'claims across all topics do not visit the idle topics');

# work that comes to idle topics is claimed by the next claim
$node->safe_psql('app', q{SELECT outbox.append('idle17', 'evt.idle.v1', '{"again": 1}')});
is($node->safe_psql('app', q{SELECT public.take()}), 'idle17=1', 'a new append to an idle topic');

$node->safe_psql('app', q{
	BEGIN;
	SELECT outbox.append('idle18', 'evt.idle.v1', '{"rolled": 1}');
	ROLLBACK;
	SELECT outbox.append('idle19', 'evt.idle.v1', '{"failing": 1}')});
my $id = $session->query_safe(q{SELECT id FROM outbox.claim('f', NULL, 10, 30)});
ok($session->query_safe(qq{SELECT outbox.fail('$id', 'f', 'boom')}) eq 't',
	'a message of an idle topic fails, retried in a second');
is($node->safe_psql('app', q{SELECT public.take()}), '', 'not before its retry is due');
ok(wait_for($node, 'app', q{SELECT public.take()}, 'idle19=1', 10),
	'its retry is claimed once due; the rolled-back append is not');

$node->safe_psql('app', q{SELECT outbox.append('idle20', 'evt.idle.v1', '{"dies": 1}')});
$id = $session->query_safe(q{SELECT id FROM outbox.claim('f', NULL, 10, 30)});
$session->query_safe(q{SET outbox.max_attempts = 1});
$session->query_safe(qq{SELECT outbox.fail('$id', 'f', 'boom')});
$session->query_safe(q{RESET outbox.max_attempts});
is($node->safe_psql('app', qq{SELECT dead_at IS NOT NULL FROM outbox.message WHERE id = '$id'}),
	't', 'a message of an idle topic is dead');
$node->safe_psql('app', qq{SELECT outbox.retry_dead('$id')});
is($node->safe_psql('app', q{SELECT public.take()}), 'idle20=1', 'revived, it is claimed');

# prepared transactions: committed while the cluster runs, and after a
# restart that came between PREPARE and COMMIT PREPARED
$node->safe_psql('app', q{
	BEGIN;
	SELECT outbox.append('idle21', 'evt.idle.v1', '{"prepared": 1}');
	PREPARE TRANSACTION 'p1'});
is($node->safe_psql('app', q{SELECT public.take()}), '', 'a prepared append is not claimed');
$node->safe_psql('app', q{COMMIT PREPARED 'p1'});
is($node->safe_psql('app', q{SELECT public.take()}), 'idle21=1', 'committed, it is');

$node->safe_psql('app', q{
	BEGIN;
	SELECT outbox.append('idle22', 'evt.idle.v1', '{"prepared": 2}');
	PREPARE TRANSACTION 'p2'});
$session->quit;
$node->restart;
$session = $node->background_psql('app');
is($node->safe_psql('app', q{SELECT public.take()}), '', 'after a restart, still not');
$session->query_safe($sql) for 1 .. 2;    # the walk after the restart
$node->safe_psql('app', q{COMMIT PREPARED 'p2'});
is($node->safe_psql('app', q{SELECT public.take()}), 'idle22=1',
	'committed after the restart, it is claimed');

# a paused default subscription: nothing while paused, claimed once its
# pause ends
$node->safe_psql('app', q{
	SELECT outbox.pause('idle23', NULL, clock_timestamp() + interval '2 seconds');
	SELECT outbox.append('idle23', 'evt.idle.v1', '{"paused": 1}')});
is($node->safe_psql('app', q{SELECT public.take()}), '', 'a paused topic is not claimed');
ok(wait_for($node, 'app', q{SELECT public.take()}, 'idle23=1', 10),
	'it is claimed once its pause ends');

# a dropped default subscription, brought back
$node->safe_psql('app', q{
	SELECT outbox.unsubscribe('idle24', NULL);
	SELECT outbox.append('idle24', 'evt.idle.v1', '{"dropped": 1}')});
is($node->safe_psql('app', q{SELECT public.take()}), '', 'a dropped default subscription is not claimed');
$node->safe_psql('app', q{SELECT outbox.subscribe('idle24', NULL)});
is($node->safe_psql('app', q{SELECT public.take()}), 'idle24=1', 'brought back, it is');

# a routed topic, unrouted
$node->safe_psql('app', q{
	SELECT outbox.route_notify('idle25', 'ch');
	SELECT outbox.append('idle25', 'evt.idle.v1', '{"routed": 1}')});
is($node->safe_psql('app', q{SELECT public.take()}), '', 'a routed topic is not claimed across all topics');
$node->safe_psql('app', q{SELECT outbox.unroute('idle25')});
is($node->safe_psql('app', q{SELECT public.take()}), 'idle25=1',
	'unrouted (and no worker serves the database), it is claimed');

# again, after all that
$reads = drain_live($session);
note("the same after all that: $reads");
cmp_ok($reads, '<', 2 * $plain, 'the claims still visit only the live topic');
$session->quit;
is($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.message
	 WHERE delivered_at IS NULL AND dead_at IS NULL}),
	'0', 'nothing else is pending');

# Under concurrency: appenders to 500 topics (fewer than the positions kept) (some in transactions of
# 100 topics, more than a commit notes one by one; some rolled back, some
# prepared and committed) and claimers across all topics.  Once the
# appenders stop, claims find every message at once, each claimed once.
$node->safe_psql('app', q{TRUNCATE public.got});
my $dir = $node->basedir;
append_to_file("$dir/one.sql", q{
\set t random(1, 500)
SELECT outbox.append('c' || :t, 'evt.c.v1', '{"kept": true}');
});
append_to_file("$dir/many.sql", q{
\set t random(1, 400)
SELECT count(outbox.append('c' || (:t + i), 'evt.c.v1', '{"kept": true}'))
  FROM generate_series(1, 100) i;
});
append_to_file("$dir/undone.sql", q{
\set t random(1, 500)
BEGIN;
SELECT outbox.append('c' || :t, 'evt.c.v1', '{"kept": false}');
ROLLBACK;
});
append_to_file("$dir/prepared.sql", q{
\set t random(1, 500)
BEGIN;
SELECT outbox.append('c' || :t, 'evt.c.v1', '{"kept": true}');
PREPARE TRANSACTION 'c:client_id';
COMMIT PREPARED 'c:client_id';
});
append_to_file("$dir/claim.sql", q{
WITH c AS (SELECT * FROM outbox.claim('w', NULL, 50, 30))
INSERT INTO public.got SELECT c.id, c.topic FROM c WHERE outbox.complete(c.id, 'w');
});
my $appenders = pgbench_start($node, 'app', '-c', '4', '-j', '2', '-T', '6', '-R', '400',
	'-f', "$dir/one.sql\@20", '-f', "$dir/many.sql\@1", '-f', "$dir/undone.sql\@3");
my $preparers = pgbench_start($node, 'app', '-c', '2', '-j', '1', '-T', '6', '-R', '50', '-f', "$dir/prepared.sql");
my $claimers = pgbench_start($node, 'app', '-c', '2', '-j', '1', '-T', '6', '-f', "$dir/claim.sql");
ok($appenders->(), 'the appenders ran without error');
ok($preparers->(), 'the preparers ran without error');
ok($claimers->(), 'the claimers ran without error');
my $total = $node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE topic LIKE 'c%'});
cmp_ok($total, '>', 1000, "$total messages appended");
cmp_ok($node->safe_psql('app', q{SELECT count(*) FROM public.got}), '>', 0,
	'the claimers claimed some meanwhile');
my $start = time;
my $rounds = 0;
while ($rounds++ < 100)
{
	last if $node->safe_psql('app', q{SELECT public.take()}) eq '';
}
my $took = time - $start;
note(sprintf('the rest claimed in %.2f s', $took));
is($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL AND dead_at IS NULL}),
	'0', 'every committed message was claimed across all topics');
cmp_ok($took, '<', 30, 'before a periodic walk of every topic could have found one');
is($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.message WHERE topic LIKE 'c%' AND attempts <> 1}),
	'0', 'each exactly once');
is($node->safe_psql('app', q{SELECT count(*) FROM public.got}),
	$node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE topic LIKE 'c%'}),
	'and recorded once');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE NOT (payload->>'kept')::boolean}),
	'0', 'no rolled-back append is stored');

done_testing();
