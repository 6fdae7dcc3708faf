# The queue engine reads each topic as a stream from its claim position.
# While a snapshot is held, claims do not walk the messages finished since
# (counted in index entries read, not in time), the longest topic's too;
# the claim position never passes a message of a prepared transaction,
# before or after a restart, without keeping it as a hole; a crashed
# backend's appends leave nothing behind and nothing skipped.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('stream', '', "max_prepared_transactions = 4\nautovacuum = off\nrestart_after_crash = on\n");
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION krizaka_outbox');

# claim up to $n of topic $t as $owner and complete them; returns the payloads' n
sub drain
{
	my ($t, $n) = @_;
	return $node->safe_psql('app', qq{
		WITH c AS (SELECT * FROM outbox.claim('w', '$t', $n, 30))
		SELECT coalesce(string_agg(payload->>'n', ' ' ORDER BY seq), '')
		  FROM c WHERE outbox.complete(c.id, 'w')});
}

# In one session, $rounds claims of 50 of topic $t (an SQL expression),
# each completed in its statement; returns how many found a full batch and
# how many index entries the last one read.  A session flushes its
# statistics when it goes idle, at most once a second unless asked: ask
# before each reading, so that they fall on the right side.
sub drain_rounds
{
	my ($t, $rounds) = @_;
	my $session = $node->background_psql('app');
	my $sql = qq{
		WITH c AS (SELECT * FROM outbox.claim('w', $t, 50, 30))
		SELECT count(*) FROM c WHERE outbox.complete(c.id, 'w')};
	my $full = 0;
	for my $round (1 .. $rounds - 1)
	{
		$full++ if $session->query_safe($sql) eq '50';
	}
	$session->query_safe('SELECT pg_stat_force_next_flush()');
	my $before = message_index_reads($node, 'app');
	$full++ if $session->query_safe($sql) eq '50';
	$session->query_safe('SELECT pg_stat_force_next_flush()');
	my $last = message_index_reads($node, 'app') - $before;
	$session->quit;
	return ($full, $last);
}

#
# A held snapshot: 20,000 messages claimed and completed 50 at a time while a
# REPEATABLE READ transaction that read another table stays open.  With
# autovacuum off nothing is removed either way; the stream index is read
# from the claim position, so a claim reads about the entries of its own
# batch, not those of every message finished before it.
#
$node->safe_psql('app', q{
	SELECT outbox.append_batch('held', 'evt.held.v1', array_agg(jsonb_build_object('n', g) ORDER BY g))
	  FROM generate_series(1, 20000) g});
my $holder = $node->background_psql('app');
$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$holder->query_safe('SELECT count(*) FROM pg_class');
my $reads_before = message_index_reads($node, 'app');
my ($claims, $last_reads) = drain_rounds(q{'held'}, 400);
is($claims, 400, 'every claim found a full batch while the snapshot was held');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL}),
	'0', 'all 20,000 messages delivered');
my $per_claim = (message_index_reads($node, 'app') - $reads_before) / 400;
cmp_ok($per_claim, '<', 400,
	"on average a claim and its completions read $per_claim index entries (its batch, not the history)");
cmp_ok($last_reads, '<', 400,
	"the last claim, after 19,950 messages finished under the snapshot, read $last_reads");
$holder->query_safe('COMMIT');
$holder->quit;

#
# The longest topic there is, 200 characters of four bytes (800 bytes),
# keeps a claim position as a short one does: with a snapshot held, its
# last claim reads about its own batch, not the 1,950 messages finished
# before it.
#
my $long = q{repeat(U&'\+01F600', 200)};
is($node->safe_psql('app', qq{SELECT length($long) || ' ' || octet_length($long)}),
	'200 800', 'the topic has 200 characters, 800 bytes');
$node->safe_psql('app', qq{
	SELECT outbox.append_batch($long, 'evt.long.v1', array_agg(jsonb_build_object('n', g) ORDER BY g))
	  FROM generate_series(1, 2000) g});
$holder = $node->background_psql('app');
$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$holder->query_safe('SELECT count(*) FROM pg_class');
($claims, $last_reads) = drain_rounds($long, 40);
is($claims, 40, 'every claim of the 800-byte topic found a full batch');
is($node->safe_psql('app', qq{SELECT count(*) FROM outbox.message WHERE topic = $long AND delivered_at IS NULL}),
	'0', 'all 2,000 messages of the 800-byte topic delivered');
cmp_ok($last_reads, '<', 400,
	"the last claim of the 800-byte topic, after 1,950 messages finished under the snapshot, read $last_reads");
$holder->query_safe('COMMIT');
$holder->quit;

#
# An append that took its position first and commits last is claimed once
# it commits, also when its transaction was prepared; a prepared
# transaction that survives a restart (whose record shared memory lost)
# holds every claim position of its database back until it is resolved.
#
$node->safe_psql('app', q{
	BEGIN;
	SELECT outbox.append('tp', 'evt.tp.v1', '{"n": "prepared"}');
	PREPARE TRANSACTION 'early';
});
$node->safe_psql('app', q{SELECT outbox.append('tp', 'evt.tp.v1', '{"n": "later"}')});
is(drain('tp', 10), 'later', 'the committed message is claimed');
is(drain('tp', 10), '', 'the prepared one is not visible yet');
$node->safe_psql('app', q{COMMIT PREPARED 'early'});
is(drain('tp', 10), 'prepared', 'the prepared message is claimed once committed');

$node->safe_psql('app', q{
	BEGIN;
	SELECT outbox.append('tp', 'evt.tp.v1', '{"n": "across a restart"}');
	PREPARE TRANSACTION 'across';
});
$node->safe_psql('app', q{SELECT outbox.append('tp', 'evt.tp.v1', '{"n": "before"}')});
is(drain('tp', 10), 'before', 'before the restart: the committed message');
$node->restart;
$node->safe_psql('app', q{SELECT outbox.append('tp', 'evt.tp.v1', '{"n": "after"}')});
is(drain('tp', 10), 'after', 'after the restart: the new message');
$node->safe_psql('app', q{SELECT outbox.append('tp', 'evt.tp.v1', '{"n": "meanwhile"}')});
is(drain('tp', 10), 'meanwhile', 'claims go on while the prepared transaction is open');
$node->safe_psql('app', q{COMMIT PREPARED 'across'});
is(drain('tp', 10), 'across a restart', 'the message prepared before the restart is claimed');
is(drain('tp', 10), '', 'and nothing else is left');

#
# A prepared transaction that appended nothing (XA, JTA), still open
# across a restart, holds no claim position back: claims read from their
# position, not the topic's history.
#
$node->safe_psql('app', q{
	BEGIN;
	CREATE TABLE public.xa_unrelated (i integer);
	PREPARE TRANSACTION 'unrelated';
});
$node->safe_psql('app', q{
	SELECT outbox.append_batch('up', 'evt.up.v1', array_agg(jsonb_build_object('n', g) ORDER BY g))
	  FROM generate_series(1, 2000) g});
$node->restart;
my ($up_claims, $up_reads) = drain_rounds(q{'up'}, 40);
is($up_claims, 40, 'with an unrelated prepared transaction open across a restart, every claim found a full batch');
cmp_ok($up_reads, '<', 400,
	"and the last claim, after 1,950 messages finished, read $up_reads index entries");
$node->safe_psql('app', q{ROLLBACK PREPARED 'unrelated'});

#
# An append left open (a session idle in its transaction) and a prepared
# one: once the claim position has stood at them for a second, claims pass
# them and keep them as holes, so the messages finished after them cost a
# claim nothing; each is claimed once it commits, before the later
# messages of its ordering key, and one rolled back leaves nothing.
#
my $idle = $node->background_psql('app');
$idle->query_safe(q{BEGIN; SELECT outbox.append('ti', 'evt.ti.v1', '{"n": "idle"}', NULL, NULL, 'k')});
$node->safe_psql('app', q{
	BEGIN;
	SELECT outbox.append('ti', 'evt.ti.v1', '{"n": "prepared"}', NULL, NULL, 'p');
	PREPARE TRANSACTION 'held';
});
my $undone = $node->background_psql('app');
$undone->query_safe(q{BEGIN; SELECT outbox.append('ti', 'evt.ti.v1', '{"n": "rolled back"}')});
$node->safe_psql('app', q{
	SELECT outbox.append_batch('ti', 'evt.ti.v1', array_agg(jsonb_build_object('n', g) ORDER BY g))
	  FROM generate_series(1, 2000) g});
my ($ti_claims) = drain_rounds(q{'ti'}, 40);
is($ti_claims, 40, 'with three appends in progress before them, 2,000 messages drain in full batches');

# the rows an empty claim of 'ti' fetches through indexes, in a transaction
# of its own
my $prober = $node->background_psql('app');
sub empty_claim_reads
{
	$prober->query_safe('BEGIN');
	$prober->query_safe(q{SELECT count(*) FROM outbox.claim('w', 'ti', 50, 30)});
	my $reads = $prober->query_safe(q{
		SELECT idx_tup_fetch FROM pg_stat_xact_user_tables
		 WHERE schemaname = 'outbox' AND relname = 'message'});
	$prober->query_safe('COMMIT');
	return $reads;
}
my $reads = empty_claim_reads();
my $deadline = time + 60;
while ($reads >= 400 && time < $deadline)
{
	select(undef, undef, undef, 0.05);
	$reads = empty_claim_reads();
}
cmp_ok($reads, '<', 400,
	"a second later, an empty claim no longer reads the 2,000 messages finished after them: $reads rows");

# a producer of key k waits for the open append of k; it commits after it
my $follower = $node->background_psql('app');
$follower->query_until(qr/started/, q{
	\echo started
	BEGIN;
	SELECT outbox.append('ti', 'evt.ti.v1', '{"n": "k after"}', NULL, NULL, 'k');
	COMMIT;
});
ok(wait_for($node, 'app', q{
	SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted},
	'1', 60), 'the producer of the same key waits for the open append');
$idle->query_safe('COMMIT');
$idle->quit;
$follower->quit;

# claim until something comes: a hole is found again at the next search
sub drain_next
{
	my ($n) = @_;
	my $got = '';
	my $until = time + 60;
	while ($got eq '' && time < $until)
	{
		$got = drain('ti', $n);
		select(undef, undef, undef, 0.01) if $got eq '';
	}
	return $got;
}
is(drain_next(10), 'idle', 'the open append is claimed once it commits, alone: the later message of its key waits');
is(drain_next(10), 'k after', 'then the later message of its key');
$node->safe_psql('app', q{COMMIT PREPARED 'held'});
is(drain_next(10), 'prepared', 'the prepared append is claimed once committed');
$undone->query_safe('ROLLBACK');
$undone->quit;
$prober->quit;
is(drain('ti', 10), '', 'and the rolled back one left nothing');

#
# A backend killed in the middle of a transaction that appended: the
# postmaster restarts every process and empties shared memory; the
# messages committed before are all claimed once, the lost ones never.
#
$node->safe_psql('app', q{
	SELECT outbox.append('crash', 'evt.crash.v1', jsonb_build_object('n', g)) FROM generate_series(1, 3) g});
my $victim = $node->background_psql('app', on_error_stop => 0);
$victim->query_safe(q{BEGIN; SELECT outbox.append('crash', 'evt.crash.v1', '{"n": "lost"}')});
my $vpid = $victim->query_safe('SELECT pg_backend_pid()');
$node->safe_psql('app', q{SELECT outbox.append('crash', 'evt.crash.v1', '{"n": 4}')});
is(drain('crash', 2), '1 2', 'two of the committed messages before the crash');
kill 'KILL', $vpid;
eval { $victim->quit };
ok(wait_for($node, 'app', 'SELECT 1', '1', 60), 'the server accepts connections after the crash');
$node->safe_psql('app', q{SELECT outbox.append('crash', 'evt.crash.v1', '{"n": 5}')});
is(drain('crash', 10), '3 4 5', 'after the crash: the rest, once, and not the lost one');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE topic = 'crash'}),
	'5', 'the lost append left no message');

$node->stop;
done_testing();
