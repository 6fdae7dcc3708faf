# A round of the drain worker is bounded: a routed topic with 100,000
# messages on one ordering key (one message per pass) does not hold the
# worker in one round.  Another routed topic keeps p50 <= 10 ms, unroute
# takes effect within 2 s, a new route is served within 2 s, and a remote
# route's calls still complete under that load, within their deadline.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('bounded');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'krizaka_outbox'
outbox.worker_databases = 'app'
outbox.worker_naptime_ms = 60000
});
$node->start;
my $su = $node->safe_psql('postgres', 'SELECT current_user');
my ($host, $port) = ($node->host, $node->port);
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE near');
$node->safe_psql('near', 'CREATE TABLE received (id uuid PRIMARY KEY, topic text)');
$node->safe_psql('app', qq{
	CREATE EXTENSION krizaka_outbox;
	CREATE EXTENSION dblink;
	CREATE SERVER near FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$host', port '$port', dbname 'near');
	CREATE USER MAPPING FOR $su SERVER near OPTIONS (user '$su');
	SELECT outbox.route_notify('hot', 'hot_events');
	SELECT outbox.route_notify('other', 'other_events');
	SELECT outbox.route_remote('rem', 'near',
		'INSERT INTO public.received (id, topic) VALUES ((\$1->>''id'')::uuid, \$2)');
});
my $worker_pid = q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'};
ok($node->poll_query_until('app', "SELECT count(*) = 1 FROM ($worker_pid) w"), 'the worker runs');

# 100,000 messages of one ordering key: each pass delivers one of them.
$node->safe_psql('app', q{
	SELECT count(*) FROM outbox.append_batch('hot', 'evt',
		ARRAY(SELECT pg_catalog.jsonb_build_object('n', i) FROM generate_series(1, 100000) i), 'k')});
ok($node->poll_query_until('app',
	q{SELECT count(*) > 0 FROM outbox.message WHERE topic = 'hot' AND delivered_at IS NOT NULL}),
	'the worker delivers the hot topic');

# The other topic's latency, one message at a time.
for my $i (1 .. 21)
{
	my $id = $node->safe_psql('app', q{SELECT outbox.append('other', 'evt', '{}')});
	$node->poll_query_until('app',
		"SELECT delivered_at IS NOT NULL FROM outbox.message WHERE id = '$id'")
	  or die 'a message of the other topic was not delivered';
}
my $p50 = $node->safe_psql('app', q{
	SELECT pg_catalog.percentile_cont(0.5) WITHIN GROUP (
		ORDER BY pg_catalog.date_part('epoch', delivered_at - created_at) * 1000)
	  FROM outbox.message WHERE topic = 'other'});
note("other topic's latency p50: $p50 ms");
cmp_ok($p50, '<=', 10, 'another routed topic keeps p50 <= 10 ms');

# A remote route's calls complete meanwhile.
my $start = time();
my $id = $node->safe_psql('app', q{SELECT outbox.append('rem', 'evt', '{}')});
ok($node->poll_query_until('near', "SELECT count(*) = 1 FROM received WHERE id = '$id'"),
	'the remote call completes under the load');
my $took = time() - $start;
# within the call's deadline (outbox.remote_timeout_ms, 10 s): the first
# call also connects, which a machine busy with other suites can slow
cmp_ok($took, '<', 10, "within ${took}s, inside the call's deadline");

# A new route is served within 2 s.
$node->safe_psql('app', q{SELECT outbox.route_notify('fresh', 'fresh_events')});
$start = time();
$id = $node->safe_psql('app', q{SELECT outbox.append('fresh', 'evt', '{}')});
ok($node->poll_query_until('app', "SELECT delivered_at IS NOT NULL FROM outbox.message WHERE id = '$id'"),
	'a new route is served');
$took = time() - $start;
cmp_ok($took, '<', 2, "within ${took}s");

# unroute takes effect within 2 s: nothing more of the topic is delivered.
$node->safe_psql('app', q{SELECT outbox.unroute('hot')});
usleep(2_000_000);
my $before = $node->safe_psql('app',
	q{SELECT count(*) FROM outbox.message WHERE topic = 'hot' AND delivered_at IS NOT NULL});
usleep(1_000_000);
is($node->safe_psql('app',
	q{SELECT count(*) FROM outbox.message WHERE topic = 'hot' AND delivered_at IS NOT NULL}),
	$before, 'after unroute the topic is no longer delivered');
note("hot topic messages delivered before unroute: $before");
cmp_ok($before, '<', 100000, 'while most of its backlog is left');

$node->stop('fast');
done_testing();
