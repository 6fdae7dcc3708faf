# Claims, completions and failures of one named subscription, many at
# once, with ordering keys and retries: none of them ends in a deadlock.
#
# A completion of a keyed message and the claims of keyed messages all
# need the subscription's lock.  A claim's FOR UPDATE SKIP LOCKED still
# locks, and waits for, the newer version of a row whose update committed
# after its snapshot; so whoever takes the lock must take it before it
# changes or locks a state row, or not wait for it.  Four workers claim
# (in their own transactions, or with the completion in the same one),
# fail one message in eight (retried a second later: the due read, which
# is where stale versions are met) and complete the rest, while producers
# append in transactions that stay open a moment (appends in progress,
# which claims read past), some on two ordering keys; the 2,000 messages
# there before are half on eight keys.  Then:
#
#   - pgbench counted no failed transaction (a deadlock is one);
#   - once the retries are done, every message was completed: no state is
#     left, nothing is dead, nothing pending.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('lock_order', '', q{
log_lock_waits = on
outbox.backoff_seconds = 1
outbox.backoff_max_seconds = 1
outbox.max_attempts = 50
});
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION krizaka_outbox;
	SELECT outbox.subscribe('g', 's');
	CREATE TABLE got (owner int, id uuid);
	SELECT count(outbox.append('g', 'evt.g.v1', jsonb_build_object('n', i), NULL, NULL,
	                           CASE WHEN i % 2 = 0 THEN 'key' || i % 8 END))
	  FROM generate_series(1, 2000) i;
});

my $dir = $node->basedir;
my $append = "$dir/append.sql";
my $apart = "$dir/apart.sql";
my $together = "$dir/together.sql";
append_to_file($append, q{
\set k random(1, 8)
BEGIN;
SELECT outbox.append('g', 'evt.g.v1', '{}', NULL, NULL, CASE WHEN :k <= 2 THEN 'key' || :k END);
SELECT pg_sleep(random() * 0.004);
SELECT outbox.append('g', 'evt.g.v1', '{}');
COMMIT;
});
# claim (and hold the claim's transaction open a moment, as a worker that
# records what it got does), then fail one in eight and complete the rest
my $claim = q{
\set f random(1, 8)
BEGIN;
WITH c AS (SELECT id FROM outbox.claim('w' || :client_id, 'g', 10, 30, 's'))
INSERT INTO got SELECT :client_id, id FROM c;
SELECT pg_sleep(random() * 0.003);
};
my $work = q{
WITH f AS (DELETE FROM got WHERE owner = :client_id AND :f = 1
             AND id = (SELECT id FROM got WHERE owner = :client_id LIMIT 1) RETURNING id)
SELECT count(outbox.fail(id, 'w' || :client_id, 'boom', 's')) FROM f;
WITH d AS (DELETE FROM got WHERE owner = :client_id RETURNING id)
SELECT outbox.complete_many(coalesce((SELECT array_agg(id) FROM d), '{}'), 'w' || :client_id, 's');
};
# the failure and the completion each in a transaction of their own
append_to_file($apart, $claim . "COMMIT;\n" . $work);
# all in one transaction: the claim's lock is held by the completion
append_to_file($together, $claim . $work . "COMMIT;\n");

my $connstr = $node->connstr('app');
my $producers = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', '10', '-f', $append, $connstr ],
	'>', \my $pout, '2>', \my $perr);
my $workers = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', '10',
	  '-f', "$apart\@1", '-f', "$together\@1", $connstr ],
	'>', \my $wout, '2>', \my $werr);
ok($producers->finish, 'the producers ran without error') or diag($perr);
ok($workers->finish, 'the workers ran without error') or diag($werr);
like($wout, qr/number of failed transactions: 0 /,
	'no claim, completion or failure failed (deadlock)') or diag($wout);
note(join("\n", grep { /transactions actually processed/ } split /\n/, $wout));
my $failed = $node->safe_psql('app', q{
	SELECT count(*) FROM outbox.subscription_state WHERE last_error = 'boom'});
cmp_ok($failed, '>', 5, "$failed messages failed and wait for their retry");

# the rest drained, retries included (each due a second after its
# failure); a key's messages come one claim after another
my $d = $node->background_psql('app');
my $left;
for (my $until = time() + 120; time() < $until;)
{
	my $got = $d->query_safe(q{
		WITH c AS (SELECT id FROM outbox.claim('d', 'g', 500, 30, 's'))
		SELECT count(outbox.complete(c.id, 'd', 's')) FROM c});
	next if $got ne '0';
	$left = $d->query_safe('SELECT count(*) FROM outbox.subscription_state');
	last if $left eq '0';
	usleep(100_000);
}
$d->quit;
is($left, '0', 'every message was completed: no state is left');
is($node->safe_psql('app', q{
	SELECT pending || ' ' || in_flight || ' ' || dead FROM outbox.subscription_stats
	 WHERE subscription = 's'}),
	'0 0 0', 'subscription_stats: nothing pending, leased or dead');
is($node->safe_psql('app', 'SELECT count(*) FROM got'), '0',
	'each worker completed or failed all it claimed');

$node->stop;
done_testing();
