# Without shared_preload_libraries there is no worker: its settings (and
# outbox.claim_positions, which sizes shared memory) refuse to be set
# (55000, with a hint), worker_status() says why, and worker settings
# left in postgresql.conf do not disturb the sessions that use the extension.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('not_preloaded');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
outbox.worker_databases = 'postgres'
outbox.worker_naptime_ms = 250
outbox.claim_positions = 4096
});
$node->start;

my $hint = 'HINT:  Add krizaka_outbox to shared_preload_libraries and restart the server.';

# Runs statements in one session, verbose errors on; returns stdout and stderr.
sub run
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return ($out, $err);
}

my ($out, $err) = run('CREATE EXTENSION krizaka_outbox');
is($err, '', 'CREATE EXTENSION is silent despite the worker settings in the file');

($out, $err) = run(q{SELECT outbox.append('t', 'evt.test.t.v1', '{}') IS NOT NULL});
is($out, 't', 'the extension works');
is($err, '', 'a new session that loads the library gets no warning');

($out, $err) = run(q{SELECT outbox.append('t', 'evt.test.t.v1', '{}') IS NOT NULL;
SHOW outbox.worker_databases;
SHOW outbox.worker_naptime_ms;
SHOW outbox.worker_role;
SHOW outbox.claim_positions});
is($out, "t\npostgres\n250\n\n4096", 'SHOW prints the values from the file');

foreach my $setting ("outbox.worker_databases = 'postgres'",
	'outbox.worker_naptime_ms = 100', "outbox.worker_role = 'x'",
	'outbox.claim_positions = 2048')
{
	my ($name) = $setting =~ /^(\S+)/;
	($out, $err) = run("LOAD 'krizaka_outbox'; SET $setting");
	like($err,
		qr/ERROR:  55000: parameter "\Q$name\E" cannot be set because krizaka_outbox is not preloaded/,
		"SET $name fails with 55000");
	like($err, qr/\Q$hint\E/, "SET $name gives the hint");
}

($out, $err) = run("LOAD 'krizaka_outbox'; ALTER SYSTEM SET outbox.worker_naptime_ms = 100");
like($err,
	qr/ERROR:  55000: parameter "outbox.worker_naptime_ms" cannot be set because krizaka_outbox is not preloaded/,
	'ALTER SYSTEM fails with 55000');
like($err, qr/\Q$hint\E/, 'ALTER SYSTEM gives the hint');
ok(slurp_file($node->data_dir . '/postgresql.auto.conf') !~ /outbox/,
	'postgresql.auto.conf is unchanged');

($out, $err) = run("LOAD 'krizaka_outbox'; ALTER DATABASE postgres SET outbox.worker_databases = 'x'");
like($err, qr/ERROR:  55000: /, 'ALTER DATABASE ... SET fails with 55000');

($out, $err) = run('SELECT * FROM outbox.worker_status()');
like($err, qr/ERROR:  55000: krizaka_outbox is not preloaded/, 'worker_status() fails with 55000');
like($err, qr/\Q$hint\E/, 'worker_status() gives the hint');

is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'krizaka_outbox%'"),
	'0',
	'no launcher and no worker');

# Without shared memory there are no claim positions: claims read each topic
# from its first message, and follow the same rules.
($out, $err) = run(q{
SELECT count(outbox.append('np', 'evt.np.v1', jsonb_build_object('n', n), NULL, NULL,
                           CASE WHEN n <= 2 THEN 'k' END))
  FROM generate_series(1, 4) n;
SELECT string_agg(payload->>'n', ',' ORDER BY seq) FROM outbox.claim('w', 'np', 10);
SELECT outbox.complete(id, 'w') FROM outbox.message WHERE topic = 'np' AND payload->>'n' = '1';
SELECT string_agg(payload->>'n', ',' ORDER BY seq) FROM outbox.claim('w', NULL, 10);
SELECT outbox.complete_many(array_agg(id), 'w') FROM outbox.message WHERE topic = 'np';
SELECT count(*) FROM outbox.claim('w', NULL, 10);
SELECT count(*) FILTER (WHERE delivered_at IS NOT NULL), count(*) FILTER (WHERE NOT deferred)
  FROM outbox.message WHERE topic = 'np'});
is($out, "4
1,3,4
t
2
3
0
4|4",
	'claims by topic and across topics hand out every message once, keys in order');
is($err, '', 'claims without preloading raise nothing');

# A session that has loaded the library stays quiet when the file is reloaded.
my $bg = $node->background_psql('postgres');
$bg->query_safe(q{SELECT outbox.append('t', 'evt.test.t.v1', '{}')});
$node->append_conf('postgresql.conf', "outbox.worker_naptime_ms = 300");
$node->reload;
is($bg->query_safe('SHOW outbox.lease_seconds'), '60', 'the session goes on after the reload');
is($bg->{stderr}, '', 'without a warning');
$bg->quit;

$node->stop;
done_testing();
