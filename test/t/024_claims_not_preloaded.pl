# Claims on a server that does not preload the library: each backend keeps
# the claim positions of its topics.  A position never passes an append
# still in progress (a transaction left open, a prepared one, this very
# transaction's own in a rolled-back savepoint), and a backend's claims do
# not read the messages finished before its position again.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('claims_not_preloaded');
$node->init;
$node->append_conf('postgresql.conf', "max_prepared_transactions = 5\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION krizaka_outbox');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_settings WHERE name = 'shared_preload_libraries' AND setting LIKE '%krizaka%'"),
	'0', 'the library is not preloaded');

# the claimer: one backend throughout, so its positions persist
my $claimer = $node->background_psql('postgres', on_error_stop => 0);

# Claims of topic p by the claimer, completed at once; the payloads' n in
# order.  Waits out the search interval first, so that the claim searches.
sub claim_p
{
	return $claimer->query_safe(q{
SELECT pg_sleep(0.02) \gset
WITH c AS (SELECT * FROM outbox.claim('w', 'p', 50, 30))
SELECT coalesce(string_agg(c.payload->>'n', ',' ORDER BY c.seq), '-')
  FROM c, LATERAL (SELECT outbox.complete(c.id, 'w')) done});
}

sub append_p
{
	my ($n) = @_;
	$node->safe_psql('postgres', "SELECT outbox.append('p', 'evt.p.v1', '{\"n\": $n}')");
}

append_p(1);
is(claim_p(), '1', 'a first claim reads the topic');

# an append left open holds the position back, not the messages after it
my $open = $node->background_psql('postgres');
$open->query_safe(q{BEGIN; SELECT outbox.append('p', 'evt.p.v1', '{"n": 2}')});
append_p(3);
append_p(4);
is(claim_p(), '3,4', 'the messages after an append left open are handed out');
append_p(5);
is(claim_p(), '5', 'and those after them');
$open->query_safe('COMMIT');
$open->quit;
is(claim_p(), '2', 'the append left open is handed out once it commits');

# a prepared append, the same
$node->safe_psql('postgres', q{BEGIN; SELECT outbox.append('p', 'evt.p.v1', '{"n": 6}'); PREPARE TRANSACTION 'p6'});
append_p(7);
is(claim_p(), '7', 'the messages after a prepared append are handed out');
$node->safe_psql('postgres', q{COMMIT PREPARED 'p6'});
is(claim_p(), '6', 'the prepared append is handed out once it commits');

# the claimer's own append, read by a claim in a savepoint rolled back
$claimer->query_safe(q{
BEGIN;
SELECT outbox.append('p', 'evt.p.v1', '{"n": 8}');
SELECT pg_sleep(0.02) \gset
SAVEPOINT s;
SELECT count(*) FROM outbox.claim('w', 'p', 50, 30);
ROLLBACK TO s;
COMMIT});
is(claim_p(), '8', 'an own append a rolled-back claim read is handed out after its commit');

# a rolled-back append is a gap the position passes
$node->psql('postgres', q{BEGIN; SELECT outbox.append('p', 'evt.p.v1', '{"n": 9}'); ROLLBACK});
append_p(10);
is(claim_p(), '10', 'a rolled-back append is never handed out');

# an append that took its position and waits before its row is in (here
# in a trigger, for a lock another session holds) holds the position back
# too: no dirty snapshot sees a row that is not there yet
$node->safe_psql('postgres', q{
CREATE FUNCTION public.wait_for_11() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.payload->>'n' = '11' THEN PERFORM pg_advisory_xact_lock_shared(42); END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER wait_for_11 BEFORE INSERT ON outbox.message
  FOR EACH ROW EXECUTE FUNCTION public.wait_for_11()});
my $holder = $node->background_psql('postgres');
$holder->query_safe('SELECT pg_advisory_lock(42)');
my $waiter = $node->background_psql('postgres');
$waiter->query_until(qr/waiting/, q{\echo waiting
SELECT outbox.append('p', 'evt.p.v1', '{"n": 11}');
});
$node->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted})
  or die 'the append never waited';
append_p(12);
is(claim_p(), '12', 'the messages after an append waiting to insert its row are handed out');
$holder->query_safe('SELECT pg_advisory_unlock(42)');
$holder->quit;
$waiter->quit;
$node->safe_psql('postgres', 'DROP TRIGGER wait_for_11 ON outbox.message; DROP FUNCTION public.wait_for_11()');
is(claim_p(), '11', 'the append that waited is handed out once it commits');

# the claimer's claims read from its position: 3,000 messages finished,
# then one claim reads the stream index from where the last one ended
$node->safe_psql('postgres', q{
SELECT count(outbox.append('p', 'evt.p.v1', jsonb_build_object('n', n)))
  FROM generate_series(100, 3099) n});
# each claim and its completion a transaction of their own, as workers do
for my $round (1 .. 60)
{
	$claimer->query_safe(q{
SELECT pg_sleep(0.006) \gset
SELECT outbox.complete_many(array_agg(c.id), 'w') FROM outbox.claim('w', 'p', 50, 30) c});
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.message WHERE topic = 'p' AND delivered_at IS NULL}),
	'0', 'the drain finished every message');
append_p(4000);
my $read = $claimer->query_safe(q{
SELECT pg_sleep(0.02) \gset
BEGIN;
SELECT pg_stat_get_xact_tuples_returned('outbox.message_stream_idx'::regclass) AS before \gset
SELECT count(*) FROM outbox.claim('w', 'p', 50, 30);
SELECT pg_stat_get_xact_tuples_returned('outbox.message_stream_idx'::regclass) - :before;
COMMIT});
my @lines = split /\n/, $read;
is($lines[0], '1', 'the claim after the drain gets the one new message');
cmp_ok($lines[1], '<', 300,
	"the claim read $lines[1] entries of the stream index, not the 3,000 finished before");

# A new backend's first claim of the topic starts from the floor saved in
# outbox.claim_position: one backend's claim searches from the floor saved
# before and saves the one it finds (the message leased above), and the
# next backend's first claim reads from there, not from the first message
# kept.
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.claim('w', 'p', 50, 30)}),
	'0', 'a claim in a new backend finds nothing due');
is($node->safe_psql('postgres', q{
SELECT c.position = m.seq FROM outbox.claim_position c, outbox.message m
 WHERE c.topic = 'p' AND m.topic = 'p' AND m.payload = '{"n": 4000}'}),
	't', 'it saved the floor of the topic\'s position: the message leased');
append_p(4001);
$read = $node->safe_psql('postgres', q{
BEGIN;
SELECT pg_stat_get_xact_tuples_returned('outbox.message_stream_idx'::regclass) AS before \gset
SELECT count(*) FROM outbox.claim('w', 'p', 50, 30);
SELECT pg_stat_get_xact_tuples_returned('outbox.message_stream_idx'::regclass) - :before;
COMMIT});
@lines = split /\n/, $read;
is($lines[0], '1', 'the first claim of the next new backend gets the new message');
cmp_ok($lines[1], '<', 300,
	"that first claim read $lines[1] entries of the stream index, not the 3,000 finished before");

# every message was handed out exactly once
is($node->safe_psql('postgres', q{
SELECT count(*), count(*) FILTER (WHERE attempts = 1)
  FROM outbox.message WHERE topic = 'p' AND delivered_at IS NOT NULL}),
	'3011|3011', 'every committed message was delivered, each on its first attempt');

$claimer->quit;
$node->stop;
done_testing();
