# Claims of one named subscription that roll back, while others read on:
# four claimers (pgbench clients) claim from subscription s of topic g in
# a transaction that records what it got, and roll back three claims in
# ten; the others commit, then complete what they got.  Appenders run at
# the same time, most messages without an ordering key (so that claims
# release the subscription's lock before they commit and later claims
# read past their range), some on two keys, a fifth of their transactions
# rolled back.  Once everything is drained:
#
#   - every committed message was recorded by a committed claim exactly
#     once: a range read by a claim that rolled back was read again, and
#     nothing was read twice;
#   - on each key, the messages were claimed in position order;
#   - no claim or completion failed: a completion of a keyed message
#     waits for its keys' locks, and a claim only tries them, so a claim
#     holding the subscription's lock never waits for a completion that
#     waits for it (no deadlock);
#   - no state is left, and the frontier is one row again.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('claim_rollback', '');
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION krizaka_outbox;
	SELECT outbox.subscribe('g', 's');
	CREATE TABLE got (n bigserial, id uuid, seq bigint, key text, owner int, done boolean DEFAULT false);
});

my $dir = $node->basedir;
my $commit = "$dir/commit.sql";
my $rollback = "$dir/rollback.sql";
my $claim = "$dir/claim.sql";
append_to_file($commit, q{
\set k random(1, 10)
BEGIN;
SELECT outbox.append('g', 'evt.g.v1', '{"kept": true}', NULL, NULL, CASE WHEN :k <= 2 THEN 'key' || :k END);
SELECT pg_sleep(random() * 0.004);
SELECT outbox.append('g', 'evt.g.v1', '{"kept": true}');
COMMIT;
});
append_to_file($rollback, q{
BEGIN;
SELECT outbox.append('g', 'evt.g.v1', '{"kept": false}', NULL, NULL, 'key1');
SELECT pg_sleep(random() * 0.004);
ROLLBACK;
});
append_to_file($claim, q{
\set rb random(1, 10)
BEGIN;
INSERT INTO got (id, seq, key, owner)
  SELECT c.id, c.seq, c.ordering_key, :client_id FROM outbox.claim('w' || :client_id, 'g', 10, 30, 's') c;
SELECT pg_sleep(random() * 0.003);
\if :rb <= 3
ROLLBACK;
\else
COMMIT;
WITH d AS (UPDATE got SET done = true WHERE owner = :client_id AND NOT done RETURNING id)
SELECT outbox.complete_many(coalesce((SELECT array_agg(id) FROM d), '{}'), 'w' || :client_id, 's');
\endif
});

my $connstr = $node->connstr('app');
my $appenders = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', '8',
	  '-f', "$commit\@4", '-f', "$rollback\@1", $connstr ],
	'>', \my $aout, '2>', \my $aerr);
my $claimers = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', '8', '-f', $claim, $connstr ],
	'>', \my $cout, '2>', \my $cerr);
ok($appenders->finish, 'the appenders ran without error') or diag($aerr);
ok($claimers->finish, 'the claimers ran without error') or diag($cerr);
# pgbench counts a deadlock as a failed transaction and goes on: a
# completion undone so leaves its leases held until they run out
like($cout, qr/number of failed transactions: 0 /,
	'no claim or completion failed (deadlock)') or diag($cout);

my $total = $node->safe_psql('app', 'SELECT count(*) FROM outbox.message');
cmp_ok($total, '>', 200, "$total messages appended");
my $during = $node->safe_psql('app', 'SELECT count(*) FROM got');
cmp_ok($during, '>', 100, "$during claimed while appends and rolled-back claims ran");

# the claims that roll back, alone now: each leaves a range to read again
for my $i (1 .. 5)
{
	$node->safe_psql('app', q{
		BEGIN;
		SELECT count(*) FROM outbox.claim('rb', 'g', 7, 30, 's');
		ROLLBACK;
	});
}

# claims go on until they find nothing
my $rounds = 0;
while ($rounds++ < 1000)
{
	last if $node->safe_psql('app', q{
		WITH c AS (INSERT INTO got (id, seq, key, owner, done)
		           SELECT c.id, c.seq, c.ordering_key, 0, true
		             FROM outbox.claim('w0', 'g', 50, 30, 's') c RETURNING id)
		SELECT count(outbox.complete(c.id, 'w0', 's')) FROM c}) eq '0';
}

is($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.message m WHERE NOT EXISTS (SELECT FROM got g WHERE g.id = m.id)}),
	'0', 'every committed message was claimed by a claim that committed')
  or diag($node->safe_psql('app', q{
	WITH left_over AS (SELECT m.id, m.seq, m.ordering_key FROM outbox.message m
	                    WHERE NOT EXISTS (SELECT FROM got g WHERE g.id = m.id))
	SELECT 'unclaimed ' || (SELECT string_agg(l.seq || ':' || coalesce(l.ordering_key, '-') || ':'
	         || coalesce((SELECT CASE WHEN x.blocked THEN 'blocked' WHEN x.hole THEN 'hole'
	                                  WHEN x.lease_owner IS NOT NULL THEN 'leased' ELSE 'waiting' END
	                        FROM outbox.subscription_state x WHERE x.id = l.id), 'unread'),
	         ' ' ORDER BY l.seq) FROM left_over l)
	    || '; frontier ' || (SELECT string_agg(coalesce(from_seq::text, '-') || '..' || next_seq, ' '
	                                           ORDER BY next_seq) FROM outbox.subscription_frontier)
	    || '; key rows ' || coalesce((SELECT string_agg(x.seq || ':' || x.ordering_key || ':' || x.blocked,
	                                                    ' ' ORDER BY x.seq)
	                                    FROM outbox.subscription_state x
	                                   WHERE x.ordering_key IN (SELECT ordering_key FROM left_over)), '')}));
is($node->safe_psql('app', q{SELECT count(*) - count(DISTINCT id) FROM got}),
	'0', 'none twice: no range was read by two claims');
is($node->safe_psql('app', q{SELECT count(*) FROM got WHERE NOT done}),
	'0', 'each claim that committed completed what it got');
is($node->safe_psql('app', q{
	SELECT count(*) FROM (
	  SELECT key, seq, lag(seq) OVER (PARTITION BY key ORDER BY n) AS before
	    FROM got WHERE key IS NOT NULL) x
	 WHERE seq < before}),
	'0', 'on each key, the messages were claimed in position order')
  or diag($node->safe_psql('app', q{
	SELECT string_agg(x.key || ' ' || x.seq || ' after ' || x.before || ' (claims ' || x.n || ' by '
	                  || x.owner || ', ' || x.bn || ' by ' || x.bowner || ')', '; ')
	  FROM (SELECT key, seq, n, owner, lag(seq) OVER w AS before, lag(n) OVER w AS bn,
	               lag(owner) OVER w AS bowner
	          FROM got WHERE key IS NOT NULL WINDOW w AS (PARTITION BY key ORDER BY n)) x
	 WHERE x.seq < x.before}));
is($node->safe_psql('app', q{
	SELECT (SELECT count(*) FROM outbox.subscription_state) || ' '
	    || (SELECT count(*) FROM outbox.subscription_frontier)}),
	'0 1', 'no state is left, and the frontier is one row');
is($node->safe_psql('app', q{
	SELECT pending || ' ' || in_flight FROM outbox.subscription_stats WHERE subscription = 's'}),
	'0 0', 'subscription_stats: nothing pending');

$node->stop;
done_testing();
