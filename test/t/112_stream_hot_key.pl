# One ordering key with a long run of pending messages at the claim
# position (its head leased for an hour): the claims of the topic hand out
# the other keys' messages without reading through the run (counted in
# index entries read), through the claim of the topic and the claim across
# all topics; the key's messages follow in position order once its head is
# done, and under concurrent claimers and appenders to the hot
# key every message is claimed once, each key in position order.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('hotkey', '', "autovacuum = off\n");
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION krizaka_outbox;
	CREATE TABLE public.got (n bigserial, id uuid, seq bigint, key text);
	-- claims of 50 of topic t, each completed and recorded in its own
	-- transaction, until one finds nothing; returns how many were claimed
	CREATE PROCEDURE public.drain(t text, INOUT total bigint DEFAULT 0)
	LANGUAGE plpgsql AS $$
	DECLARE
		got bigint;
	BEGIN
		LOOP
			WITH c AS (SELECT * FROM outbox.claim('w', t, 50, 30)),
			     d AS (INSERT INTO public.got (id, seq, key)
			           SELECT c.id, c.seq, c.ordering_key FROM c
			            WHERE outbox.complete(c.id, 'w') RETURNING 1)
			SELECT count(*) INTO got FROM d;
			COMMIT;
			EXIT WHEN got = 0;
			total := total + got;
		END LOOP;
	END $$;
});

# Eight claims of $batch of topic $topic (SQL: a literal or NULL) in one
# session, each completing what it got; returns the messages the claims
# got, what the eighth got, the index entries of outbox.message it read,
# and the session (for more claims by $sql).
sub eight_claims
{
	my ($topic, $batch) = @_;
	my $session = $node->background_psql('app');
	my $sql = qq{
		WITH c AS (SELECT * FROM outbox.claim('w', $topic, $batch, 30))
		SELECT count(*) FROM c WHERE outbox.complete(c.id, 'w')};
	my $claimed = 0;
	$claimed += $session->query_safe($sql) for 1 .. 7;
	$session->query_safe('SELECT pg_stat_force_next_flush()');
	my $before = message_index_reads($node, 'app');
	my $last = $session->query_safe($sql);
	$session->query_safe('SELECT pg_stat_force_next_flush()');
	my $reads = message_index_reads($node, 'app') - $before;
	return ($claimed + $last, $last, $reads, $session, $sql);
}

# How many messages recorded in public.got were claimed after a later
# message of their ordering key
sub out_of_order
{
	return $node->safe_psql('app', q{
		SELECT count(*) FROM (
		  SELECT seq, lag(seq) OVER (PARTITION BY key ORDER BY n) AS prev
		    FROM public.got WHERE key IS NOT NULL) x
		 WHERE prev > seq});
}

# 3,000 messages of key hot, then 300 of other keys and 100 without one
$node->safe_psql('app', q{
	SELECT count(*) FROM outbox.append_batch('hk', 'evt.hk.v1',
		ARRAY(SELECT pg_catalog.jsonb_build_object('n', i) FROM generate_series(1, 3000) i), 'hot');
	SELECT count(outbox.append('hk', 'evt.hk.v1', pg_catalog.jsonb_build_object('n', i),
		NULL, NULL, 'other:' || i)) FROM generate_series(1, 300) i;
	SELECT count(outbox.append('hk', 'evt.hk.v1', pg_catalog.jsonb_build_object('n', i)))
	  FROM generate_series(1, 100) i;
});
my $head = $node->safe_psql('app', q{SELECT id FROM outbox.claim('holder', 'hk', 1, 3600)});
is($node->safe_psql('app', qq{SELECT ordering_key FROM outbox.message WHERE id = '$head'}),
	'hot', 'the head of the hot key is leased for an hour');

# the other 400, in full batches; the last full claim reads few entries
my ($claimed, $last, $reads, $session, $sql) = eight_claims(q{'hk'}, 50);
is($last, '50', 'the eighth claim gets a full batch of other keys');
note("index entries read by that claim: $reads (the hot key's run: 2,999 messages)");
cmp_ok($reads, '<', 600, 'that claim does not read through the hot key\'s run');
is($session->query_safe($sql), '0', 'then nothing else is due: the hot key waits for its head');
$session->quit;
is($claimed, 400, 'every message of the other keys was claimed');

# once the head is done, the key's messages follow, one per claim, in order
$node->safe_psql('app', qq{SELECT outbox.complete('$head', 'holder')});
is($node->safe_psql('app', q{CALL public.drain('hk')}), '2999',
	'the hot key\'s other 2,999 messages are claimed');
is(out_of_order(), '0', 'in position order');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE delivered_at IS NULL}),
	'0', 'nothing is left');

# The same through the claim across all topics: topic hx, its hot key's
# head leased for an hour
$node->safe_psql('app', q{
	TRUNCATE public.got;
	SELECT count(*) FROM outbox.append_batch('hx', 'evt.hx.v1',
		ARRAY(SELECT pg_catalog.jsonb_build_object('n', i) FROM generate_series(1, 3000) i), 'hot');
	SELECT count(outbox.append('hx', 'evt.hx.v1', pg_catalog.jsonb_build_object('n', i),
		NULL, NULL, 'other:' || i)) FROM generate_series(1, 300) i;
	SELECT count(outbox.append('hx', 'evt.hx.v1', pg_catalog.jsonb_build_object('n', i)))
	  FROM generate_series(1, 100) i;
});
$head = $node->safe_psql('app', q{SELECT id FROM outbox.claim('holder', 'hx', 1, 3600)});
($claimed, $last, $reads, $session, $sql) = eight_claims('NULL', 50);
is($last, '50', 'across all topics, the eighth claim gets a full batch of other keys');
note("index entries read by that claim across all topics: $reads");
cmp_ok($reads, '<', 600, 'that claim does not read through the hot key\'s run either');
is($session->query_safe($sql), '0', 'then nothing else is due across all topics');
$session->quit;
is($claimed, 400, 'every message of the other keys was claimed across all topics');
$node->safe_psql('app', qq{SELECT outbox.complete('$head', 'holder')});
is($node->safe_psql('app', q{CALL public.drain(NULL)}), '2999',
	'the hot key\'s other 2,999 messages are claimed across all topics');
is(out_of_order(), '0', 'in position order');

# Sixteen hot keys at once, two of them 200 characters long (one of
# four-byte characters: 800 bytes), each with 300 messages behind its head
# leased for an hour: the claims of the topic and across all topics still
# hand out the other keys' messages without reading through the runs.
# Then one head is deleted by hand: the key is known by its first pending
# message, which is gone, and the claims must still hand out that key's
# messages in order.
my @hot = map { "'h$_'" } 1 .. 14;
push @hot, q{pg_catalog.repeat('l', 200)}, q{pg_catalog.repeat(pg_catalog.chr(128273), 200)};
$node->safe_psql('app', 'TRUNCATE public.got');
for my $k (0 .. $#hot)
{
	$node->safe_psql('app', qq{
		SELECT count(*) FROM outbox.append_batch('hm', 'evt.hm.v1',
			ARRAY(SELECT pg_catalog.jsonb_build_object('n', i) FROM generate_series(1, 300) i),
			$hot[$k])});
}
$node->safe_psql('app', q{
	SELECT count(outbox.append('hm', 'evt.hm.v1', pg_catalog.jsonb_build_object('n', i),
		NULL, NULL, 'other:' || i)) FROM generate_series(1, 300) i;
	SELECT count(outbox.append('hm', 'evt.hm.v1', pg_catalog.jsonb_build_object('n', i)))
	  FROM generate_series(1, 100) i;
});
is($node->safe_psql('app', q{
	SELECT count(DISTINCT ordering_key) FROM outbox.claim('holder', 'hm', 16, 3600)}),
	'16', 'the heads of the sixteen hot keys are leased for an hour');
for my $across (0, 1)
{
	my $topic = $across ? 'NULL' : q{'hm'};
	my $what = $across ? 'across all topics' : 'of the topic';
	($claimed, $last, $reads, $session) = eight_claims($topic, 25);
	is($last, '25', "with sixteen hot keys, the eighth claim $what gets a full batch");
	note("index entries read by that claim $what: $reads (the hot keys' runs: 4,784 messages)");
	cmp_ok($reads, '<', 600, "that claim $what does not read through the hot keys' runs");
	$session->quit;
	is($claimed, 200, "the claims $what got 200 messages of the other keys");
}
$node->safe_psql('app', q{
	DELETE FROM outbox.message WHERE lease_owner = 'holder' AND ordering_key = 'h1'});
$node->safe_psql('app', q{
	SELECT count(outbox.complete(id, 'holder')) FROM outbox.message
	 WHERE lease_owner = 'holder' AND delivered_at IS NULL AND topic = 'hm'});
is($node->safe_psql('app', q{CALL public.drain('hm')}), '4784',
	'the rest of the topic is claimed: the hot keys\' runs and the other keys');
is(out_of_order(), '0', 'each key in position order');
is($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.message WHERE topic = 'hm' AND delivered_at IS NULL}),
	'0', 'nothing of the topic is left');

# Concurrently: 1,000 messages of key hot2 whose head's lease ends in 2 s
# (its holder is gone), appenders to hot2 and to 20 other keys, and four
# claimers, of the topic and across all topics, that record what they
# complete.
$node->safe_psql('app', q{
	TRUNCATE public.got;
	SELECT count(*) FROM outbox.append_batch('hc', 'evt.hc.v1',
		ARRAY(SELECT pg_catalog.jsonb_build_object('n', i) FROM generate_series(1, 1000) i), 'hot2');
	SELECT count(*) FROM outbox.claim('gone', 'hc', 1, 10);
	UPDATE outbox.message SET leased_until = pg_catalog.clock_timestamp() + interval '2 s'
	 WHERE lease_owner = 'gone';
});
my $dir = $node->basedir;
append_to_file("$dir/append.sql", q{
\set k random(1, 20)
SELECT outbox.append('hc', 'evt.hc.v1', '{}', NULL, NULL, 'k:' || :k);
SELECT outbox.append('hc', 'evt.hc.v1', '{}', NULL, NULL, 'hot2');
});
append_to_file("$dir/record.sql", q{
INSERT INTO public.got (id, seq, key)
SELECT c.id, c.seq, c.ordering_key FROM outbox.claim('w', 'hc', 20, 30) c
 WHERE outbox.complete(c.id, 'w');
});
append_to_file("$dir/record_any.sql", q{
INSERT INTO public.got (id, seq, key)
SELECT c.id, c.seq, c.ordering_key FROM outbox.claim('w', NULL, 20, 30) c
 WHERE outbox.complete(c.id, 'w');
});
my $connstr = $node->connstr('app');
my @runs;
for my $args ([ '-c', '2', '-T', '6', '-R', '300', '-f', "$dir/append.sql" ],
	[ '-c', '4', '-j', '2', '-T', '7', '-f', "$dir/record.sql", '-f', "$dir/record_any.sql" ])
{
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ 'pgbench', '-n', @$args, $connstr ], '>', \$out, '2>', \$err);
	push @runs, sub { my $ok = $h->finish; diag($err) unless $ok; return $ok; };
}
ok($_->(), 'pgbench ran without error') for @runs;
$node->safe_psql('app', q{CALL public.drain('hc')});
my $total = $node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE topic = 'hc'});
cmp_ok($total, '>', 1500, "$total messages appended to the topic");
is($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.message m WHERE m.topic = 'hc'
	   AND NOT EXISTS (SELECT 1 FROM public.got g WHERE g.id = m.id)}),
	'0', 'every message was claimed');
is($node->safe_psql('app', q{SELECT count(*) - count(DISTINCT id) FROM public.got}),
	'0', 'each exactly once');
is(out_of_order(), '0', 'the messages of each key were claimed in position order');

$node->stop;
done_testing();
