# The holes of a named subscription (appends a claim read past while they
# were in progress) are read by each backend from a mark, so that claims
# under a held snapshot do not pass the index entries of every hole handed
# out since.  No hole may ever lie below a backend's mark.  Each case below
# makes one where a careless mark would put it, in a session that keeps
# claiming (a new session starts from the first hole and would hide the
# fault), and checks that the message is handed out:
#
#   - a claim in progress read past an append in progress, and rolls back
#     after a later claim read on: its range is read again, below where
#     the later claim read;
#   - a claim hands out a hole and claims again in the same transaction,
#     which then rolls back: the hole is back;
#   - a hole that stays open while later holes are handed out.
#
# Then, with a snapshot held, claims of the topic and across all topics
# read a bounded number of index entries however many holes were handed
# out since.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('hole_marks');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'krizaka_outbox'
autovacuum = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION krizaka_outbox;
	SELECT outbox.subscribe('g', 's');
});

my $a = $node->background_psql('app');
my $b = $node->background_psql('app');

# A claim in session $s: the n of what it handed out, in position order,
# completed at once unless $keep.
sub claim
{
	my ($s, $owner, $keep) = @_;
	my $done = $keep ? '' : qq{, outbox.complete(c.id, '$owner', 's')};
	my $out = $s->query_safe(qq{
		SELECT coalesce(string_agg(c.payload->>'n', ' ' ORDER BY c.seq), '')
		  FROM (SELECT c.*$done FROM outbox.claim('$owner', 'g', 10, 30, 's') c) c});
	chomp $out;
	return $out;
}

# Append message $n in session $s (committed at once without one).
sub append
{
	my ($s, $n) = @_;
	my $sql = qq{SELECT outbox.append('g', 'evt.g.v1', '{"n": "$n"}')};
	if (defined $s) { $s->query_safe($sql); }
	else { $node->safe_psql('app', $sql); }
	return;
}

sub holes
{
	return $node->safe_psql('app', q{
		SELECT count(*) FROM outbox.subscription_state WHERE hole});
}

is(claim($a, 'a'), '', 'a first claim of session a finds nothing');

#
# A rolled-back claim's range, read again below the later claim's range.
#
my $p = $node->background_psql('app');
$p->query_safe('BEGIN');
append($p, 'h1');
append(undef, 'm1');
$b->query_safe('BEGIN');
is(claim($b, 'b', 1), 'm1', 'session b claims m1 and passes h1, in progress, in a transaction');
append(undef, 'm2');
is(claim($a, 'a'), 'm2', 'session a reads on past b\'s range');
$b->query_safe('ROLLBACK');
is(claim($a, 'a'), 'm1', 'b rolled back: a reads its range again and passes h1 again');
is(holes(), '1', 'h1 is a hole');
$p->query_safe('COMMIT');
is(claim($a, 'a'), 'h1', 'h1 committed: session a hands it out');

#
# A hole handed out, then a second claim in the same transaction, which
# rolls back.
#
$p->query_safe('BEGIN');
append($p, 'h2');
is(claim($a, 'a'), '', 'h2 in progress: nothing');
is(holes(), '1', 'h2 is a hole');
$p->query_safe('COMMIT');
$a->query_safe('BEGIN');
is(claim($a, 'a', 1), 'h2', 'in a transaction: h2 handed out');
append(undef, 'm3');
is(claim($a, 'a', 1), 'm3', 'and m3 by a second claim of that transaction');
$a->query_safe('ROLLBACK');
is(claim($a, 'a'), 'h2 m3', 'rolled back: h2 and m3 are handed out again');

#
# A hole that stays open while later ones are handed out.
#
$p->query_safe('BEGIN');
append($p, 'h4');
is(claim($a, 'a'), '', 'h4 in progress: nothing');
my $q = $node->background_psql('app');
for my $i (1 .. 3)
{
	$q->query_safe('BEGIN');
	append($q, "x$i");
	is(claim($a, 'a'), '', "x$i in progress: nothing");
	$q->query_safe('COMMIT');
	is(claim($a, 'a'), "x$i", "x$i committed: handed out while h4 stays open");
}
$p->query_safe('COMMIT');
is(claim($a, 'a'), 'h4', 'h4 committed: handed out');
is(holes(), '0', 'no hole is left');

#
# Under a held snapshot: 300 holes handed out, then claims read a few
# entries of the holes' index.
#
my $hold = $node->background_psql('app');
$hold->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$hold->query_safe('SELECT count(*) FROM outbox.message');
for my $i (1 .. 300)
{
	$q->query_safe('BEGIN');
	append($q, "y$i");
	claim($a, 'a');
	$q->query_safe('COMMIT');
	claim($a, 'a');
}
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE NOT EXISTS (
	SELECT FROM outbox.subscription_state x WHERE x.id = message.id)}),
	$node->safe_psql('app', q{SELECT count(*) FROM outbox.message}),
	'every y was handed out and completed');
$a->query_safe('SELECT pg_stat_force_next_flush()');
my $reads = q{SELECT idx_tup_read FROM pg_stat_user_indexes
	WHERE indexrelname = 'subscription_state_hole_idx'};
my $before = $a->query_safe($reads);
claim($a, 'a') for 1 .. 20;
$a->query_safe('SELECT pg_stat_force_next_flush()');
my $after = $node->safe_psql('app', $reads);
cmp_ok($after - $before, '<', 100,
	'20 claims under the snapshot read ' . ($after - $before)
	  . ' entries of the holes\' index, not the 300 handed out each');

# the claim across all topics, which asks first which subscriptions of
# the name have work (holes among it, and the frontier)
my $frontier_reads = q{SELECT sum(idx_tup_read) FROM pg_stat_user_indexes
	WHERE indexrelname IN ('subscription_state_hole_idx', 'subscription_frontier_pkey')};
$before = $a->query_safe($frontier_reads);
for (1 .. 20)
{
	$a->query_safe(q{SELECT count(*) FROM outbox.claim('a', NULL, 10, 30, 's')});
}
$a->query_safe('SELECT pg_stat_force_next_flush()');
$after = $node->safe_psql('app', $frontier_reads);
cmp_ok($after - $before, '<', 200,
	'20 claims across all topics under the snapshot read ' . ($after - $before)
	  . ' entries of the holes\' and the frontier\'s indexes');
$q->query_safe('BEGIN');
append($q, 'z1');
is($a->query_safe(q{SELECT count(*) FROM outbox.claim('a', NULL, 10, 30, 's')}), '0',
	'across all topics: z1 in progress, nothing');
$q->query_safe('COMMIT');
is($a->query_safe(q{SELECT string_agg(payload->>'n', ' ') FROM outbox.claim('a', NULL, 10, 30, 's')}),
	'z1', 'across all topics: z1 committed, handed out');
$hold->query_safe('COMMIT');

$_->quit for ($a, $b, $p, $q, $hold);
$node->stop;
done_testing();
