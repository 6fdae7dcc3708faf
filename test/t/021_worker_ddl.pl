# The drain worker never blocks DDL on its database: DROP EXTENSION, DROP
# DATABASE, ALTER DATABASE ... RENAME / SET TABLESPACE and CREATE DATABASE
# ... TEMPLATE complete at once, and the worker comes back when it should.
# With a naptime of a minute, every prompt reaction here comes from a wake-up.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('ddl');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'krizaka_outbox'
outbox.worker_databases = 'app, app2'
outbox.worker_naptime_ms = 60000
max_prepared_transactions = 2
});
$node->start;

# worker_status() is read from postgres, which has no worker
$node->safe_psql('postgres', 'CREATE EXTENSION krizaka_outbox');
foreach my $db ('app', 'app2')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION krizaka_outbox');
}

# Runs a statement and returns the seconds it took.
sub timed
{
	my ($db, $sql) = @_;
	my $start = time;
	$node->safe_psql($db, $sql);
	return time - $start;
}

wait_status($node, 'app|sleeping,app2|sleeping', 'both workers run');

# DROP EXTENSION: immediate, and its commit wakes the worker, which leaves.
my $took = timed('app', 'DROP EXTENSION krizaka_outbox');
cmp_ok($took, '<', 2, "DROP EXTENSION took ${took}s");
$took = wait_status($node, 'app|no extension,app2|sleeping',
	'after DROP EXTENSION the worker says the extension is missing');
cmp_ok($took, '<', 2, "worker left ${took}s after DROP EXTENSION, woken by its commit");
is( $node->safe_psql(
		'postgres', "SELECT count(*) FROM pg_stat_activity WHERE datname = 'app'"),
	'0',
	'no connection left in the database');

$took = timed('app', 'CREATE EXTENSION krizaka_outbox');
$took += wait_status($node, 'app|sleeping,app2|sleeping', 'CREATE EXTENSION brings it back');
cmp_ok($took, '<', 2, "worker back ${took}s after CREATE EXTENSION");

# Somebody who does not own the database cannot move its worker away.
$node->safe_psql('postgres', 'CREATE ROLE mallory LOGIN');
my $pid = worker_pid($node, 'app2');
my ($ret, $out, $err) =
  $node->psql('postgres', 'DROP DATABASE app2', extra_params => [ '-U', 'mallory' ]);
like($err, qr/must be owner of database app2/, 'DROP DATABASE by a non-owner fails');
is(worker_pid($node, 'app2'), $pid, 'and leaves the worker alone');

# DROP DATABASE (without FORCE) while its worker runs.
$took = timed('postgres', 'DROP DATABASE app2');
cmp_ok($took, '<', 4, "DROP DATABASE took ${took}s");
wait_status($node, 'app|sleeping,app2|no such database',
	'the dropped database, still listed, has a row that says it does not exist');
ok(!$node->log_contains(qr/is being accessed by other users/),
	'no DROP DATABASE waited on the worker');

# ALTER DATABASE ... RENAME: out of the list, the worker stays away;
# renamed back, it returns.
$took = timed('postgres', 'ALTER DATABASE app RENAME TO app_renamed');
cmp_ok($took, '<', 4, "ALTER DATABASE RENAME took ${took}s");
wait_status($node, 'app|no such database,app2|no such database',
	'a database renamed out of the list has no worker');
timed('postgres', 'ALTER DATABASE app_renamed RENAME TO app');
wait_status($node, 'app|sleeping,app2|no such database', 'renamed back, it has a worker again');

# The worker stays away while the renaming transaction is open, and returns
# when it rolls back.
my $bg = $node->background_psql('postgres');
$bg->query_safe('BEGIN');
$bg->query_safe('ALTER DATABASE app RENAME TO app_tmp');
wait_status($node, 'app|stopped,app2|no such database', 'no worker while the rename is not committed');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker'"),
	'0', 'no worker connected meanwhile');
$bg->query_safe('ROLLBACK');
wait_status($node, 'app|sleeping,app2|no such database', 'the rollback brings the worker back');
$bg->quit;

# ALTER DATABASE ... SET TABLESPACE
my $tsdir = $node->basedir . '/ts';
mkdir $tsdir or die "mkdir $tsdir: $!";
$node->safe_psql('postgres', "CREATE TABLESPACE ts LOCATION '$tsdir'");
$took = timed('postgres', 'ALTER DATABASE app SET TABLESPACE ts');
cmp_ok($took, '<', 4, "ALTER DATABASE SET TABLESPACE took ${took}s");
wait_status($node, 'app|sleeping,app2|no such database', 'the worker returns after the move');

# CREATE DATABASE ... TEMPLATE app while its worker runs.
$took = timed('postgres', 'CREATE DATABASE app_copy TEMPLATE app');
cmp_ok($took, '<', 4, "CREATE DATABASE ... TEMPLATE took ${took}s");
wait_status($node, 'app|sleeping,app2|no such database', 'the template database gets its worker back');
ok(!$node->log_contains(qr/is being accessed by other users/),
	'no statement waited on the worker');

# Waking at commit, seen through last_round_at.  Only a build whose drain
# round runs records rounds; it is checked once the worker has slept.
$node->safe_psql(
	'app', q{
CREATE FUNCTION public.wait_round(after timestamptz, timeout_ms int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    started timestamptz := clock_timestamp();
BEGIN
    LOOP
        IF EXISTS (SELECT FROM outbox.worker_status()
                   WHERE datname = current_database() AND last_round_at > after) THEN
            RETURN extract(epoch FROM clock_timestamp() - started) * 1000;
        END IF;
        IF clock_timestamp() - started > timeout_ms * interval '1 ms' THEN
            RETURN -1;
        END IF;
        PERFORM pg_sleep(0.005);
    END LOOP;
END $$});

# Only appends to a routed topic wake the worker: route 'wake', and let the
# round that the new route itself asks for pass.
my $before_route = $node->safe_psql('app',
	"SELECT coalesce(last_round_at, '-infinity') FROM outbox.worker_status() WHERE datname = 'app'");
$node->safe_psql('app', q{SELECT outbox.route_notify('wake', 'wake_events')});
$node->safe_psql('app', "SELECT public.wait_round('$before_route', 2000)");
my $last_round = $node->safe_psql('app',
	"SELECT last_round_at FROM outbox.worker_status() WHERE datname = 'app'");
SKIP:
{
	skip 'the drain round does not run in this build (last_round_at stays empty)', 7
	  if $last_round eq '';

	is((split /\n/, $node->safe_psql('app', qq{
SELECT outbox.append('unrouted', 'evt.test.wake.v1', '{}');
SELECT public.wait_round('$last_round', 500);}))[-1], '-1', 'an append to a topic without a route wakes nobody');

	my $ms = $node->safe_psql(
		'app', qq{
SELECT outbox.append('wake', 'evt.test.wake.v1', '{}');
SELECT public.wait_round('$last_round', 2000);});
	$ms = (split /\n/, $ms)[-1];
	cmp_ok($ms, '>=', 0, 'a commit that appended wakes the worker');
	cmp_ok($ms, '<', 1000, "the round followed ${ms} ms after the commit");

	$last_round = $node->safe_psql('app',
		"SELECT last_round_at FROM outbox.worker_status() WHERE datname = 'app'");
	$ms = $node->safe_psql(
		'app', qq{
BEGIN;
SELECT outbox.append('wake', 'evt.test.wake.v1', '{}');
ROLLBACK;
BEGIN;
SELECT 1;
COMMIT;
SELECT public.wait_round('$last_round', 500);});
	is((split /\n/, $ms)[-1], '-1', 'a rolled back append wakes nobody, nor the next commit');

	$last_round = $node->safe_psql('app',
		"SELECT last_round_at FROM outbox.worker_status() WHERE datname = 'app'");
	$ms = $node->safe_psql(
		'app', qq{
BEGIN;
SELECT outbox.append('wake', 'evt.test.wake.v1', '{}');
PREPARE TRANSACTION 'p1';
SELECT public.wait_round('$last_round', 500);});
	is((split /\n/, $ms)[-1], '-1', 'PREPARE TRANSACTION wakes nobody');

	$ms = $node->safe_psql(
		'app', qq{
COMMIT PREPARED 'p1';
SELECT public.wait_round('$last_round', 2000);});
	cmp_ok((split /\n/, $ms)[-1], '>=', 0, 'COMMIT PREPARED wakes the worker');

	# DDL elsewhere fills the queue of invalidations, and PostgreSQL sets the
	# latch of a sleeping worker for it to catch up: that asks for no round.
	$node->poll_query_until('app',
		qq{SELECT count(*) = 0 FROM outbox.message WHERE topic = 'wake' AND delivered_at IS NULL});
	$last_round = $node->safe_psql('app',
		"SELECT last_round_at FROM outbox.worker_status() WHERE datname = 'app'");
	$node->safe_psql('postgres', q{
DO $$
BEGIN
    FOR i IN 1..3000 LOOP
        EXECUTE format('CREATE TEMP TABLE burst_%s (a int)', i);
    END LOOP;
END $$});
	is($node->safe_psql('app', "SELECT public.wait_round('$last_round', 500)"),
		'-1', 'invalidations sent by DDL of other sessions wake nobody');
}

$node->stop;
done_testing();
