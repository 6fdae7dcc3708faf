# An ordering key with a long finished history, and an append of the topic
# in progress below the claim position (a hole): a candidate of the key is
# checked against the holes one hole at a time, so a claim does not read
# the key's history (counted in index entries read; it read all of it for
# each head candidate before); the key's messages still follow one per
# claim, in order, and the message of the hole is handed out once it
# commits.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = worker_node('keyholes', '', "autovacuum = off\n");
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION krizaka_outbox;
	CREATE TABLE public.got (n bigserial, id uuid, seq bigint, key text);
});

# one claim of 50 of topic kh by $session, each message completed and
# recorded; returns how many it got
my $claim_sql = q{
	WITH c AS (SELECT * FROM outbox.claim('w', 'kh', 50, 30)),
	     d AS (INSERT INTO public.got (id, seq, key)
	           SELECT c.id, c.seq, c.ordering_key FROM c
	            WHERE outbox.complete(c.id, 'w') RETURNING 1)
	SELECT count(*) FROM d};

# 3,000 messages of key old, all claimed and completed: finished, but kept
$node->safe_psql('app', q{
	SELECT count(*) FROM outbox.append_batch('kh', 'evt.kh.v1',
		ARRAY(SELECT pg_catalog.jsonb_build_object('n', i) FROM generate_series(1, 3000) i), 'old');
});
my $session = $node->background_psql('app');
my $total = 0;
for (1 .. 3000)
{
	my $got = $session->query_safe($claim_sql);
	last if $got == 0;
	$total += $got;
}
is($total, 3000, 'the key\'s 3,000 messages were claimed and completed');

# an append in progress, then 60 more messages of the key after it
my $open = $node->background_psql('app');
$open->query_safe(q{BEGIN; SELECT outbox.append('kh', 'evt.kh.v1', '{"hole": true}')});
$node->safe_psql('app', q{
	SELECT count(outbox.append('kh', 'evt.kh.v1', pg_catalog.jsonb_build_object('n', i),
		NULL, NULL, 'old')) FROM generate_series(1, 60) i;
});

# the first claims move the position past the hole; each gets the key's head
is($session->query_safe($claim_sql), '1', 'a claim gets the head of the key');
is($session->query_safe($claim_sql), '1', 'and the next one its next message');
$session->query_safe('SELECT pg_stat_force_next_flush()');
my $before = message_index_reads($node, 'app');
is($session->query_safe($claim_sql), '1', 'and so on, with the append still in progress');
$session->query_safe('SELECT pg_stat_force_next_flush()');
my $reads = message_index_reads($node, 'app') - $before;
note("index entries read by that claim: $reads (the key's history: 3,002 messages)");
cmp_ok($reads, '<', 600, 'that claim does not read the key\'s history');

# the rest of the key, one per claim; then the hole's message, once it commits
my $claims = 0;
$claims++ while $claims < 100 && $session->query_safe($claim_sql) eq '1';
is($claims, 57, 'the key\'s other 57 messages follow, one per claim');
$open->query_safe('COMMIT');
$open->quit;
is($session->query_safe($claim_sql), '1', 'the message of the hole is handed out once it commits');
is($session->query_safe($claim_sql), '0', 'then nothing is left');
is( $node->safe_psql(
		'app', q{
		SELECT count(*) FROM (
		  SELECT seq, lag(seq) OVER (ORDER BY n) AS prev
		    FROM public.got WHERE key = 'old') x
		 WHERE prev > seq}),
	'0',
	'every message of the key was claimed in position order');
is($node->safe_psql('app', q{SELECT count(*) FROM public.got}), '3061',
	'every message was claimed once');
$session->quit;

$node->stop;
done_testing();
