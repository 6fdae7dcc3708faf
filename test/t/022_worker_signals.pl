# The drain worker and the launcher under signals and failures: SIGTERM stops
# a worker within a second and the launcher restarts it; SIGHUP reloads;
# SIGKILL crash-restarts the cluster and the workers come back; a worker that
# fails says why and is restarted; a restarted launcher never leaves two
# workers in one database.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('signals');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'krizaka_outbox'
restart_after_crash = on
outbox.worker_databases = 'postgres, app'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION krizaka_outbox');
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION krizaka_outbox');

my $running_query =
  "SELECT count(*) FROM outbox.worker_status() WHERE state = 'sleeping' AND pid IS NOT NULL";

sub launcher_pid
{
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox launcher'");
}

ok($node->poll_query_until('postgres', $running_query, '2'), 'both workers run');

# SIGTERM: gone within a second, a routine exit logged at LOG, then
# restarted by the launcher.
my $pid = worker_pid($node, 'app');
my $start = time;
my $log_offset = -s $node->logfile;
kill 'TERM', $pid;
ok( $node->poll_query_until(
		'postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid", '0'),
	'SIGTERM stops the worker');
my $took = time - $start;
cmp_ok($took, '<', 1, "the worker exited ${took}s after SIGTERM");
ok($node->log_contains(qr/LOG:  krizaka_outbox worker for database "app" stopping on request/, $log_offset),
	'it says so at LOG');
ok(!$node->log_contains(qr/FATAL/, $log_offset), 'and logs no FATAL');
ok( $node->poll_query_until(
		'postgres',
		"SELECT pid <> $pid AND state = 'sleeping' AND last_error IS NULL FROM outbox.worker_status() WHERE datname = 'app'"
	),
	'the launcher restarts it');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE datname = 'app' AND backend_type = 'krizaka_outbox worker'"),
	'1',
	'one worker in the database');

# SIGHUP: the worker reloads and goes on.
$pid = worker_pid($node, 'app');
kill 'HUP', $pid;
ok( $node->poll_query_until(
		'postgres',
		"SELECT state = 'sleeping' FROM outbox.worker_status() WHERE pid = $pid"),
	'the worker survives SIGHUP');

# A worker that fails shows the error and is restarted once it can run.
$node->safe_psql('postgres', 'CREATE ROLE outbox_runner LOGIN');
$node->safe_psql('postgres', 'REVOKE CONNECT ON DATABASE app FROM PUBLIC');
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.worker_role = 'outbox_runner'});
$node->reload;
ok( $node->poll_query_until(
		'postgres',
		q{SELECT state || ': ' || last_error FROM outbox.worker_status() WHERE datname = 'app'},
		'stopped: permission denied for database "app"'),
	'a worker that cannot connect shows why');
ok( $node->poll_query_until(
		'postgres',
		"SELECT state FROM outbox.worker_status() WHERE datname = 'postgres'",
		'sleeping'),
	'the other database is not affected');
$node->safe_psql('postgres', 'GRANT CONNECT ON DATABASE app TO outbox_runner');
ok( $node->poll_query_until(
		'postgres',
		"SELECT state || '/' || (pid IS NOT NULL) FROM outbox.worker_status() WHERE datname = 'app'",
		'sleeping/true'),
	'restarted after the pause, it runs');
is( $node->safe_psql(
		'postgres', "SELECT last_error FROM outbox.worker_status() WHERE datname = 'app'"),
	'permission denied for database "app"',
	'the last error stays visible');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET outbox.worker_role');
$node->reload;
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND usename = 'postgres'",
		'2'),
	'back to the bootstrap superuser');

# A launcher that dies: the postmaster restarts it, and the new one takes
# over the workers without ever running two in a database.
my $launcher = launcher_pid();
my %old = (postgres => worker_pid($node, 'postgres'), app => worker_pid($node, 'app'));
kill 'TERM', $launcher;
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox launcher' AND pid <> $launcher",
		'1'),
	'the launcher is restarted');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) FROM outbox.worker_status() WHERE state = 'sleeping' AND pid NOT IN ($old{postgres}, $old{app})",
		'2'),
	'the new launcher runs its own workers');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(datname || ':' || n, ',' ORDER BY datname) FROM (SELECT datname, count(*) AS n FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' GROUP BY datname) w"
	),
	'app:1,postgres:1',
	'one worker per database');

# SIGKILL of a worker: the postmaster restarts everything, workers included.
$launcher = launcher_pid();
$pid = worker_pid($node, 'app');
$log_offset = -s $node->logfile;
kill 'KILL', $pid;
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset);
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox launcher' AND pid <> $launcher",
		'1'),
	'the launcher is back after the crash');
ok($node->poll_query_until('postgres', $running_query, '2'), 'both workers are back');
isnt(worker_pid($node, 'app'), $pid, 'with a new process');

$node->stop;
done_testing();
