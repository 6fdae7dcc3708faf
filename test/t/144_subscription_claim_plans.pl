# The claims of a named subscription find the messages and the state rows
# they lease by position, whatever the statistics their plans were made
# with.  The plans are made while the tables are empty and never analyzed
# (autovacuum off), as on a server where a subscription starts before its
# topic fills; then the subscription drains 20,000 messages, fails 1,000
# and claims them again once due.  Counted in index entries read: a plan
# that joined the leased rows to the whole topic (or to every state row
# of the subscription) reads thousands per claim.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('claim_plans', '', qq{
autovacuum = off
outbox.backoff_seconds = 1
});
$node->safe_psql('postgres', q{
	CREATE EXTENSION krizaka_outbox;
	SELECT outbox.subscribe('t', 's');
});

my $session = $node->background_psql('postgres');
my $claim = q{SELECT outbox.complete_many(ARRAY(
	SELECT id FROM outbox.claim('w', 't', 50, 30, subscription => 's')), 'w', 's')};

# the plans, made on the empty tables
is($session->query_safe($claim), '0', 'nothing to claim yet');

# Index entries of outbox.message and of outbox.subscription_state read
# so far (the statistics of the session flushed first).
sub reads
{
	$session->query_safe('SELECT pg_stat_force_next_flush()');
	return $node->safe_psql('postgres', q{
		SELECT pg_stat_force_next_flush();
		SELECT coalesce(sum(idx_tup_read) FILTER (WHERE relname = 'message'), 0)
		    || ' ' || coalesce(sum(idx_tup_read) FILTER (WHERE relname = 'subscription_state'), 0)
		  FROM pg_stat_user_indexes WHERE schemaname = 'outbox'});
}

$node->safe_psql('postgres', q{
	SELECT count(outbox.append('t', 'evt.t.v1', pg_catalog.jsonb_build_object('n', i)))
	  FROM generate_series(1, 20000) i});
my $done = 0;
$done += $session->query_safe($claim) for 1 .. 370;
my ($m0, $s0) = split ' ', reads();
$done += $session->query_safe($claim) for 1 .. 10;
my ($m1, $s1) = split ' ', reads();
is($done, 19000, '380 claims of 50 completed 19,000 messages');
note('10 claims of 50 fresh messages read ' . ($m1 - $m0)
	  . ' entries of the message indexes, ' . ($s1 - $s0) . ' of the state indexes');
cmp_ok($m1 - $m0, '<', 10 * 300, 'fresh: each claim reads the messages it leases, not the topic');

# 1,000 state rows waiting for their retry, then claimed once due
is( $session->query_safe(q{
		SELECT count(outbox.fail(c.id, 'w', 'target down', 's')) FROM (
		  SELECT id FROM outbox.claim('w', 't', 500, 30, subscription => 's')
		  UNION ALL
		  SELECT id FROM outbox.claim('w', 't', 500, 30, subscription => 's')) c}),
	'1000', 'the last 1,000 fail once');
ok( wait_for($node, 'postgres', q{
		SELECT max(available_at) < now() FROM outbox.subscription_state}, 't', 30),
	'the failed messages are due again');
($m0, $s0) = split ' ', reads();
$done = 0;
$done += $session->query_safe($claim) for 1 .. 10;
($m1, $s1) = split ' ', reads();
is($done, 500, '10 claims of 50 complete 500 of the retried messages');
note('10 claims of 50 retried messages read ' . ($m1 - $m0)
	  . ' entries of the message indexes, ' . ($s1 - $s0) . ' of the state indexes');
cmp_ok($m1 - $m0, '<', 10 * 300, 'retried: each claim reads the messages it leases, not the topic');
cmp_ok($s1 - $s0, '<', 10 * 1000,
	'retried: each claim reads the state rows it leases, not every row of the subscription');

$done = 0;
for (1 .. 20)
{
	my $n = $session->query_safe($claim);
	last if $n == 0;
	$done += $n;
}
is($done, 500, 'the other 500 follow');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.subscription_state}), '0',
	'no state is left');

$session->quit;
$node->stop;
done_testing();
