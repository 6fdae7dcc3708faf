# A named subscription's lease that ran out on the last allowed attempt:
# the next claim makes the message dead in that subscription (never
# delivered once more), and hands out the next message of its ordering
# key in the same call.  Both claims mark: the claim of one topic, and the
# claim across all topics, which marks in the subscriptions after the
# first it visits only when their lock is free.  The default subscription
# of the topic is not touched.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = PostgreSQL::Test::Cluster->new('dead_leases');
$node->init;
$node->append_conf('postgresql.conf', q{shared_preload_libraries = 'krizaka_outbox'});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'ALTER DATABASE app SET outbox.max_attempts = 1');
$node->safe_psql('app', q{
	CREATE EXTENSION krizaka_outbox;
	SELECT outbox.subscribe('d', 's'), outbox.subscribe('e', 's');
	SELECT outbox.append(t, 'evt.t.v1', pg_catalog.jsonb_build_object('n', n), ordering_key => k)
	  FROM (VALUES ('d', 1, 'k'), ('d', 2, 'k'), ('d', 3, NULL), ('e', 4, 'k'), ('e', 5, 'k'))
	       AS v(t, n, k)
	 ORDER BY n;
});

# the claimed messages' n, in order
sub claimed
{
	my ($owner, $topic, $batch, $lease) = @_;
	return $node->safe_psql('app', qq{
		SELECT coalesce(string_agg(payload->>'n', ',' ORDER BY (payload->>'n')::int), '')
		  FROM outbox.claim('$owner', $topic, $batch, $lease, 's')});
}

# a session takes the head of key k in each topic for 10 s, on its only
# allowed attempt, and leaves them
is(claimed('gone', q{'d'}, 1, 10), '1', 'the head of d leased for 10 s');
is(claimed('gone', q{'e'}, 1, 10), '4', 'the head of e leased for 10 s');
is(claimed('other', q{'d'}, 10, 30), '3', 'the key of d waits for its head; 3 has no key');
ok(wait_for($node, 'app', q{
	SELECT (SELECT count(*) FROM outbox.subscription_state
	         WHERE leased_until < pg_catalog.now() AND lease_owner = 'gone')
	     + (SELECT coalesce(sum(cardinality(seqs)), 0) FROM outbox.subscription_lease
	         WHERE leased_until < pg_catalog.now() AND lease_owner = 'gone')}, '2', 30),
	'both leases ran out');

# the claim of d: 1 dead, and 2, the next of its key, handed out at once
is(claimed('w', q{'d'}, 10, 30), '2', 'the claim of d makes 1 dead and hands out 2');
is($node->safe_psql('app', q{
	SELECT x.attempts || '|' || (x.dead_at IS NOT NULL) || '|' || (x.leased_until IS NULL)
	       || '|' || x.last_error
	  FROM outbox.subscription_state x JOIN outbox.message m USING (id)
	 WHERE m.payload->>'n' = '1'}),
	'1|true|true|lease of owner "gone" expired on attempt 1 of 1',
	'1 is dead in s after its only attempt, with the reason');

# the claim across all topics: e's 4 dead and 5 handed out
is(claimed('w', 'NULL', 10, 30), '5', 'the claim across topics makes 4 dead and hands out 5');
is($node->safe_psql('app', q{
	SELECT string_agg(m.payload->>'n', ',' ORDER BY m.seq)
	  FROM outbox.subscription_state x JOIN outbox.message m USING (id)
	 WHERE x.dead_at IS NOT NULL}),
	'1,4', 'the dead rows of s: 1 and 4');
is($node->safe_psql('app', q{
	SELECT string_agg(topic || ':' || dead || ':' || in_flight, ',' ORDER BY topic)
	  FROM outbox.subscription_stats WHERE subscription = 's'}),
	'd:1:2,e:1:1', 'the stats of s: one dead and the rest leased in each topic');

# never delivered once more in s; the default subscription still has all five
is(claimed('w', 'NULL', 10, 30), '', 'nothing left to claim in s');
is($node->safe_psql('app', q{
	SELECT count(*) FILTER (WHERE attempts = 0 AND dead_at IS NULL AND delivered_at IS NULL)
	  FROM outbox.message}),
	'5', 'the default subscription has not seen them');
is($node->safe_psql('app', q{
	SELECT string_agg(payload->>'n', ',' ORDER BY (payload->>'n')::int)
	  FROM outbox.claim('dflt', 'd', 10, 30)}),
	'1,3', 'the default subscription hands out the head of d and 3');

$node->stop;
done_testing();
