# A remote batch claimed just before the outbox table is locked (ALTER
# TABLE, VACUUM FULL, CREATE INDEX, LOCK) cannot start its first call until
# the lock is gone.  The worker tries again every so often instead of
# spinning: over a second of the lock it uses little CPU.  Then the batch is
# delivered.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('flightlock');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'krizaka_outbox'
outbox.worker_databases = 'app'
outbox.worker_naptime_ms = 5000
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
	SELECT outbox.route_remote('rem', 'near',
		'INSERT INTO public.received (id, topic) VALUES ((\$1->>''id'')::uuid, \$2)');
	-- the claim of a batch takes a while: time to queue a table lock behind it
	CREATE FUNCTION public.slow_claim() RETURNS trigger LANGUAGE plpgsql AS \$\$
	BEGIN
		IF NEW.leased_until IS NOT NULL AND OLD.leased_until IS NULL THEN
			PERFORM pg_catalog.pg_sleep(0.5);
		END IF;
		RETURN NEW;
	END \$\$;
	CREATE TRIGGER slow_claim BEFORE UPDATE ON outbox.message
		FOR EACH ROW EXECUTE FUNCTION public.slow_claim();
});
my $worker_pid = q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'};
ok($node->poll_query_until('app', "SELECT count(*) = 1 FROM ($worker_pid) w"), 'the worker runs');
my $pid = $node->safe_psql('app', $worker_pid);

# CPU time of a process, in clock ticks
sub cpu_ticks
{
	open my $fh, '<', "/proc/$pid/stat" or die "/proc/$pid/stat: $!";
	my @f = split ' ', (split /\)/, <$fh>)[1];
	return $f[11] + $f[12];	# utime, stime
}

my $locker = $node->background_psql('app');
my $id = $node->safe_psql('app', q{SELECT outbox.append('rem', 'evt', '{}')});
ok($node->poll_query_until('app',
	"SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = $pid"),
	'the worker is claiming the batch');
# granted once the claim commits: the batch is then in flight, its tables locked
$locker->query_safe('BEGIN');
$locker->query_safe('LOCK TABLE outbox.message IN SHARE MODE');
my $before = cpu_ticks();
usleep(1_500_000);
my $used = cpu_ticks() - $before;
is($node->safe_psql('near', "SELECT count(*) FROM received WHERE id = '$id'"), '0',
	'nothing is sent while the table is locked');
cmp_ok($used, '<', 40, "the worker used $used ticks of CPU over 1.5 s of the lock, not a busy loop");
$locker->query_safe('COMMIT');
$locker->quit;

ok($node->poll_query_until('near', "SELECT count(*) = 1 FROM received WHERE id = '$id'"),
	'the batch is delivered once the lock is gone');
ok($node->poll_query_until('app', "SELECT delivered_at IS NOT NULL FROM outbox.message WHERE id = '$id'"),
	'and completed');
is($node->safe_psql('app', $worker_pid), $pid, 'by the same worker');

$node->stop('fast');
done_testing();
