# The horizon of appends in progress, under concurrency: appenders (pgbench
# clients, some transactions rolled back, some holding their appends open
# for a moment) and claimers that complete what they claim run at once on
# one topic.  No claim position passes a message whose append was still
# in progress: once the appenders stop, claims find every committed message,
# and none of the rolled-back ones.  Then appends held open for up to 2.5 s,
# which claim positions pass and keep as holes, with ordering keys: every
# committed message is claimed once, each key in position order.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('concurrent', '');
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION krizaka_outbox');

my $dir = $node->basedir;
my $commit = "$dir/commit.sql";
my $rollback = "$dir/rollback.sql";
my $claim = "$dir/claim.sql";
append_to_file($commit, q{
BEGIN;
SELECT outbox.append('s', 'evt.a.v1', '{"kept": true}');
SELECT pg_sleep(random() * 0.004);
SELECT outbox.append('s', 'evt.a.v1', '{"kept": true}');
COMMIT;
});
append_to_file($rollback, q{
BEGIN;
SELECT outbox.append('s', 'evt.a.v1', '{"kept": false}');
SELECT pg_sleep(random() * 0.004);
ROLLBACK;
});
append_to_file($claim, q{
WITH c AS (SELECT * FROM outbox.claim('w', 's', 20, 30))
SELECT count(*) FROM c WHERE outbox.complete(c.id, 'w');
});

my $appenders = pgbench_start($node, 'app', '-c', '6', '-j', '2', '-T', '6',
	'-f', "$commit\@4", '-f', "$rollback\@1");
my $claimers = pgbench_start($node, 'app', '-c', '2', '-j', '1', '-T', '6', '-f', $claim);
ok($appenders->(), 'the appenders ran without error');
ok($claimers->(), 'the claimers ran without error');

my $total = $node->safe_psql('app', 'SELECT count(*) FROM outbox.message');
cmp_ok($total, '>', 100, "$total messages appended");
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE NOT (payload->>'kept')::boolean}),
	'0', 'no rolled-back append is stored');

# claims go on until they find nothing: each message is found
my $rounds = 0;
while ($rounds++ < 1000)
{
	last if $node->safe_psql('app', q{
		WITH c AS (SELECT * FROM outbox.claim('w', 's', 500, 30))
		SELECT count(*) FROM c WHERE outbox.complete(c.id, 'w')}) eq '0';
}
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL}),
	'0', 'every committed message was claimed: no position was passed while its append ran');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE attempts <> 1}),
	'0', 'each exactly once');

#
# Appends held open longer than a claim position waits for them (a
# second): the claims pass them and keep them as holes.  Long transactions
# append to one of 10 keys and without a key, some roll back; short ones
# append to 10 other keys; claimers record what they complete.
#
$node->safe_psql('app', q{
	TRUNCATE outbox.message;
	CREATE TABLE public.got (n bigserial PRIMARY KEY, id uuid, seq bigint, key text)});
my $long = "$dir/long.sql";
my $long_undone = "$dir/long_undone.sql";
my $short = "$dir/short.sql";
my $record = "$dir/record.sql";
append_to_file($long, q{
\set k random(1, 10)
BEGIN;
SELECT outbox.append('h', 'evt.h.v1', '{"kept": true}', NULL, NULL, 'long:' || :k);
SELECT pg_sleep(random() * 2.5);
SELECT outbox.append('h', 'evt.h.v1', '{"kept": true}');
COMMIT;
});
append_to_file($long_undone, q{
\set k random(1, 10)
BEGIN;
SELECT outbox.append('h', 'evt.h.v1', '{"kept": false}', NULL, NULL, 'long:' || :k);
SELECT pg_sleep(random() * 2.5);
ROLLBACK;
});
append_to_file($short, q{
\set k random(1, 10)
SELECT outbox.append('h', 'evt.h.v1', '{"kept": true}', NULL, NULL, 'short:' || :k);
});
append_to_file($record, q{
INSERT INTO public.got (id, seq, key)
SELECT c.id, c.seq, c.ordering_key FROM outbox.claim('w', 'h', 20, 30) c
 WHERE outbox.complete(c.id, 'w');
});
my $holders = pgbench_start($node, 'app', '-c', '6', '-j', '2', '-T', '10',
	'-f', "$long\@4", '-f', "$long_undone\@1");
my $shorts = pgbench_start($node, 'app', '-c', '2', '-j', '1', '-T', '10', '-R', '200', '-f', $short);
my $recorders = pgbench_start($node, 'app', '-c', '2', '-j', '1', '-T', '12', '-f', $record);
ok($holders->(), 'the appenders that hold their appends open ran without error');
ok($shorts->(), 'the short appenders ran without error');
ok($recorders->(), 'the claimers ran without error');

$rounds = 0;
while ($rounds++ < 1000)
{
	last if $node->safe_psql('app', q{
		WITH c AS (SELECT * FROM outbox.claim('w', 'h', 500, 30)),
		     d AS (INSERT INTO public.got (id, seq, key)
		           SELECT c.id, c.seq, c.ordering_key FROM c WHERE outbox.complete(c.id, 'w')
		           RETURNING 1)
		SELECT count(*) FROM d}) eq '0'
		&& $node->safe_psql('app', q{
		SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL}) eq '0';
	usleep(20_000);
}
my $held = $node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE topic = 'h'});
cmp_ok($held, '>', 1000, "$held messages appended");
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE NOT (payload->>'kept')::boolean}),
	'0', 'no rolled-back append is stored');
is($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.message m
	 WHERE NOT EXISTS (SELECT 1 FROM public.got g WHERE g.id = m.id)}),
	'0', 'every committed message was claimed');
is($node->safe_psql('app', q{SELECT count(*) - count(DISTINCT id) FROM public.got}),
	'0', 'each exactly once');
is($node->safe_psql('app', q{
	SELECT count(*) FROM (
	  SELECT seq, lag(seq) OVER (PARTITION BY key ORDER BY n) AS prev
	    FROM public.got WHERE key IS NOT NULL) x
	 WHERE prev > seq}),
	'0', 'the messages of each key were claimed in position order');

$node->stop;
done_testing();
