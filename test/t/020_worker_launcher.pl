# The launcher: which databases get a drain worker, as outbox.worker_databases
# and outbox.worker_role say, following reloads, CREATE EXTENSION and
# CREATE DATABASE without a restart.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('launcher');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'krizaka_outbox'");
$node->start;

# Rows of worker_status() as "datname|state", one per line.
sub status_rows
{
	return $node->safe_psql('postgres',
		"SELECT string_agg(datname || '|' || state, ',' ORDER BY datname) FROM outbox.worker_status()");
}

# The databases where a drain worker is connected, as pg_stat_activity shows them.
my $workers_query =
  "SELECT coalesce(string_agg(datname, ',' ORDER BY datname), '') FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker'";

$node->safe_psql('postgres', 'CREATE EXTENSION krizaka_outbox');

# The settings exist, with their defaults, and SHOW prints plain numbers.
is($node->safe_psql('postgres', 'SHOW outbox.worker_naptime_ms'), '5000', 'naptime default is 5000');
is($node->safe_psql('postgres', 'SHOW outbox.worker_databases'), '', 'no database by default');
is($node->safe_psql('postgres', 'SHOW outbox.worker_role'), '', 'no role by default');

# A session cannot change them: they follow the configuration file.
my ($ret, $out, $err) = $node->psql('postgres', 'SET outbox.worker_naptime_ms = 100',
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  55P02: parameter "outbox.worker_naptime_ms" cannot be changed now/,
	'SET of a worker setting is refused');

# The launcher runs alone, connected to no database.
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox launcher' AND datname IS NULL AND application_name = 'krizaka_outbox launcher'",
		'1'),
	'launcher in pg_stat_activity');
is($node->safe_psql('postgres', $workers_query), '', 'no worker while no database is named');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.worker_status()'), '0', 'no status rows');

# Three databases, two with the extension; one listed name does not exist.
$node->safe_psql('postgres', 'CREATE DATABASE db1');
$node->safe_psql('postgres', 'CREATE DATABASE db2');
$node->safe_psql('postgres', 'CREATE DATABASE "Db 3"');
$node->safe_psql('db1', 'CREATE EXTENSION krizaka_outbox');
$node->safe_psql('Db 3', 'CREATE EXTENSION krizaka_outbox');

$node->safe_psql('postgres',
	q{ALTER SYSTEM SET outbox.worker_databases = 'db1, db2,"Db 3", missing'});
$node->reload;
wait_status($node, 'Db 3|sleeping,db1|sleeping,db2|no extension,missing|no such database',
	'reload starts the listed workers, and shows the name no database has');
is($node->safe_psql('postgres', $workers_query), 'Db 3,db1',
	'workers connected to the databases with the extension');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE datname = 'db2'"),
	'0',
	'no connection is kept to the database without the extension');
is( $node->safe_psql(
		'postgres',
		"SELECT a.application_name = 'krizaka_outbox worker' AND s.started_at IS NOT NULL AND s.delivered = 0 AND s.failed = 0 AND s.last_error IS NULL
		 FROM outbox.worker_status() s JOIN pg_stat_activity a ON a.pid = s.pid WHERE s.datname = 'db1'"),
	't',
	'status row of db1 matches its pg_stat_activity row');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM outbox.worker_status() WHERE datname = 'db2' AND pid IS NULL"),
	'1',
	'the database without the extension has no pid');

is( $node->safe_psql('postgres',
		"SELECT pid IS NULL AND started_at IS NULL AND delivered = 0 AND last_error IS NULL FROM outbox.worker_status() WHERE datname = 'missing'"),
	't',
	'the missing database has a row without a process');

# The missing database is logged once, and found when it is created.
$node->wait_for_log(qr/database "missing" named in outbox.worker_databases does not exist/);
$node->safe_psql('postgres', 'CREATE DATABASE missing');
wait_status($node, 'Db 3|sleeping,db1|sleeping,db2|no extension,missing|no extension',
	'a listed database created later is looked at');
my @logged = (slurp_file($node->logfile) =~ /database "missing" named in outbox.worker_databases does not exist/g);
is(scalar(@logged), 1, 'the missing database was logged once');

# CREATE EXTENSION where it was missing: a worker within two seconds.
my $start = time;
$node->safe_psql('db2', 'CREATE EXTENSION krizaka_outbox');
wait_status($node, 'Db 3|sleeping,db1|sleeping,db2|sleeping,missing|no extension',
	'CREATE EXTENSION brings a worker');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE datname = 'db2' AND backend_type = 'krizaka_outbox worker'",
		'1'),
	'the new worker is connected');
my $took = time - $start;
cmp_ok($took, '<', 2, "worker started ${took}s after CREATE EXTENSION");

# '*': every database with the extension, found without a restart.
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.worker_databases = '*'});
$node->reload;
wait_status($node, 'Db 3|sleeping,db1|sleeping,db2|sleeping,postgres|sleeping', "'*' serves every database with the extension");
ok($node->poll_query_until('postgres', $workers_query, 'Db 3,db1,db2,postgres'),
	"with '*', no worker stays in a database without the extension");

# A database created later, from a template that has the extension: the copy
# succeeds although db1 had a worker, and both get one.
$start = time;
$node->safe_psql('postgres', 'CREATE DATABASE db5 TEMPLATE db1');
$took = time - $start;
cmp_ok($took, '<', 4, "CREATE DATABASE ... TEMPLATE db1 took ${took}s");
wait_status($node, 'Db 3|sleeping,db1|sleeping,db2|sleeping,db5|sleeping,postgres|sleeping',
	'the new database gets a worker, the template gets its worker back');

# The workers follow outbox.worker_role.
$node->safe_psql('postgres', 'CREATE ROLE outbox_runner LOGIN');
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.worker_role = 'outbox_runner'});
$node->reload;
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) FILTER (WHERE usename = 'outbox_runner') || '/' || count(*) FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker'",
		'5/5'),
	'workers restarted as the new role');

# A role that cannot log in stops them, and says why.
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.worker_role = 'no_such_role'});
$node->reload;
ok( $node->poll_query_until(
		'postgres',
		q{SELECT count(*) FROM outbox.worker_status()
		  WHERE state = 'stopped' AND pid IS NULL
		    AND last_error = 'role "no_such_role" named in outbox.worker_role does not exist'},
		'5'),
	'an unknown role stops every worker, with the reason');
is($node->safe_psql('postgres', $workers_query), '', 'no worker connected');
ok($node->log_contains(qr/WARNING:  role "no_such_role" named in outbox.worker_role does not exist/),
	'the unknown role is logged');

$node->safe_psql('postgres', 'ALTER SYSTEM RESET outbox.worker_role');
$node->reload;
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) FROM outbox.worker_status() WHERE state = 'sleeping' AND last_error IS NULL",
		'5'),
	'resetting the role brings the workers back');
is( $node->safe_psql('postgres',
		"SELECT string_agg(DISTINCT usename, ',') FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker'"),
	'postgres',
	'as the bootstrap superuser');

# Empty: no worker at all.
$node->safe_psql('postgres', 'ALTER SYSTEM RESET outbox.worker_databases');
$node->reload;
wait_status($node, '', 'an empty list stops every worker');
ok($node->poll_query_until('postgres', $workers_query, ''), 'no worker connected');

$node->stop;
done_testing();
