# The background worker delivering end to end: to a NOTIFY listener (a
# backlog in growing batches), to a second database and a second cluster
# through libpq; a failing target backs off, dies and is revived; a delayed
# message goes out on time without a short naptime; a database that gets
# the extension later is served; a SIGKILL of the worker loses nothing; a
# SIGTERM ends it within a second even while a remote command hangs.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

# The second cluster: an inbox reached with a SCRAM password.
my $far = PostgreSQL::Test::Cluster->new('far');
$far->init;
$far->append_conf('postgresql.conf', "password_encryption = 'scram-sha-256'");
$far->start;
my $far_su = $far->safe_psql('postgres', 'SELECT current_user');
$far->safe_psql('postgres', q{
	CREATE ROLE courier LOGIN PASSWORD 'courierpw';
	CREATE DATABASE inbox OWNER courier;
});
$far->safe_psql('inbox', q{
	SET ROLE courier;
	CREATE TABLE received (id uuid PRIMARY KEY, topic text, env jsonb);
});
open my $hba, '>', $far->data_dir . '/pg_hba.conf' or die $!;
print $hba "local all $far_su trust\nlocal all all scram-sha-256\n";
close $hba;
$far->reload;

# The cluster with the worker: a long naptime, so that only wake-ups and due
# times make it run; short leases and backoff so that the test stays short.
my $node = PostgreSQL::Test::Cluster->new('worker');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'krizaka_outbox'
outbox.worker_databases = 'app, late'
outbox.worker_naptime_ms = 60000
outbox.lease_seconds = 10
outbox.backoff_seconds = 1
outbox.max_attempts = 3
restart_after_crash = on
});
$node->start;
my $su = $node->safe_psql('postgres', 'SELECT current_user');
my ($host, $port, $far_host, $far_port) = ($node->host, $node->port, $far->host, $far->port);
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE near');
$node->safe_psql('near', 'CREATE TABLE received (id uuid PRIMARY KEY, topic text, env jsonb)');
$node->safe_psql('app', qq{
	CREATE EXTENSION krizaka_outbox;
	CREATE EXTENSION dblink;
	CREATE SERVER near FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$host', port '$port', dbname 'near');
	CREATE USER MAPPING FOR $su SERVER near OPTIONS (user '$su');
	CREATE SERVER far FOREIGN DATA WRAPPER dblink_fdw OPTIONS (host '$far_host', port '$far_port', dbname 'inbox');
	CREATE USER MAPPING FOR $su SERVER far OPTIONS (user 'courier', password 'courierpw');
	SELECT outbox.route_notify('live', 'live_events');
	SELECT outbox.route_remote('credits', 'near',
		'INSERT INTO public.received (id, topic, env) VALUES ((\$1->>''id'')::uuid, \$2, \$1)');
	SELECT outbox.route_remote('billing', 'far',
		'INSERT INTO public.received (id, topic, env) VALUES ((\$1->>''id'')::uuid, \$2, \$1)');
});
ok($node->poll_query_until('app',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'}),
	'the worker of app runs');

# 1. NOTIFY to a real listener; a rolled-back append never arrives.
my $listener = $node->background_psql('app');
$listener->query_safe('LISTEN live_events');
$node->safe_psql('app', q{
	SELECT outbox.append('live', 'evt.order.placed.v1', '{"orderId": 1}', '01890a5d-ac96-774b-bcce-b302099a8001');
	BEGIN; SELECT outbox.append('live', 'evt.order.placed.v1', '{"orderId": 2}'); ROLLBACK;
	SELECT outbox.append('live', 'evt.order.placed.v1', '{"orderId": 3}', '01890a5d-ac96-774b-bcce-b302099a8003');
});
my $received = '';
my $until = time() + $PostgreSQL::Test::Utils::timeout_default;
while (time() < $until)
{
	$received .= $listener->query_safe('SELECT 1');
	last if $received =~ /"orderId": 3/;
	usleep(10_000);
}
my @payloads = ($received =~ /with payload "(.*?)" received from server process/g);
is(scalar(@payloads), 2, 'the listener received two notifications');
like($payloads[0], qr/^\{"id": "01890a5d-ac96-774b-bcce-b302099a8001", "type": "evt\.order\.placed\.v1", "payload": \{"orderId": 1\}, "occurredAt": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"\}$/,
	'the first is the envelope of orderId 1');
like($payloads[1], qr/"orderId": 3/, 'the second is orderId 3');
unlike($received, qr/"orderId": 2/, 'the rolled-back append never arrives');
$listener->quit;

# 1b. A backlog on a NOTIFY route goes out in batches that double from
# outbox.batch_size (50) up to 1000 while they come back full; each batch
# is one statement, and its messages share its delivered_at.
$node->safe_psql('app', q{SELECT outbox.route_notify('backlog', 'backlog_events')});
$node->safe_psql('app', q{
	SELECT count(*) FROM (SELECT outbox.append('backlog', 'evt.backlog.v1', jsonb_build_object('n', n))
	                        FROM generate_series(1, 3000) n) s;
});
ok($node->poll_query_until('app',
	q{SELECT count(*) = 3000 FROM outbox.message WHERE topic = 'backlog' AND delivered_at IS NOT NULL}),
	'the backlog is delivered');
is($node->safe_psql('app', q{
	SELECT string_agg(n::text, ' ' ORDER BY d)
	  FROM (SELECT delivered_at AS d, count(*) AS n FROM outbox.message
	         WHERE topic = 'backlog' GROUP BY delivered_at) s}),
	'50 100 200 400 800 1000 450', 'in batches of 50, 100, 200, 400, 800, 1000 and the rest');
$node->safe_psql('app', q{
	SELECT outbox.unroute('backlog');
	DELETE FROM outbox.message WHERE topic = 'backlog';
});

# 2. A second database and a second cluster, through libpq.
$node->safe_psql('app', q{
	SELECT outbox.append('credits', 'evt.coupon.redeemed.v1', '{"redemptionId": 41}', '01890a5d-ac96-774b-bcce-b302099a8041');
	SELECT outbox.append('billing', 'evt.invoice.paid.v1', '{"invoiceId": 7}', '01890a5d-ac96-774b-bcce-b302099a8007');
});
ok($node->poll_query_until('near', q{SELECT count(*) = 1 FROM received}), 'the second database received its message');
is($node->safe_psql('near', q{SELECT id, topic, env->'payload' FROM received}),
	'01890a5d-ac96-774b-bcce-b302099a8041|credits|{"redemptionId": 41}', 'with the envelope and the topic');
ok($far->poll_query_until('inbox', q{SELECT count(*) = 1 FROM received}), 'the second cluster received its message');
is($far->safe_psql('inbox', q{SELECT id, topic, env->>'type' FROM received}),
	'01890a5d-ac96-774b-bcce-b302099a8007|billing|evt.invoice.paid.v1', 'over a password-authenticated connection');
ok($node->poll_query_until('app', q{SELECT count(*) = 4 FROM outbox.message WHERE delivered_at IS NOT NULL}),
	'every message is complete');

# 3. A failing target backs off, dies after max_attempts, and retry_dead delivers it.
$node->safe_psql('app', q{
	SELECT outbox.route_remote('audit', 'near', 'INSERT INTO public.audit_log (body) VALUES ($1)');
	SELECT outbox.append('audit', 'evt.audit.v1', '{"who": "alice"}');
});
ok($node->poll_query_until('app', q{SELECT dead_at IS NOT NULL FROM outbox.message WHERE topic = 'audit'}),
	'the failing message ends dead');
is($node->safe_psql('app', q{SELECT attempts, delivered_at IS NULL, last_error FROM outbox.message WHERE topic = 'audit'}),
	qq{3|t|42P01: relation "public.audit_log" does not exist\nCONTEXT: remote command on server "near"},
	'after max_attempts, with the remote error');
$node->safe_psql('near', 'CREATE TABLE audit_log (body jsonb)');
is($node->safe_psql('app', q{SELECT outbox.retry_dead_topic('audit')}), '1', 'revived');
ok($node->poll_query_until('near', q{SELECT count(*) = 1 FROM audit_log}), 'and delivered');

# 4. A delayed message goes out when it becomes due, not a naptime later.
$node->safe_psql('app', q{
	SELECT outbox.append('credits', 'evt.later.v1', '{}', '01890a5d-ac96-774b-bcce-b302099a8099', clock_timestamp() + interval '2 s');
});
ok($node->poll_query_until('app',
	q{SELECT delivered_at IS NOT NULL FROM outbox.message WHERE id = '01890a5d-ac96-774b-bcce-b302099a8099'}),
	'the delayed message is delivered');
my $late_ms = $node->safe_psql('app',
	q{SELECT round(extract(epoch FROM delivered_at - available_at) * 1000) FROM outbox.message WHERE id = '01890a5d-ac96-774b-bcce-b302099a8099'});
cmp_ok($late_ms, '>=', 0, 'not before its available_at');
cmp_ok($late_ms, '<', 100, "within 100 ms of its available_at ($late_ms ms)");

# 5. A database listed before it has the extension is served once it gets it.
$node->safe_psql('postgres', 'CREATE DATABASE late');
$node->safe_psql('late', q{
	CREATE EXTENSION krizaka_outbox;
	SELECT outbox.route_notify('t', 'late_events');
	SELECT outbox.append('t', 'evt.x.v1', '{}');
});
ok($node->poll_query_until('late', q{SELECT count(*) = 1 FROM outbox.message WHERE delivered_at IS NOT NULL}),
	'a database that got the extension after start is delivered');

# 6. SIGKILL of the worker while it delivers: the postmaster restarts
# everything; the messages it had leased are delivered after their lease.
$node->safe_psql('near', 'CREATE TABLE gate (open boolean); INSERT INTO gate VALUES (false)');
$node->safe_psql('app', q{
	SELECT outbox.route_remote('slow', 'near',
		'INSERT INTO public.received (id, topic, env) SELECT ($1->>''id'')::uuid, $2, $1 FROM public.gate WHERE open OR pg_sleep(60) IS NULL');
	SELECT outbox.append('slow', 'evt.slow.v1', '{"n": 1}', '01890a5d-ac96-774b-bcce-b302099a8101');
});
ok($node->poll_query_until('near',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'INSERT INTO public.received%pg_sleep%' AND state = 'active'}),
	'the worker is inside a slow remote command');
my $wpid = $node->safe_psql('app', q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'});
is($node->safe_psql('app', q{SELECT attempts, leased_until > now() FROM outbox.message WHERE topic = 'slow'}),
	'1|t', 'its claim committed: the message is leased');
my $lease_end = $node->safe_psql('app', q{SELECT leased_until FROM outbox.message WHERE topic = 'slow'});
kill 'KILL', $wpid;
$node->poll_query_until('app', 'SELECT 1', '1');
ok($node->poll_query_until('app',
	qq{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app' AND pid <> $wpid}),
	'after the crash restart the worker is back');
$node->safe_psql('near', 'UPDATE gate SET open = true');
ok($node->poll_query_until('app', q{SELECT delivered_at IS NOT NULL FROM outbox.message WHERE topic = 'slow'}),
	'the message leased by the killed worker is delivered');
is($node->safe_psql('app', qq{SELECT attempts, delivered_at >= '$lease_end' FROM outbox.message WHERE topic = 'slow'}),
	'2|t', 'on a second attempt, after the lease it held');
is($node->safe_psql('near', q{SELECT count(*) FROM received WHERE topic = 'slow'}), '1', 'once');

# 7. SIGTERM while a remote command hangs: the worker ends within a second.
$node->safe_psql('near', 'UPDATE gate SET open = false');
$node->safe_psql('app', q{SELECT outbox.append('slow', 'evt.slow.v1', '{"n": 2}')});
ok($node->poll_query_until('near',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'INSERT INTO public.received%pg_sleep%' AND state = 'active'}),
	'the worker waits on a hanging remote command');
$wpid = $node->safe_psql('app', q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'krizaka_outbox worker' AND datname = 'app'});
my $t0 = time();
kill 'TERM', $wpid;
my $gone;
while (time() - $t0 < 5)
{
	$gone = time() - $t0, last unless kill 0, $wpid;
	usleep(5_000);
}
ok(defined $gone && $gone < 1, sprintf('the worker ended %.3f s after SIGTERM', $gone // -1));
ok($node->poll_query_until('near',
	q{SELECT count(*) = 0 FROM pg_stat_activity WHERE query LIKE 'INSERT INTO public.received%pg_sleep%' AND state = 'active'}),
	'and its remote command was cancelled');

$node->stop;
$far->stop;
done_testing();
