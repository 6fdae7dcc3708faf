# A backlog of deferred messages (retried, and scheduled ones) drained under
# a held snapshot, in the default subscription and in a named one: a claim
# that filled its batch with deferred messages (due rows) leaves a hint,
# and the next claim of the backend reads them on from it instead of
# passing, again, the index entry of every message completed before
# (src/outbox_claim_hint.c, SubsDueHint in src/outbox_subs_marks.c).  The
# drain must read a bounded number of index entries per claim, and the
# hint must never cost a message: a lease that runs out before the hint
# and a message moved before it by hand are handed out by the same
# session's later claims, within the second a hint is followed, and so is
# a message revived meanwhile.  Claims of the drained topic read from the
# first entry at most once a second.  A key with a run of deferred
# messages gets no hint, so that each claim takes its next message.  The
# claim across all topics follows each topic's hint, and looks for topics
# with deferred messages due once a second while it does.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = PostgreSQL::Test::Cluster->new('claim_hint');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'krizaka_outbox'
autovacuum = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION krizaka_outbox');

my $total = 5000;

retried_backlog($node, 'app', 'r', $total);
# the snapshot held through the drain
my $held = held_snapshot($node, 'app');

my $a = $node->background_psql('app');
my $other = $node->background_psql('app');

# one claim of 50 in session $s as owner a, each message completed at once
# unless $keep; returns the number claimed
sub claim
{
	my ($s, $batch, $keep) = @_;
	my $done = $keep ? '' : q{, outbox.complete(c.id, 'a')};
	my $out = $s->query_safe(qq{
		SELECT count(*) FROM (SELECT c.id$done FROM outbox.claim('a', 'r', $batch, 60) c) c});
	chomp $out;
	return $out;
}

# index entries of outbox.message read so far, session a's counted
sub reads
{
	$a->query_safe('SELECT pg_stat_force_next_flush()');
	return $node->safe_psql('app', q{
		SELECT sum(idx_tup_read) FROM pg_stat_user_indexes
		 WHERE schemaname = 'outbox' AND relname = 'message'});
}

# The first half of the backlog, with the entries read counted.
my $before = reads();
my $claimed = 0;
$claimed += claim($a, 50) for 1 .. $total / 100;
my $reads = reads() - $before;
is($claimed, $total / 2, 'the first half of the backlog is claimed in claims of 50');
# Without the hint each claim passes the entries of every message completed
# before it: the 50 claims read 71,250 entries (10,049 with it; a claim
# from the first entry happens at most once a second).
cmp_ok($reads, '<', 20000,
	"the 50 claims read a bounded number of index entries under the held snapshot ($reads)");

# A lease before the hint that runs out: session other takes 5 messages,
# the drain goes on past them, and their lease runs out (moved to the past
# by hand instead of waited for); session a hands them out again.
my $taken = $other->query_safe(q{
	SELECT string_agg(c.id::text, ',') FROM outbox.claim('b', 'r', 5, 10) c});
chomp $taken;
is(scalar(split /,/, $taken), 5, 'another owner leases 5 messages');
is(claim($a, 50), 50, 'session a claims on past them');
$node->safe_psql('app', q{
	UPDATE outbox.message SET leased_until = now() - interval '1 second'
	 WHERE lease_owner = 'b' AND delivered_at IS NULL});

# A message revived (due now, after the hint), and one moved two hours back
# by hand: before session a's hint.
$node->safe_psql('app', q{
	UPDATE outbox.message SET dead_at = now(), last_error = 'gave up'
	 WHERE id = (SELECT id FROM outbox.message WHERE delivered_at IS NULL
	               AND leased_until IS NULL ORDER BY available_at DESC LIMIT 1);
});
my $revived = $node->safe_psql('app', q{SELECT id FROM outbox.message WHERE dead_at IS NOT NULL});
$node->safe_psql('app', qq{SELECT outbox.retry_dead('$revived')});
my $moved = $node->safe_psql('app', qq{
	UPDATE outbox.message SET available_at = now() - interval '2 hours'
	 WHERE id = (SELECT id FROM outbox.message WHERE delivered_at IS NULL
	               AND leased_until IS NULL AND id <> '$revived'
	             ORDER BY available_at DESC LIMIT 1)
	RETURNING id});

# Session a drains the rest; what runs out of lease or falls before its
# hint comes within the second a hint is followed.
my $deadline = time() + 60;
while (time() < $deadline)
{
	last if $node->safe_psql('app', q{
		SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL}) eq '0';
	claim($a, 50);
}
is($node->safe_psql('app', q{
	SELECT count(*) FILTER (WHERE delivered_at IS NOT NULL) || ' delivered, '
	    || count(*) FILTER (WHERE dead_at IS NOT NULL) || ' dead'
	  FROM outbox.message}), "$total delivered, 0 dead",
	'every message of the backlog is delivered under the held snapshot');
# Claims of the drained topic: from the first entry at most once a second,
# which passes the entry of every message completed under the snapshot
# (5,000 here); the others read on from the hint.
$before = reads();
claim($a, 50) for 1 .. 20;
$reads = reads() - $before;
cmp_ok($reads, '<', 12000, "20 claims of the drained topic read few index entries ($reads)");
is($node->safe_psql('app', qq{
	SELECT string_agg(lease_owner || ':' || attempts, ',' ORDER BY attempts)
	  FROM outbox.message WHERE id IN ('$revived', '$moved')}),
	'a:1,a:2', 'the revived message and the moved one were handed out to session a');
is($node->safe_psql('app', qq{
	SELECT count(*) FROM outbox.message
	 WHERE id = ANY (string_to_array('$taken', ',')::uuid[])
	   AND lease_owner = 'a' AND attempts = 3}),
	5, 'the 5 leases that ran out were handed out again to session a');

#
# The claim across all topics reads each topic's deferred messages from the
# backend's hint of it too, and while it follows hints looks for the topics
# with deferred messages due once a second: that look passes, at each
# topic, every deferred message completed under the snapshot (topic r's
# 5,000 now).
#
$node->safe_psql('app', qq{
	SELECT outbox.append_batch('x', 'evt.x.v1',
		(SELECT array_agg(pg_catalog.jsonb_build_object('n', g) ORDER BY g)
		   FROM generate_series(1, $total) g));
	DO \$\$BEGIN
		FOR i IN 1 .. 10 LOOP
			PERFORM outbox.fail(c.id, 'setup', 'target unavailable')
			   FROM outbox.claim('setup', 'x', 500, 600) c;
		END LOOP;
	END\$\$;
	UPDATE outbox.message SET available_at = available_at - interval '1 hour' WHERE topic = 'x';
});

sub claim_all
{
	my ($s) = @_;
	my $out = $s->query_safe(q{
		SELECT count(*) FROM (SELECT c.id, outbox.complete(c.id, 'a')
		                        FROM outbox.claim('a', NULL, 50, 60) c) c});
	chomp $out;
	return $out;
}

$before = reads();
my $started = time();
$claimed = 0;
$claimed += claim_all($a) for 1 .. $total / 100;
$reads = reads() - $before;
note('the 50 claims across all topics took about ' . (time() - $started) . ' s');
is($claimed, $total / 2, 'across all topics: the first half of topic x is claimed in claims of 50');
# Without the hints the 50 claims read 419,304 entries; with them 42,908,
# mostly in the looks for due topics (about one a second), and 32,887 once
# the looks stepped over the topics whose hints the backend follows.
cmp_ok($reads, '<', 150000,
	"across all topics: the 50 claims read a bounded number of index entries ($reads)");
$deadline = time() + 60;
while (time() < $deadline)
{
	last if $node->safe_psql('app', q{
		SELECT count(*) FROM outbox.message WHERE topic = 'x' AND delivered_at IS NULL}) eq '0';
	claim_all($a);
}
is($node->safe_psql('app', q{
	SELECT count(*) FILTER (WHERE delivered_at IS NOT NULL) FROM outbox.message WHERE topic = 'x'}),
	$total, 'across all topics: every message of topic x is delivered');

# A scheduled message of a new topic falls due: the claims across all topics
# find it within the second they read the topics found before.  The look
# for due topics steps over topic x, whose hint the backend follows, so
# one topic sorts before it and one after.
$node->safe_psql('app', q{
	SELECT outbox.append(t, 'evt.y.v1', '{}', available_at => now() + interval '1 hour')
	  FROM unnest(ARRAY['w', 'y']) t;
	UPDATE outbox.message SET available_at = now() - interval '1 second' WHERE topic IN ('w', 'y');
});
$deadline = time() + 10;
my $found = 0;
while (time() < $deadline && $found < 2)
{
	$found += claim_all($a);
}
is($found, 2, 'across all topics: a scheduled message of each new topic is handed out once due');

# A key with a run of scheduled messages before a backlog of others: a
# claim takes its head and passes the rest, which wait for it.  The topic
# gets no hint (a hint after them would leave them behind for a second
# each), so each claim of the drain takes the key's next message.
$node->safe_psql('app', q{
	SELECT count(outbox.append('k', 'evt.k.v1', pg_catalog.jsonb_build_object('n', g),
	                           available_at => now() + interval '1 hour' + g * interval '1 ms',
	                           ordering_key => CASE WHEN g <= 100 THEN 'hot' END))
	  FROM generate_series(1, 1100) g;
	UPDATE outbox.message SET available_at = available_at - interval '2 hours'
	 WHERE topic = 'k';
});
is($node->safe_psql('app', q{
	SELECT count(*) FILTER (WHERE deferred AND dead_at IS NULL AND available_at <= now())
	  FROM outbox.message WHERE topic = 'k'}), 1100, 'topic k has 1,100 scheduled messages due, the first 100 of key hot');
my $claims = 0;
while ($claims < 100)
{
	$claims++;
	$a->query_safe(q{
		SELECT count(*) FROM (SELECT outbox.complete(c.id, 'a') FROM outbox.claim('a', 'k', 50, 60) c) c});
	last if $node->safe_psql('app', q{
		SELECT count(*) FROM outbox.message
		 WHERE topic = 'k' AND ordering_key IS NULL AND delivered_at IS NULL}) eq '0';
}
my $hot = $node->safe_psql('app', q{
	SELECT count(*) FROM outbox.message
	 WHERE topic = 'k' AND ordering_key = 'hot' AND delivered_at IS NOT NULL});
cmp_ok($hot, '>=', $claims - 1,
	"while the others drain ($claims claims), each claim takes the key's next message ($hot delivered)");

#
# A named subscription: its due rows are read the same way.
#
retried_backlog($node, 'app', 's', $total, 'n');

# index entries of outbox.subscription_state read so far
sub state_reads
{
	$a->query_safe('SELECT pg_stat_force_next_flush()');
	return $node->safe_psql('app', q{
		SELECT sum(idx_tup_read) FROM pg_stat_user_indexes
		 WHERE schemaname = 'outbox' AND relname = 'subscription_state'});
}

sub claim_n
{
	my ($s) = @_;
	my $out = $s->query_safe(q{
		SELECT count(*) FROM (SELECT outbox.complete(c.id, 'a', 'n')
		                        FROM outbox.claim('a', 's', 50, 60, 'n') c) c});
	chomp $out;
	return $out;
}

$before = state_reads();
$claimed = 0;
$claimed += claim_n($a) for 1 .. $total / 100;
$reads = state_reads() - $before;
is($claimed, $total / 2, 'subscription n: the first half is claimed in claims of 50');
# 22,549: each of the 2,500 completions looks its row up by id twice (the
# look for its keys, then its deletion), each time passing the 4 index
# entries of the row's versions (its claims and failures).  The
# look for keys read the (here empty) index of keyed rows instead when its
# plan was made on empty tables (12,549), and read it whole where it had
# keyed rows.  Claims that pass the entries of every message completed
# before them read O(n^2) (the default subscription's above: 71,250).
cmp_ok($reads, '<', 30000,
	"subscription n: the 50 claims read a bounded number of index entries ($reads)");

$deadline = time() + 60;
while (time() < $deadline)
{
	last if $node->safe_psql('app', q{
		SELECT count(*) FROM outbox.subscription_state
		 WHERE sub_id = (SELECT sub_id FROM outbox.subscription WHERE name = 'n')}) eq '0';
	claim_n($a);
}
is($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.subscription_state
	 WHERE sub_id = (SELECT sub_id FROM outbox.subscription WHERE name = 'n')}),
	'0', 'subscription n: every message is done');
$before = state_reads();
claim_n($a) for 1 .. 20;
$reads = state_reads() - $before;
cmp_ok($reads, '<', 12000, "subscription n: 20 claims of the drained subscription read few index entries ($reads)");

# A key with a run of scheduled messages in a named subscription: each
# claim of the drain takes the key's next row, unblocked when its head left.
$node->safe_psql('app', q{
	SELECT outbox.subscribe('sk', 'nk');
	SELECT count(outbox.append('sk', 'evt.sk.v1', pg_catalog.jsonb_build_object('n', g),
	                           available_at => now() + interval '1 hour' + g * interval '1 ms',
	                           ordering_key => CASE WHEN g <= 100 THEN 'hot' END))
	  FROM generate_series(1, 1100) g;
});
my $nk = $node->safe_psql('app', q{SELECT sub_id FROM outbox.subscription WHERE name = 'nk'});
for (1 .. 100)
{
	last if $node->safe_psql('app', qq{
		SELECT count(*) FROM outbox.subscription_state WHERE sub_id = $nk}) eq '1100';
	$a->query_safe(q{SELECT count(*) FROM outbox.claim('a', 'sk', 50, 60, 'nk')});
}
$node->safe_psql('app', qq{
	UPDATE outbox.subscription_state SET available_at = available_at - interval '2 hours'
	 WHERE sub_id = $nk});
is($node->safe_psql('app', qq{
	SELECT count(*) FILTER (WHERE available_at <= now()) || ' due, '
	    || count(*) FILTER (WHERE blocked) || ' blocked'
	  FROM outbox.subscription_state WHERE sub_id = $nk}), '1100 due, 99 blocked',
	'subscription nk has the 1,100 messages read, 99 behind the key\'s head');
$claims = 0;
while ($claims < 100)
{
	$claims++;
	$a->query_safe(q{
		SELECT count(*) FROM (SELECT outbox.complete(c.id, 'a', 'nk')
		                        FROM outbox.claim('a', 'sk', 50, 60, 'nk') c) c});
	last if $node->safe_psql('app', qq{
		SELECT count(*) FROM outbox.subscription_state
		 WHERE sub_id = $nk AND ordering_key IS NULL}) eq '0';
}
$hot = 100 - $node->safe_psql('app', qq{
	SELECT count(*) FROM outbox.subscription_state WHERE sub_id = $nk AND ordering_key = 'hot'});
cmp_ok($hot, '>=', $claims - 1,
	"subscription nk: while the others drain ($claims claims), each claim takes the key's next message ($hot done)");

$held->query_safe('COMMIT');
$held->quit;
$a->quit;
$other->quit;
$node->stop;
done_testing();
