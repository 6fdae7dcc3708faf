# The bad-input matrix (sql/bad_input.sql) seen from the server: run it on
# a cluster of its own, then let the background worker deliver a corpus of
# hostile messages (1 MB and deeply nested payloads, JSON null, SQL in
# topics, types and route commands) to a NOTIFY listener and to a remote
# database.  Afterwards the server log must show no crash of any process,
# the launcher and the worker must be the processes they were at the start,
# and everything must have arrived as it was sent.
use strict;
use warnings;
use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('bad_input');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'krizaka_outbox'
restart_after_crash = on
outbox.worker_databases = 'app'
outbox.worker_naptime_ms = 500
});
$node->start;
my $su = $node->safe_psql('postgres', 'SELECT current_user');

# The processes that must still be there at the end.
my $processes = q{SELECT string_agg(backend_type || ' ' || pid || ' ' || backend_start, ', ' ORDER BY backend_type)
  FROM pg_stat_activity WHERE backend_type LIKE 'krizaka_outbox%'};
$node->safe_psql('postgres', q{CREATE DATABASE app ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0});
$node->safe_psql('app', 'CREATE EXTENSION krizaka_outbox');
ok( $node->poll_query_until(
		'postgres', q{SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type LIKE 'krizaka_outbox%'}),
	'the launcher and the worker of app run');
my $processes_before = $node->safe_psql('postgres', $processes);
my $log_offset = -s $node->logfile;

# 1. The matrix, in a UTF8 database of its own, as pg_regress runs it.
my $root = dirname(__FILE__) . '/../..';
$node->safe_psql('postgres',
	q{CREATE DATABASE matrix ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0});
$node->safe_psql('matrix', 'CREATE EXTENSION krizaka_outbox');
my ($rc, $out, $err) = $node->psql('matrix',
	slurp_file("$root/sql/setup.sql") . slurp_file("$root/sql/bad_input.sql"));
is($rc, 0, 'the matrix ran to its end') or diag $err;
like($out, qr/^\d+\|\d+\|0\|0$/m, 'no call left anything behind or failed with an internal error');
like($out, qr/^t\|t\|t$/m, 'the same backend, postmaster and session at the end');
unlike($out, qr/STATE CHANGED/, 'no call changed the stored state');

# 2. A hostile corpus, delivered by the background worker.
$node->safe_psql('postgres', 'CREATE DATABASE sink');
$node->safe_psql('sink', q{
	CREATE TABLE received (id uuid PRIMARY KEY, topic text NOT NULL, env jsonb NOT NULL);
	CREATE TABLE victim (note text);
	INSERT INTO victim VALUES ('untouched');
});
my ($host, $port) = ($node->host, $node->port);
my $notify_topic = q{x'); DELETE FROM outbox.message; --};
my $remote_topic = q{remote "topic"; DROP TABLE victim; --};
$node->safe_psql('app', qq{
	CREATE EXTENSION dblink;
	CREATE SERVER sink FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$host', port '$port', dbname 'sink');
	CREATE USER MAPPING FOR CURRENT_USER SERVER sink OPTIONS (user '$su');
	SELECT outbox.route_notify(\$t\$$notify_topic\$t\$, 'hostile_events');
	SELECT outbox.route_remote(\$t\$$remote_topic\$t\$, 'sink',
		\$c\$INSERT INTO public.received (id, topic, env) SELECT (\$1->>'id')::uuid, \$2, \$1 WHERE '; DROP TABLE victim; --' <> ''\$c\$);
});

my $listener = $node->background_psql('app');
$listener->query_safe('LISTEN hostile_events');

my @payloads = (
	q{'null'},
	q{'{}'},
	q{'"it''s \"quoted\" \\\\ and \\u00e9"'},
	q{'[1, "two", null, {"three": [3]}]'},
	q{'-1.5e300'},
	q{to_jsonb(repeat('x', 1048576))},
	q{(repeat('[', 5000) || repeat(']', 5000))::jsonb},
	q{jsonb_build_object('sql', $s$'); DROP TABLE victim; --$s$, 'emoji', repeat(U&'\+01F600', 100))},);
my $types = q{ARRAY['evt.soak.v1', $y$evt'); DELETE FROM outbox.routes; --$y$, repeat(U&'\+01F600', 200)]};
my @appends;
for my $topic ($notify_topic, $remote_topic)
{
	for my $i (0 .. $#payloads)
	{
		push @appends,
		  "SELECT outbox.append(\$t\$$topic\$t\$, ($types)[1 + $i % 3], $payloads[$i]);";
	}
}
$node->safe_psql('app', join("\n", @appends));
my $n = scalar(@payloads);

ok( $node->poll_query_until(
		'app', q{SELECT count(*) = 0 FROM outbox.message WHERE delivered_at IS NULL}),
	'the worker delivered every hostile message');
is($node->safe_psql('app', q{SELECT count(*) FROM outbox.message WHERE attempts <> 1}),
	'0', 'each at its first attempt');

# The remote database holds the envelopes exactly as the outbox makes them.
my $local = $node->safe_psql('app', qq{
	SELECT string_agg(id || ' ' || md5(outbox.envelope(m)::text), ',' ORDER BY id)
	  FROM outbox.message m WHERE topic = \$t\$$remote_topic\$t\$});
my $remote = $node->safe_psql('sink',
	q{SELECT string_agg(id || ' ' || md5(env::text), ',' ORDER BY id) FROM received});
is($remote, $local, "the remote database received the $n envelopes as they are");
is($node->safe_psql('sink', q{SELECT DISTINCT topic FROM received}), $remote_topic, 'with the topic as it is');
is($node->safe_psql('sink', q{SELECT * FROM victim}), 'untouched', 'and nothing hidden in the data ran');

# The listener got one notification per message; the two too large for
# NOTIFY without their payload and marked truncated.
my $received = '';
my $until = time() + $PostgreSQL::Test::Utils::timeout_default;
while (time() < $until)
{
	$received .= $listener->query_safe('SELECT 1');
	last if (() = $received =~ /Asynchronous notification "hostile_events"/g) >= $n;
	usleep(50_000);
}
my @notes = ($received =~ /Asynchronous notification "hostile_events" with payload "(.*?)" received from server process/g);
is(scalar(@notes), $n, "the listener received $n notifications");
is(scalar(grep { /"truncated": true/ && !/"payload"/ } @notes), 2, 'two of them truncated, without payload');
is(scalar(grep { /"payload"/ && !/"truncated"/ } @notes), $n - 2, 'the others whole');
$listener->quit;

is($node->safe_psql('app', q{SELECT count(*) FROM outbox.routes}), '2', 'the routes are still there');

# 3. Nothing crashed: the same launcher and worker, and a clean log.
is($node->safe_psql('postgres', $processes), $processes_before, 'the launcher and the worker never restarted');
my $log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/terminated by signal|was terminated|exited with exit code|PANIC|server process \(PID/,
	'the server log shows no crash and no process that ended abnormally');

$node->stop;
done_testing();
