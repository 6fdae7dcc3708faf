# The worker's NOTIFY route drains a backlog of deferred (retried) messages
# under a held snapshot without reading them from the first entry in each
# round: its claim marks the messages delivered in the same statement and
# now returns which of them it read as deferred, so it leaves the topic's
# hint as a lease does (src/outbox_claim_hint.c).  Before, each batch read
# message_deferred_idx from the first entry and passed every message
# delivered since the snapshot was taken: with the worker's batches grown
# to 1,000 (src/outbox_drain_pace.c), 40,000 messages cost about 20 index
# entries each.  Reading from the first entry once a second, as the hint
# wants, costs the drain one pass per second.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = PostgreSQL::Test::Cluster->new('notify_hint');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'krizaka_outbox'
autovacuum = off
outbox.worker_databases = 'app'
outbox.worker_naptime_ms = 200
outbox.batch_size = 50
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION krizaka_outbox');

my $total = 40000;
retried_backlog($node, 'app', 'n', $total);
my $held = held_snapshot($node, 'app');

my $reads_sql = q{SELECT idx_tup_read FROM pg_stat_user_indexes
	WHERE indexrelname = 'message_deferred_idx'};
my $before = $node->safe_psql('app', $reads_sql);

$node->safe_psql('app', q{SELECT outbox.route_notify('n', 'n_events')});
ok(wait_for($node, 'app', q{
	SELECT count(*) FROM outbox.message WHERE topic = 'n' AND delivered_at IS NULL}, '0', 120),
	"the worker delivered the $total retried messages while the snapshot was held");
is($node->safe_psql('app', q{
	SELECT count(*) FROM outbox.message WHERE topic = 'n' AND attempts = 2 AND dead_at IS NULL}),
	$total, 'each on its second attempt');

# the worker's counts reach the statistics when it exits
$held->quit;
$node->restart;
my $read = $node->safe_psql('app', $reads_sql) - $before;
note("index entries of message_deferred_idx read by the drain: $read");
cmp_ok($read, '<', 8 * $total,
	'the drain read fewer than 8 index entries of message_deferred_idx per message');

$node->stop;
done_testing();
