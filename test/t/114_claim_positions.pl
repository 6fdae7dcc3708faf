# outbox.claim_positions sizes the claim positions kept in shared memory.
# With more topics claimed in turn than positions are kept, the least
# recently used position makes room, and the next claim of its topic
# searches it again from the floor saved in outbox.claim_position, not
# from the topic's first message kept; with enough positions every claim
# starts from its topic's position.  Counted in index entries read by the
# same claims, on the same rows, with 64 positions and then with 256.  The
# setting takes effect at server start only, and a session is told so.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('positions', '', qq{
autovacuum = off
outbox.claim_positions = 64
});
$node->safe_psql('postgres', 'CREATE EXTENSION krizaka_outbox');
is($node->safe_psql('postgres', 'SHOW outbox.claim_positions'), '64',
	'the setting is read from the configuration');

is( $node->safe_psql('postgres', q{
		SELECT min_val, max_val, boot_val, context, unit IS NULL FROM pg_settings
		 WHERE name = 'outbox.claim_positions'}),
	'64|1048576|1024|postmaster|t', 'its range, default and context');

my ($ret, $out, $err) = $node->psql('postgres', 'SET outbox.claim_positions = 128',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err,
	qr/ERROR:  55P02: parameter "outbox.claim_positions" cannot be changed without restarting the server/,
	'a session cannot change it (55P02)');

# 100 topics of 200 messages, the first 180 of each delivered; then 5
# rounds that each claim and complete one message of every topic in turn.
# Returns the index entries of outbox.message those 500 claims read.
sub rounds
{
	$node->safe_psql('postgres', q{
		TRUNCATE outbox.message;
		SELECT count(outbox.append('t' || (i % 100), 'evt.t.v1', pg_catalog.jsonb_build_object('n', i)))
		  FROM generate_series(0, 19999) i});
	$node->safe_psql('postgres', join('',
		map { "SELECT outbox.complete_many(ARRAY(SELECT id FROM outbox.claim('w', 't$_', 180)), 'w');\n" }
		  0 .. 99));
	my $before = message_index_reads($node, 'postgres');
	my $claims = '';
	for my $round (1 .. 5)
	{
		$claims .= "SELECT outbox.complete_many(ARRAY(SELECT id FROM outbox.claim('w', 't$_', 1)), 'w');\n"
		  for 0 .. 99;
	}
	$node->safe_psql('postgres', $claims);
	my $reads = message_index_reads($node, 'postgres') - $before;
	is( $node->safe_psql('postgres', q{
			SELECT count(DISTINCT topic) FILTER (WHERE n = 185) FROM (
			  SELECT topic, count(*) AS n FROM outbox.message
			   WHERE delivered_at IS NOT NULL GROUP BY topic) x}),
		'100', 'every topic had 5 more messages claimed and delivered');
	return $reads;
}

my $few = rounds();
note("index entries read by 500 claims of 100 topics in turn, 64 positions: $few");

$node->append_conf('postgresql.conf', 'outbox.claim_positions = 256');
$node->restart;
is($node->safe_psql('postgres', 'SHOW outbox.claim_positions'), '256',
	'a restart applies a new value');
my $enough = rounds();
note("the same with 256 positions: $enough");

# From the position a claim reads the 20 messages left at most; from the
# first message kept it would read the 180 delivered ones too (93,000
# entries when the floors were not saved).  Each topic's first claim after
# its 180 were delivered reads them once, with either setting.
cmp_ok($enough, '<', 500 * 60, 'with a position for each topic, claims start from it');
cmp_ok($few, '<', 500 * 60, 'with too few, claims start from the floors saved');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.claim_position}),
	'100', 'a floor is saved for each topic');

# After a restart no position is kept, and the first claim across all
# topics walks every topic: it searches each from its saved floor, not
# from its 186 delivered messages (18,600 entries).  A floor is saved at
# most once a second per topic: a second after the last saves, one more
# message of each topic is claimed, and its search saves the floor.
$node->poll_query_until('postgres', q{
	SELECT pg_catalog.min(pg_catalog.clock_timestamp() - saved_at) > interval '1.1 s'
	  FROM outbox.claim_position})
  or die 'the saved floors did not age';
$node->safe_psql('postgres', join('',
	map { "SELECT outbox.complete_many(ARRAY(SELECT id FROM outbox.claim('w', 't$_', 1)), 'w');\n" }
	  0 .. 99));
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM outbox.claim_position p
	 WHERE p.position OPERATOR(pg_catalog.>=) (SELECT pg_catalog.max(m.seq) FROM outbox.message m
	                                             WHERE m.topic = p.topic AND m.delivered_at IS NOT NULL)}),
	'100', 'each topic\'s floor is saved at its last delivered message');
$node->restart;
my $before = message_index_reads($node, 'postgres');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.claim('w', NULL, 1)}),
	'1', 'after a restart, a claim across all topics gets a message');
my $walk = message_index_reads($node, 'postgres') - $before;
note("index entries read by that claim, a walk of the 100 topics: $walk");
cmp_ok($walk, '<', 3000, 'the walk searches each topic from its saved floor');

$node->stop;
done_testing();
