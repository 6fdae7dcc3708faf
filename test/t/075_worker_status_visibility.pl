# worker_status() shows an operator of one database only that database's
# worker; the names, counters and errors of the other databases' workers are
# for roles with the privileges of pg_read_all_stats (and superusers).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;

my $node = PostgreSQL::Test::Cluster->new('visibility');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'krizaka_outbox'
outbox.worker_databases = 'app, secret_db'
});
$node->start;
for my $db ('app', 'secret_db')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION krizaka_outbox');
}
$node->safe_psql('app', q{
	CREATE ROLE op LOGIN;
	GRANT USAGE ON SCHEMA outbox TO op;
	GRANT EXECUTE ON FUNCTION outbox.worker_status() TO op;
});
ok($node->poll_query_until('app',
	q{SELECT string_agg(datname || '|' || state, ',' ORDER BY datname) FROM outbox.worker_status()},
	'app|sleeping,secret_db|sleeping'), 'both workers run, and a superuser sees both');

my $op = $node->connstr('app') . ' user=op';
my $rows = q{SELECT coalesce(string_agg(datname || '|' || state, ',' ORDER BY datname), '') FROM outbox.worker_status()};
is($node->safe_psql('app', $rows, connstr => $op), 'app|sleeping', 'an operator sees the worker of its database only');
$node->safe_psql('app', 'GRANT pg_read_all_stats TO op');
is($node->safe_psql('app', $rows, connstr => $op), 'app|sleeping,secret_db|sleeping',
	'with the privileges of pg_read_all_stats it sees them all');

$node->stop;
done_testing();
