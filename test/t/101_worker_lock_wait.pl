# A drain worker that waits on a row lock (a session holds FOR UPDATE on a
# message whose failure the worker records) can always be stopped:
# lock_timeout ends the wait and the worker goes on with the same pid;
# pg_cancel_backend cancels the step the same way; pg_terminate_backend
# ends the worker within a second.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('lockwait');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'krizaka_outbox'
outbox.worker_databases = 'app'
outbox.worker_naptime_ms = 60000
outbox.lease_seconds = 30
outbox.backoff_seconds = 1
outbox.max_attempts = 10
});
$node->start;
my $su = $node->safe_psql('postgres', 'SELECT current_user');
my ($host, $port) = ($node->host, $node->port);
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE near');
# every delivery fails after a while: the worker then records the failure
$node->safe_psql('near',
	q{CREATE TABLE refused (id uuid, topic text, CHECK (topic <> 'slow'))});
$node->safe_psql('app', qq{
	CREATE EXTENSION krizaka_outbox;
	CREATE EXTENSION dblink;
	CREATE SERVER near FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$host', port '$port', dbname 'near');
	CREATE USER MAPPING FOR $su SERVER near OPTIONS (user '$su');
	SELECT outbox.route_remote('slow', 'near',
		'INSERT INTO public.refused (id, topic) SELECT (\$1->>''id'')::uuid, \$2 FROM pg_catalog.pg_sleep(1)');
});
my $worker_pid = q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'};
ok($node->poll_query_until('app', "SELECT count(*) = 1 FROM ($worker_pid) w"), 'the worker runs');

# Append a message, wait for its call to run, and lock its row: the worker
# then waits on that lock to record the failure.
sub worker_waits_on_lock
{
	my ($holder) = @_;
	my $id = $node->safe_psql('app', q{SELECT outbox.append('slow', 'evt', '{}')});
	$node->poll_query_until('app',
		"SELECT leased_until IS NOT NULL FROM outbox.message WHERE id = '$id'")
	  or die 'the message was not claimed';
	$holder->query_safe('BEGIN');
	$holder->query_safe("SELECT 1 FROM outbox.message WHERE id = '$id' FOR UPDATE");
	$node->poll_query_until('app',
		"SELECT wait_event_type = 'Lock' FROM ($worker_pid) w JOIN pg_stat_activity a USING (pid)")
	  or die 'the worker does not wait on the lock';
	return $id;
}

my $holder = $node->background_psql('app');

# 1. lock_timeout (set for the database) ends the wait; the worker stays.
$node->safe_psql('app', q{ALTER DATABASE app SET lock_timeout = '300ms'});
my $pid = $node->safe_psql('app', $worker_pid);
$node->safe_psql('app', "SELECT pg_terminate_backend($pid)");
ok($node->poll_query_until('app',
	"SELECT count(*) = 1 FROM ($worker_pid) w WHERE pid <> $pid"), 'the worker restarts');
$pid = $node->safe_psql('app', $worker_pid);
my $offset = -s $node->logfile;
my $id = worker_waits_on_lock($holder);
ok($node->wait_for_log(qr/canceling statement due to lock timeout/, $offset),
	'lock_timeout ends the worker\'s wait for a row lock');
usleep(200_000);
is($node->safe_psql('app', $worker_pid), $pid, 'and the worker goes on');
$holder->query_safe('ROLLBACK');
$node->safe_psql('app', q{ALTER DATABASE app RESET lock_timeout});

# 2. pg_cancel_backend cancels the step in progress; the worker stays.
$offset = -s $node->logfile;
$node->safe_psql('app', q{UPDATE outbox.message SET dead_at = pg_catalog.now() WHERE dead_at IS NULL AND delivered_at IS NULL});
worker_waits_on_lock($holder);
$node->safe_psql('app', "SELECT pg_cancel_backend($pid)");
ok($node->wait_for_log(qr/canceling statement due to user request/, $offset),
	'pg_cancel_backend cancels the worker\'s step');
usleep(200_000);
is($node->safe_psql('app', $worker_pid), $pid, 'and the worker goes on');
$holder->query_safe('ROLLBACK');

# 3. pg_terminate_backend ends it within a second, the lock still held.
$node->safe_psql('app', q{UPDATE outbox.message SET dead_at = pg_catalog.now() WHERE dead_at IS NULL AND delivered_at IS NULL});
worker_waits_on_lock($holder);
my $start = time();
$node->safe_psql('app', "SELECT pg_terminate_backend($pid)");
ok($node->poll_query_until('app', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
	'the worker ends');
my $took = time() - $start;
cmp_ok($took, '<', 1, "pg_terminate_backend ended the worker waiting on a row lock in ${took}s");
$holder->query_safe('ROLLBACK');
$holder->quit;

$node->stop('fast');
done_testing();
