# A backlog of retried messages drained under a held snapshot by a new
# connection per claim (a consumer that connects for each batch, or a pool
# whose server connections each take turns): each claim follows the hint
# the claims before it published beside the topic's claim position, so it
# does not read the topic's deferred messages from the first entry, past
# every one completed before it (src/outbox_claim_hint.c).  Counted in
# index entries read; the hint must still cost no message: a lease that
# runs out before the hint is handed out by a later connection within the
# second the hints are followed.  The same for the claim across all topics,
# and for a named subscription's due hint (src/outbox_subs_hints.c).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('sharedhint', '', "autovacuum = off\n");
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION krizaka_outbox');

my $total = 4000;

retried_backlog($node, 'app', 'r', $total);
# the snapshot held through the drain
my $held = held_snapshot($node, 'app');

# one claim of 50 of topic $topic (undef: across all topics; in
# subscription $sub) on a connection of its own, each message completed; returns the number claimed
sub claim_of
{
	my ($topic, $sub) = @_;
	my $arg = defined $sub ? ", '$sub'" : '';
	my $of = defined $topic ? "'$topic'" : 'NULL';
	my ($out) = split /\n/, $node->safe_psql('app', qq{
		SELECT count(*) FROM (SELECT c.id, outbox.complete(c.id, 'a'$arg)
		                        FROM outbox.claim('a', $of, 50, 60$arg) c) c;
		SELECT pg_stat_force_next_flush();
	});
	return $out;
}
sub claim { return claim_of('r') }

# index entries of table outbox.$table read so far
sub reads
{
	my ($table) = @_;
	return $node->safe_psql('app', qq{
		SELECT sum(idx_tup_read) FROM pg_stat_user_indexes
		 WHERE relid = 'outbox.$table'::regclass});
}

# the first half, 40 claims of 50, each on a new connection
my $before = reads('message');
my $claimed = 0;
$claimed += claim() for 1 .. $total / 100;
my $read = reads('message') - $before;
is($claimed, $total / 2, 'the first half is claimed in claims of 50, each by a new connection');
# From the first entry each claim would pass every message completed before
# it: about 50 * (0 + 50 + ... + 1,950), 39,000 entries, 40 claims of 50 on
# top; each follows the others' hint and reads a batch and little more, and
# at most one of them a second reads from the first entry.
cmp_ok($read, '<', 20000,
	"the 40 new connections read a bounded number of index entries ($read)");

# a lease that runs out before the hint: taken by one connection and left,
# then handed out again by a later one within the second
my $left = $node->safe_psql('app', q{
	SELECT string_agg(id::text, ',') FROM outbox.claim('gone', 'r', 5, 10)});
my @left = split /,/, $left;
is(scalar(@left), 5, 'a consumer took 5 messages and went away');
$claimed += claim() for 1 .. 4;
# its leases run out (moved back instead of waited for)
$node->safe_psql('app', qq{
	UPDATE outbox.message SET leased_until = now() - interval '1 second'
	 WHERE id = ANY (string_to_array('$left', ',')::uuid[])});
my $deadline = time() + 30;
my $again = 0;
while (time() < $deadline)
{
	$again = $node->safe_psql('app', qq{
		SELECT count(*) FROM outbox.message
		 WHERE id = ANY (string_to_array('$left', ',')::uuid[]) AND delivered_at IS NOT NULL});
	last if $again == 5;
	claim();
}
is($again, '5', 'the 5 messages whose lease ran out were handed out again and completed');

# the rest, every message delivered once
$deadline = time() + 60;
while (time() < $deadline)
{
	last if claim() == 0
	  && $node->safe_psql('app', q{
		SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL}) eq '0';
}
is($node->safe_psql('app', q{
	SELECT count(*) FILTER (WHERE delivered_at IS NOT NULL), count(*) FILTER (WHERE dead_at IS NOT NULL)
	  FROM outbox.message}), "$total|0", 'every message was delivered, none dead');

#
# The claim across all topics on a new connection each time: its look for
# topics with deferred messages due steps over the topics whose hints the
# backends published, and it reads them from those hints.
#
retried_backlog($node, 'app', 'q', $total);
$before = reads('message');
$claimed = 0;
$claimed += claim_of(undef) for 1 .. $total / 100;
$read = reads('message') - $before;
is($claimed, $total / 2, 'across all topics: the first half of topic q is claimed, each claim by a new connection');
# Each look for due topics from the first entry passed topic r's 4,000
# completed messages and each claim topic q's from its first entry: 273,183
# entries; stepping over the topics with published hints and following
# those, 30,311.
cmp_ok($read, '<', 60000,
	"across all topics: the 40 new connections read a bounded number of index entries ($read)");
$deadline = time() + 60;
while (time() < $deadline)
{
	last if claim_of(undef) == 0
	  && $node->safe_psql('app', q{
		SELECT count(*) FROM outbox.message WHERE topic = 'q' AND delivered_at IS NULL}) eq '0';
}
is($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.message WHERE topic = 'q' AND delivered_at IS NULL}),
	'0', 'across all topics: every message of topic q was delivered');

#
# A named subscription: each claim of its retried rows on a new connection
# follows the due hint the claims before it published.
#
retried_backlog($node, 'app', 's', $total, 'n');

sub claim_n { return claim_of('s', 'n') }

$before = reads('subscription_state');
$claimed = 0;
$claimed += claim_n() for 1 .. $total / 100;
$read = reads('subscription_state') - $before;
is($claimed, $total / 2, 'subscription n: the first half is claimed, each claim by a new connection');
cmp_ok($read, '<', 20000,
	"subscription n: the 40 new connections read a bounded number of index entries ($read)");
$deadline = time() + 60;
while (time() < $deadline)
{
	last if claim_n() == 0
	  && $node->safe_psql('app', q{
		SELECT count(*) FROM outbox.subscription_state
		 WHERE sub_id = (SELECT sub_id FROM outbox.subscription WHERE name = 'n')}) eq '0';
}
is($node->safe_psql('app', q{
	SELECT pending, dead FROM outbox.subscription_stats WHERE subscription = 'n'}),
	'0|0', 'subscription n: every message is done');
$held->quit;

done_testing();
